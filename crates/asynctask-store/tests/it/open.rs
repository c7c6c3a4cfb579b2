//! Opening a store: a new one, one in use by another process (alive or dead),
//! one written by a newer schema, a damaged or foreign file.

use std::error::Error;
use std::path::Path;

use asynctask_manager::{Journal, JournalEntry, TerminalOutcome};
use asynctask_model::{AsyncTaskStatus, TaskUsage};
use asynctask_store::{SCHEMA_VERSION, Store, StoreError};
use pretty_assertions::assert_eq;

use crate::ChildProcess;
use crate::child::{GRANDCHILD_ENV, STORE_ENV};

fn store_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("tasks.db")
}

#[test]
fn a_new_store_creates_its_directory_and_records_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one").join("two").join("tasks.db");
    let (store, restored) = Store::open(&path).unwrap();
    assert!(restored.is_empty());
    assert_eq!(store.path(), path);
    let holder = std::fs::read_to_string(dir.path().join("one/two/tasks.db.lock")).unwrap();
    assert_eq!(holder, format!("{}\n", std::process::id()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for created in ["one", "one/two"] {
            let mode = std::fs::metadata(dir.path().join(created))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{created}");
        }
    }
    drop(store);
    let (_store, restored) = Store::open(&path).unwrap();
    assert!(restored.is_empty(), "reopened");
}

#[test]
fn a_second_open_in_this_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, _) = Store::open(store_path(&dir)).unwrap();
    let refused = Store::open(store_path(&dir)).unwrap_err();
    let StoreError::Locked { pid, .. } = &refused else {
        panic!("expected Locked, got {refused:?}");
    };
    assert_eq!(*pid, Some(std::process::id()));
}

#[test]
fn a_store_open_in_another_process_is_refused_naming_its_pid() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let mut holder = ChildProcess::start("hold", &[(STORE_ENV, path.display().to_string())]);
    let line = holder.next_line().expect("the holder reports");
    assert_eq!(line, format!("locked {}", holder.process.id()));

    let refused = Store::open(&path).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "the task store {} is in use by another process (pid {})",
            path.display(),
            holder.process.id()
        )
    );
    // The holder closes the store and exits: the store is ours.
    drop(holder.process.stdin.take());
    let status = holder.process.wait().unwrap();
    assert!(status.success());
    Store::open(&path).unwrap();
}

#[cfg(unix)]
#[test]
fn a_lock_held_by_a_killed_process_is_free_even_while_its_subagents_live() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let mut holder = ChildProcess::start(
        "hold",
        &[
            (STORE_ENV, path.display().to_string()),
            (GRANDCHILD_ENV, "1".to_owned()),
        ],
    );
    let grandchild: i32 = holder
        .next_line()
        .and_then(|line| line.strip_prefix("grandchild ")?.parse().ok())
        .expect("the holder starts a subagent");
    assert!(
        holder
            .next_line()
            .is_some_and(|line| line.starts_with("locked"))
    );
    assert!(matches!(Store::open(&path), Err(StoreError::Locked { .. })));

    holder.kill(); // SIGKILL: no destructor runs, the lock file stays behind
    let grandchild = Pid::from_raw(grandchild);
    assert_eq!(
        kill(grandchild, None),
        Ok(()),
        "the subagent outlives its host"
    );
    let opened = Store::open(&path);
    let _ = kill(grandchild, Signal::SIGKILL);
    let (_store, _) = opened.expect("a dead holder's lock is free");
}

