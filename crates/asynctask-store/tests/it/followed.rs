//! The tasks clients follow as MCP Tasks: recorded beside their tasks, kept
//! across a reopen, gone with their task, and a store of version 3 (before
//! them) read as it is and migrated.

use asynctask_manager::{Journal, JournalEntry, TerminalOutcome};
use asynctask_store::{SCHEMA_VERSION, Store};
use pretty_assertions::assert_eq;

use crate::open::SCHEMA_V2;

fn registered(id: &str, launched_at: u64) -> JournalEntry<'_> {
    JournalEntry::Registered {
        id,
        subagent_name: "researcher",
        goal_prompt: "map the code",
        launched_at,
        origin: Some("session-1"),
        queued: false,
        launch: None,
    }
}

#[test]
fn followed_tasks_survive_a_reopen_and_go_with_their_task() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let (store, _) = Store::open(&path).unwrap();
    store
        .record(&[
            registered("a1", 1_000),
            registered("b2", 2_000),
            registered("c3", 3_000),
        ])
        .unwrap();
    assert_eq!(store.followed().unwrap(), []);
    store.follow("b2", 2_500).unwrap();
    store.follow("a1", 1_500).unwrap();
    store.follow("a1", 1_000).unwrap(); // adopted again, from its launch
    drop(store);

    let (store, restored) = Store::open(&path).unwrap();
    assert_eq!(restored.len(), 3, "following changes no task");
    assert_eq!(
        store.followed().unwrap(),
        [("a1".to_owned(), 1_000), ("b2".to_owned(), 2_500)],
        "in registration order, the latest time"
    );
    store
        .record(&[
            JournalEntry::Finished {
                id: "a1",
                outcome: TerminalOutcome::Cancelled,
                completed_at: 4_000,
                finish_order: 1,
                usage: None,
            },
            JournalEntry::Notified {
                id: "a1",
                notified_at: 4_500,
            },
            JournalEntry::Removed { id: "a1" },
        ])
        .unwrap();
    assert_eq!(store.followed().unwrap(), [("b2".to_owned(), 2_500)]);
    store.follow("a1", 5_000).unwrap(); // pruned already: nothing to mark
    assert_eq!(store.followed().unwrap(), [("b2".to_owned(), 2_500)]);
}

#[test]
fn a_version_3_store_is_read_as_it_is_and_migrated_to_keep_followed_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let v3 = SCHEMA_V2.replace(
        "PRAGMA user_version = 2;",
        "ALTER TABLE tasks ADD COLUMN usage TEXT;\nPRAGMA user_version = 3;",
    );
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection.execute_batch(&v3).unwrap();
    drop(connection);

    // `supervisor status` beside a supervisor of the previous release.
    let read = Store::read_only(&path).unwrap();
    let ids = |tasks: &[asynctask_manager::StoredTask]| {
        tasks
            .iter()
            .map(|task| task.info.id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&read), ["done", "going"]);

    let (store, restored) = Store::open(&path).unwrap();
    assert_eq!(ids(&restored), ["done", "going"], "every task kept");
    assert_eq!(store.followed().unwrap(), [], "nothing was followed before");
    store.follow("going", 3_100).unwrap();
    drop(store);

    let connection = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    drop(connection);
    assert_eq!(ids(&Store::read_only(&path).unwrap()), ["done", "going"]);
    let (store, _) = Store::open(&path).unwrap();
    assert_eq!(
        store.followed().unwrap(),
        [("going".to_owned(), 3_100)],
        "opened again without another migration"
    );
}
