//! Shutdown with background runs in flight, including a runner that ignores
//! cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use asynctask_model::{AsyncTaskStatus, OutputObject, TerminateReason};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Runs forever; `polite` ones stop when cancelled, the others ignore it.
struct Forever {
    stopped: AtomicUsize,
}

#[async_trait::async_trait]
impl SubagentRunner for Forever {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        if request.subagent_name == "polite" {
            cancel.cancelled().await;
            self.stopped.fetch_add(1, Ordering::SeqCst);
            Err(SubagentError::new("cancelled"))
        } else {
            std::future::pending::<()>().await;
            Ok(OutputObject::new(TerminateReason::Goal))
        }
    }
}

async fn launch(runtime: &AsyncTaskRuntime, name: &str) -> String {
    let task = runtime
        .tools()
        .into_iter()
        .find(|t| t.name() == "task")
        .expect("a runner is set");
    let result = task
        .execute(
            json!({"subagent_name": name, "goal_prompt": "work", "async": true}),
            CancellationToken::new(),
        )
        .await;
    result.metadata["agentId"]
        .as_str()
        .expect("launched")
        .to_owned()
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_running_tasks_and_waits_for_their_runs() {
    let runner = Arc::new(Forever {
        stopped: AtomicUsize::new(0),
    });
    let runtime = AsyncTaskRuntime::builder()
        .runner(Arc::clone(&runner) as Arc<dyn SubagentRunner>)
        .build();
    let polite = launch(&runtime, "polite").await;
    let stubborn = launch(&runtime, "stubborn").await;
    tokio::time::sleep(Duration::from_millis(10)).await;

    let started = Instant::now();
    runtime.shutdown().await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5),
        "the stubborn runner got its grace: {waited:?}"
    );
    assert!(
        waited < asynctask_runtime::SHUTDOWN_TIMEOUT,
        "and was then aborted: {waited:?}"
    );
    assert_eq!(
        runner.stopped.load(Ordering::SeqCst),
        1,
        "the polite runner saw its cancel"
    );
    for id in [&polite, &stubborn] {
        assert_eq!(
            runtime.manager().task(id).map(|t| t.status()),
            Some(AsyncTaskStatus::Cancelled)
        );
    }
    assert!(
        runtime.manager().running_tasks().is_empty(),
        "nothing is left running"
    );
    // Idempotent, and quick the second time.
    let again = Instant::now();
    runtime.shutdown().await;
    assert_eq!(again.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_a_synchronous_run_and_refuses_new_ones() {
    let runner = Arc::new(Forever {
        stopped: AtomicUsize::new(0),
    });
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .runner(Arc::clone(&runner) as Arc<dyn SubagentRunner>)
            .build(),
    );
    let task = runtime
        .tools()
        .into_iter()
        .find(|t| t.name() == "task")
        .expect("a runner is set");
    let sync_call = tokio::spawn({
        let task = Arc::clone(&task);
        async move {
            task.execute(
                json!({"subagent_name": "polite", "goal_prompt": "work"}),
                CancellationToken::new(),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    runtime.shutdown().await;
    let answered = sync_call.await.expect("no panic");
    assert_eq!(
        answered.error.map(|e| e.message),
        Some("cancelled".to_owned())
    );
    assert_eq!(
        runner.stopped.load(Ordering::SeqCst),
        1,
        "the runner saw its cancel"
    );

    let refused = task
        .execute(
            json!({"subagent_name": "polite", "goal_prompt": "more", "async": true}),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(
        refused.llm_content,
        "The host is shutting down: no new subagent can be started."
    );
    assert!(runtime.manager().tasks().is_empty());
}

#[tokio::test(start_paused = true)]
async fn shutdown_in_memory_cancels_queued_tasks_and_starts_none() {
    use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks};
    let runner = Arc::new(Forever {
        stopped: AtomicUsize::new(0),
    });
    let runtime = AsyncTaskRuntime::builder()
        .max_async_tasks(MaxAsyncTasks::new(1).unwrap())
        .max_queued_tasks(MaxQueuedTasks::new(3).unwrap())
        .runner(Arc::clone(&runner) as Arc<dyn SubagentRunner>)
        .build();
    let running = launch(&runtime, "polite").await;
    let queued = [
        launch(&runtime, "polite").await,
        launch(&runtime, "polite").await,
    ];
    assert_eq!(runtime.manager().counts().queued, 2);
    runtime.shutdown().await;
    let status = |id: &str| runtime.manager().task(id).map(|task| task.status());
    assert_eq!(status(&running), Some(AsyncTaskStatus::Cancelled));
    for id in &queued {
        assert_eq!(status(id), Some(AsyncTaskStatus::Cancelled), "{id}");
        assert_eq!(runtime.manager().task(id).unwrap().started_at(), None);
    }
    assert_eq!(
        runner.stopped.load(Ordering::SeqCst),
        1,
        "only the running subagent ran"
    );
}