#[test]
fn a_store_written_by_a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    drop(Store::open(&path).unwrap());
    let newer = SCHEMA_VERSION + 98;
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .pragma_update(None, "user_version", newer)
        .unwrap();
    connection
        .pragma_update(None, "journal_mode", "delete")
        .unwrap();
    drop(connection);

    let refused = Store::open(&path).unwrap_err();
    assert!(matches!(
        refused,
        StoreError::NewerSchema { found, supported, .. } if found == newer && supported == SCHEMA_VERSION
    ));
    assert_eq!(
        refused.to_string(),
        format!(
            "the task store {} has schema version {newer}, newer than the version {SCHEMA_VERSION} \
             this asynctask knows: use a newer asynctask, or another store",
            path.display()
        )
    );
    let connection = rusqlite::Connection::open(&path).unwrap();
    let mode: String = connection
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "not even its journal mode was changed");
}

/// The version 1 schema, as stores written before queued tasks hold it.
const SCHEMA_V1: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) STRICT;
CREATE TABLE tasks (
    seq              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE CHECK (id <> ''),
    subagent_name    TEXT NOT NULL,
    goal_prompt      TEXT NOT NULL,
    origin           TEXT,
    pid              INTEGER NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    launched_at      INTEGER NOT NULL,
    completed_at     INTEGER,
    finish_order     INTEGER NOT NULL DEFAULT 0,
    notified_at      INTEGER,
    terminate_reason TEXT,
    emitted_vars     TEXT,
    final_message    TEXT,
    error            TEXT,
    CHECK ((status = 'running') = (completed_at IS NULL)),
    CHECK (status <> 'running' OR notified_at IS NULL),
    CHECK ((status = 'completed') = (terminate_reason IS NOT NULL AND emitted_vars IS NOT NULL)),
    CHECK (status = 'completed' OR final_message IS NULL),
    CHECK ((status = 'failed') = (error IS NOT NULL))
) STRICT;
INSERT INTO meta VALUES ('created_by', 'asynctask-store 0.1.0');
INSERT INTO tasks (id, subagent_name, goal_prompt, origin, pid, status, launched_at,
                   completed_at, finish_order, notified_at, terminate_reason, emitted_vars,
                   final_message, error)
VALUES ('done', 'researcher', 'map it', 'alice', 1, 'completed', 1000, 4000, 1, 5000,
        'GOAL', '{\"summary\":\"ok\"}', 'all mapped', NULL),
       ('broke', 'tester', 'test it', NULL, 1, 'failed', 2000, 6000, 2, NULL,
        NULL, NULL, NULL, 'boom'),
       ('going', 'writer', 'write it', NULL, 1, 'running', 3000, NULL, 0, NULL,
        NULL, NULL, NULL, NULL);
PRAGMA user_version = 1;
";

#[test]
fn a_version_1_store_is_migrated_keeping_every_task() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection.execute_batch(SCHEMA_V1).unwrap();
    drop(connection);

    let (store, restored) = Store::open(&path).unwrap();
    let seen: Vec<_> = restored
        .iter()
        .map(|task| {
            (
                task.info.id.as_str(),
                task.info.status,
                task.info.started_at,
                task.info.completed_at,
                task.info.notified_at,
                task.origin.as_deref(),
                task.launch.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "done",
                AsyncTaskStatus::Completed,
                Some(1000),
                Some(4000),
                Some(5000),
                Some("alice"),
                None
            ),
            (
                "broke",
                AsyncTaskStatus::Failed,
                Some(2000),
                Some(6000),
                None,
                None,
                None
            ),
            (
                "going",
                AsyncTaskStatus::Running,
                Some(3000),
                None,
                None,
                None,
                None
            ),
        ],
        "a task that ran before the queue existed started when it was launched"
    );
    let output = restored[0]
        .info
        .output
        .as_ref()
        .expect("the completed output");
    assert_eq!(output.emitted_vars["summary"], "ok");
    assert_eq!(restored[1].info.error.as_deref(), Some("boom"));
    drop(store);

    let connection = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // The new checks hold: a queued row without a start is accepted now.
    connection
        .execute(
            "INSERT INTO tasks (id, subagent_name, goal_prompt, pid, status, launched_at) \
             VALUES ('waits', 'writer', 'later', 1, 'queued', 7000)",
            [],
        )
        .unwrap();
    drop(connection);
    let (_store, reopened) = Store::open(&path).unwrap();
    assert_eq!(reopened.len(), 4, "opened again without another migration");
    assert_eq!(reopened[3].info.status, AsyncTaskStatus::Queued);
    assert_eq!(reopened[3].info.started_at, None);
}

