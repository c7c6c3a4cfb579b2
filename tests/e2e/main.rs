//! End-to-end tests: the layers together, as a host uses them.

use asynctask_model::{AsyncTaskInfo, MaxAsyncTasks, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

#[test]
fn a_task_snapshot_survives_the_json_boundary() {
    let mut task = AsyncTaskInfo::new("0f3a9c21-1", "researcher", "map the code", 1_000);
    assert!(task.complete(
        OutputObject::new(TerminateReason::Goal).with_var("files", "12"),
        4_000
    ));
    let wire = serde_json::to_string(&task).expect("serializes");
    let back: AsyncTaskInfo = serde_json::from_str(&wire).expect("deserializes");
    assert_eq!(back, task);
    assert_eq!(MaxAsyncTasks::default().history_limit(), 10);
}