/// The version 2 schema, as stores written before usage hold it.
pub(crate) const SCHEMA_V2: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) STRICT;
CREATE TABLE tasks (
    seq              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE CHECK (id <> ''),
    subagent_name    TEXT NOT NULL,
    goal_prompt      TEXT NOT NULL,
    origin           TEXT,
    pid              INTEGER NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    launched_at      INTEGER NOT NULL,
    started_at       INTEGER,
    completed_at     INTEGER,
    finish_order     INTEGER NOT NULL DEFAULT 0,
    notified_at      INTEGER,
    terminate_reason TEXT,
    emitted_vars     TEXT,
    final_message    TEXT,
    error            TEXT,
    launch           TEXT,
    CHECK ((status IN ('queued', 'running')) = (completed_at IS NULL)),
    CHECK (status NOT IN ('queued', 'running') OR notified_at IS NULL),
    CHECK (status <> 'queued' OR started_at IS NULL),
    CHECK (status <> 'running' OR started_at IS NOT NULL),
    CHECK ((status = 'completed') = (terminate_reason IS NOT NULL AND emitted_vars IS NOT NULL)),
    CHECK (status = 'completed' OR final_message IS NULL),
    CHECK ((status = 'failed') = (error IS NOT NULL))
) STRICT;
INSERT INTO meta VALUES ('created_by', 'asynctask-store 0.1.0');
INSERT INTO tasks (id, subagent_name, goal_prompt, origin, pid, status, launched_at, started_at,
                   completed_at, finish_order, notified_at, terminate_reason, emitted_vars,
                   final_message, error, launch)
VALUES ('done', 'researcher', 'map it', 'alice', 1, 'completed', 1000, 1500, 4000, 1, 5000,
        'GOAL', '{\"summary\":\"ok\"}', 'all mapped', NULL, NULL),
       ('going', 'writer', 'write it', NULL, 1, 'running', 3000, 3000, NULL, 0, NULL,
        NULL, NULL, NULL, NULL, NULL);
PRAGMA user_version = 2;
";

#[test]
fn a_version_2_store_is_read_as_it_is_and_migrated_to_keep_usage() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection.execute_batch(SCHEMA_V2).unwrap();
    drop(connection);

    // `supervisor status` beside a supervisor of the previous release.
    let read = Store::read_only(&path).unwrap();
    assert_eq!(
        read.iter()
            .map(|task| (
                task.info.id.as_str(),
                task.info.status,
                task.info.usage.clone()
            ))
            .collect::<Vec<_>>(),
        [
            ("done", AsyncTaskStatus::Completed, None),
            ("going", AsyncTaskStatus::Running, None)
        ]
    );

    let (store, restored) = Store::open(&path).unwrap();
    assert_eq!(
        restored
            .iter()
            .map(|task| task.info.clone())
            .collect::<Vec<_>>(),
        read.iter()
            .map(|task| task.info.clone())
            .collect::<Vec<_>>(),
        "every task kept as it was"
    );
    let usage = TaskUsage::new()
        .with_input_tokens(12_345)
        .with_output_tokens(678)
        .with_cost_usd(0.0421)
        .with_model("claude-sonnet-4-5");
    store
        .record(&[JournalEntry::Finished {
            id: "going",
            outcome: TerminalOutcome::Failed("exit status 1"),
            completed_at: 9_000,
            finish_order: 2,
            usage: Some(&usage),
        }])
        .unwrap();
    drop(store);

    let connection = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let stored: String = connection
        .query_row("SELECT usage FROM tasks WHERE id = 'going'", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(
        stored,
        r#"{"input_tokens":12345,"output_tokens":678,"cost_usd":0.0421,"model":"claude-sonnet-4-5"}"#
    );
    drop(connection);
    let (_store, reopened) = Store::open(&path).unwrap();
    assert_eq!(
        reopened
            .iter()
            .map(|task| task.info.usage.clone())
            .collect::<Vec<_>>(),
        [None, Some(usage)],
        "opened again without another migration"
    );
}

#[test]
fn a_usage_that_is_not_a_usage_object_is_refused_naming_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    drop(Store::open(&path).unwrap());
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .execute(
            "INSERT INTO tasks (id, subagent_name, goal_prompt, pid, status, launched_at, \
             started_at, completed_at, usage) \
             VALUES ('odd', 'writer', 'g', 1, 'cancelled', 1, 1, 2, '{\"cost_usd\":-3}')",
            [],
        )
        .unwrap();
    drop(connection);
    let Err(err) = Store::open(&path) else {
        panic!("a bad usage was read back");
    };
    assert!(
        matches!(&err, StoreError::InvalidTask { id, .. } if id == "odd"),
        "{err}"
    );
    assert!(
        err.to_string().contains("its usage is not a usage object"),
        "{err}"
    );
}

fn assert_corrupt(path: &Path) {
    let error = Store::open(path).expect_err("a damaged file is refused");
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "the task store {} is not a database or is damaged",
            path.display()
        )
    );
    assert!(error.source().is_some(), "SQLite's own error is kept");
}

#[test]
fn a_file_that_is_not_a_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    std::fs::write(&path, "{\"tasks\": []}\n".repeat(100)).unwrap();
    assert_corrupt(&path);
}

#[test]
fn a_damaged_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let (store, _) = Store::open(&path).unwrap();
    let manager = asynctask_manager::AsyncTaskManager::restore(
        asynctask_model::MaxAsyncTasks::UNLIMITED,
        std::sync::Arc::new(asynctask_model::SystemClock),
        std::sync::Arc::new(store),
        Vec::new(),
    )
    .unwrap();
    for n in 0..300 {
        let id = format!("task-{n}");
        manager
            .register_task(asynctask_manager::RegisterTaskInput::new(
                &*id,
                "tester",
                "x".repeat(200),
            ))
            .unwrap();
    }
    drop(manager);
    let wal = path.with_extension("db-wal");
    assert!(!wal.exists(), "closing the store checkpointed its log");
    // Scribble over everything after the file's 100-byte header: the schema
    // and the tasks no longer parse.
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 16_384, "several pages");
    for byte in &mut bytes[100..] {
        *byte = 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    assert_corrupt(&path);
}

#[test]
fn another_applications_database_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        .unwrap();
    drop(connection);
    let error = Store::open(&path).unwrap_err();
    assert!(matches!(error, StoreError::NotAStore { .. }), "{error:?}");
    assert!(error.to_string().contains(&path.display().to_string()));
}

#[test]
fn a_directory_that_cannot_be_created_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let error = Store::open(file.join("tasks.db")).unwrap_err();
    assert!(matches!(error, StoreError::CreateDir { .. }), "{error:?}");
    assert!(error.source().is_some());
}

#[test]
fn a_store_being_created_reads_as_empty_and_another_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    // Its supervisor has made the file and not yet its schema.
    drop(rusqlite::Connection::open(&path).unwrap());
    std::fs::write(&path, b"").unwrap();
    assert!(Store::read_only(&path).unwrap().is_empty());
    let other = dir.path().join("other.db");
    let connection = rusqlite::Connection::open(&other).unwrap();
    connection
        .execute_batch("CREATE TABLE notes (text TEXT);")
        .unwrap();
    drop(connection);
    assert!(matches!(
        Store::read_only(&other),
        Err(asynctask_store::StoreError::NotAStore { .. })
    ));
}
