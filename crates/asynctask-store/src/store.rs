//! `Store`: the SQLite database, the lock that keeps it to one process, its
//! schema, and the journal it implements.

use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use asynctask_manager::{Journal, JournalEntry, JournalError, StoredTask, TerminalOutcome};
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use crate::error::StoreError;
use crate::row::{Row, encode_usage, encode_vars, from_sql, to_sql};

/// The schema version this crate reads and writes (`PRAGMA user_version`). A
/// store with a higher one was written by a newer asynctask and is refused; a
/// store of version 1 (before queued tasks), 2 (before usage) or 3 (before
/// followed tasks) is migrated when opened.
pub const SCHEMA_VERSION: i64 = 4;

/// The schema, created in one transaction with its version. The `CHECK`s
/// restate the model's rules, so that no write can store a task the model
/// could not hold.
const META_TABLE: &str = "
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;
";

/// The columns and checks of the `tasks` table.
const TASKS_COLUMNS: &str = "
    -- Registration order.
    seq              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE CHECK (id <> ''),
    subagent_name    TEXT NOT NULL,
    goal_prompt      TEXT NOT NULL,
    origin           TEXT,
    -- The process that registered the task, for an interrupted task's error.
    pid              INTEGER NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    -- Times are Unix milliseconds, stored as the bits of a u64.
    launched_at      INTEGER NOT NULL,
    -- When its subagent started (NULL while queued, and for a task
    -- cancelled in the queue).
    started_at       INTEGER,
    completed_at     INTEGER,
    -- The order in which tasks ended (ties in completed_at).
    finish_order     INTEGER NOT NULL DEFAULT 0,
    notified_at      INTEGER,
    -- A completed task's output: the terminate reason, the emitted variables
    -- as a JSON object, the final message.
    terminate_reason TEXT,
    emitted_vars     TEXT,
    final_message    TEXT,
    -- A failed task's error.
    error            TEXT,
    -- What the task was launched with (a queued task starts with it).
    launch           TEXT,
    -- What a finished task used, as its runner reported it: a JSON object.
    usage            TEXT,
    -- Since when a client follows it as an MCP Task (NULL: none does).
    followed_at      INTEGER,
    CHECK ((status IN ('queued', 'running')) = (completed_at IS NULL)),
    CHECK (status NOT IN ('queued', 'running') OR notified_at IS NULL),
    CHECK (status <> 'queued' OR started_at IS NULL),
    CHECK (status <> 'running' OR started_at IS NOT NULL),
    CHECK ((status = 'completed') = (terminate_reason IS NOT NULL AND emitted_vars IS NOT NULL)),
    CHECK (status = 'completed' OR final_message IS NULL),
    CHECK ((status = 'failed') = (error IS NOT NULL))
";

/// The schema of a new store: the `meta` table and the `tasks` table.
fn schema() -> String {
    format!("{META_TABLE}CREATE TABLE tasks ({TASKS_COLUMNS}) STRICT;")
}

/// Version 1 to this version: the `queued` status, `started_at` (a task that
/// ran started at its launch: there was no queue), `launch` and `usage`.
/// SQLite cannot change a table's checks, so the table is rebuilt, in the
/// transaction that sets the new version.
fn migration_from_1() -> String {
    format!(
        "CREATE TABLE tasks_v2 ({TASKS_COLUMNS}) STRICT;
INSERT INTO tasks_v2
    (seq, id, subagent_name, goal_prompt, origin, pid, status, launched_at, started_at,
     completed_at, finish_order, notified_at, terminate_reason, emitted_vars, final_message,
     error, launch)
SELECT seq, id, subagent_name, goal_prompt, origin, pid, status, launched_at, launched_at,
       completed_at, finish_order, notified_at, terminate_reason, emitted_vars, final_message,
       error, NULL
FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_v2 RENAME TO tasks;"
    )
}

/// Version 2 to 3: `usage` (NULL: no task reported any before).
const MIGRATION_2_TO_3: &str = "ALTER TABLE tasks ADD COLUMN usage TEXT;";

/// Version 3 to 4: `followed_at` (NULL: no client followed a task before).
const MIGRATION_3_TO_4: &str = "ALTER TABLE tasks ADD COLUMN followed_at INTEGER;";

/// How hard the store works to keep what it was told.
///
/// Both keep every journaled change across a **crash of the process** (a
/// panic, `SIGKILL`, an abort): SQLite's write-ahead log is written before each
/// change is acknowledged, and the operating system keeps written data when a
/// process dies. They differ on a **power loss or an operating-system crash**:
///
/// - [`PowerLoss`](Self::PowerLoss) (`PRAGMA synchronous = FULL`, the default):
///   the log is flushed to the disk (`fsync`) at every change, so a change is
///   on the disk before the manager makes it visible. Costs one `fsync` per
///   change (see `docs/benchmarks.md`).
/// - [`ProcessCrash`](Self::ProcessCrash) (`PRAGMA synchronous = NORMAL`): the
///   log is flushed only at checkpoints. A power loss can roll back the changes
///   since the last checkpoint — results delivered again (a lost
///   `mark_notified`), finished tasks back as interrupted, registrations
///   forgotten — but never corrupts the store.
///
/// # Examples
///
/// ```
/// use asynctask_store::{Durability, Store};
///
/// let dir = tempfile::tempdir()?;
/// let (store, _) = Store::open_with(dir.path().join("tasks.db"), Durability::ProcessCrash)?;
/// assert_eq!(store.durability(), Durability::ProcessCrash);
/// assert_eq!(Durability::default(), Durability::PowerLoss);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// Every change survives a power loss: `synchronous = FULL`.
    #[default]
    PowerLoss,
    /// Every change survives a crash of the process; a power loss may roll
    /// back the latest ones: `synchronous = NORMAL`.
    ProcessCrash,
}

impl Durability {
    fn synchronous(self) -> &'static str {
        match self {
            Durability::PowerLoss => "FULL",
            Durability::ProcessCrash => "NORMAL",
        }
    }
}

/// An embedded SQLite store of background tasks: a [`Journal`] for
/// [`AsyncTaskManager::restore`](asynctask_manager::AsyncTaskManager::restore),
/// and what it held when it was opened.
///
/// One process at a time: [`open`](Self::open) takes an exclusive lock on
/// `<path>.lock` for the store's life, so a second process (or a second open in
/// this one) is refused with [`StoreError::Locked`], naming the holder's pid.
/// The operating system releases the lock when its holder dies, however it
/// dies, so a crashed host never keeps the store locked; the lock file is
/// opened close-on-exec, so subagent processes that outlive their host do not
/// hold it either.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, SystemClock};
/// use asynctask_store::Store;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("state").join("tasks.db");
/// let (store, restored) = Store::open(&path)?;
/// assert!(restored.is_empty(), "a new store");
/// let manager = AsyncTaskManager::restore(MaxAsyncTasks::default(), Arc::new(SystemClock), Arc::new(store), restored)?;
/// manager.register_task(RegisterTaskInput::new("7f3a09c1", "researcher", "map the code"))?;
/// drop(manager); // the process ends with the task still running
///
/// let (_store, restored) = Store::open(&path)?;
/// assert_eq!(restored[0].info.status, AsyncTaskStatus::Running, "as it was journaled");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Store {
    path: PathBuf,
    durability: Durability,
    /// This process, recorded with each task it registers.
    pid: u32,
    connection: Mutex<Connection>,
    /// Declared last, so released after the connection is closed.
    _lock: LockFile,
}

impl Store {
    /// Opens (or creates) the store at `path` with [`Durability::PowerLoss`],
    /// and returns it with the tasks it holds, in registration order — what to
    /// give [`AsyncTaskManager::restore`](asynctask_manager::AsyncTaskManager::restore)
    /// along with the store.
    ///
    /// A missing parent directory is created (mode 0700 on Unix: the store
    /// holds goals and results).
    ///
    /// # Errors
    ///
    /// [`StoreError::Locked`] when another process holds the store;
    /// [`StoreError::Corrupt`] for a file that is not an SQLite database or is
    /// damaged; [`StoreError::NotAStore`] for another application's database;
    /// [`StoreError::NewerSchema`] for a store written by a newer asynctask;
    /// [`StoreError::InvalidTask`] for a task that cannot be read back; and
    /// [`StoreError::CreateDir`], [`StoreError::Lock`] or
    /// [`StoreError::Sqlite`] when the file system or SQLite fail. Every error
    /// names the path; none panics.
    pub fn open(path: impl AsRef<Path>) -> Result<(Store, Vec<StoredTask>), StoreError> {
        Store::open_with(path, Durability::default())
    }

    /// [`open`](Self::open) with the given [`Durability`].
    ///
    /// # Errors
    ///
    /// As for [`open`](Self::open).
    pub fn open_with(
        path: impl AsRef<Path>,
        durability: Durability,
    ) -> Result<(Store, Vec<StoredTask>), StoreError> {
        let path = path.as_ref().to_path_buf();
        create_parent(&path)?;
        let lock = LockFile::acquire(&path)?;
        create_private(&path);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection =
            Connection::open_with_flags(&path, flags).map_err(|source| failed(&path, source))?;
        let store = Store {
            path,
            durability,
            pid: std::process::id(),
            connection: Mutex::new(connection),
            _lock: lock,
        };
        store.prepare()?;
        let tasks = store.load()?;
        tracing::debug!(path = %store.path.display(), tasks = tasks.len(), "task store opened");
        Ok((store, tasks))
    }

    /// The database's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How hard the store works to keep what it was told.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A connection whose holder panicked is still a connection: SQLite
        // rolls back a transaction that was not committed.
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, source: rusqlite::Error) -> StoreError {
        failed(&self.path, source)
    }

    /// Checks the schema version, sets the journal mode and durability, and
    /// creates the schema in a new store.
    fn prepare(&self) -> Result<(), StoreError> {
        let mut connection = self.connection();
        // The first read of the file: a file that is not a database fails here.
        let version: i64 = connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|source| self.failed(source))?;
        if version > SCHEMA_VERSION {
            // Left as it is: not even its journal mode is changed.
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let mode: String = connection
            .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
            .map_err(|source| self.failed(source))?;
        if !mode.eq_ignore_ascii_case("wal") {
            // Still crash-safe (a rollback journal), only slower.
            tracing::warn!(path = %self.path.display(), mode, "the task store cannot use WAL mode");
        }
        connection
            .pragma_update(None, "synchronous", self.durability.synchronous())
            .map_err(|source| self.failed(source))?;
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        let migration = match version {
            1 => Some(migration_from_1()),
            2 => Some(format!("{MIGRATION_2_TO_3}\n{MIGRATION_3_TO_4}")),
            3 => Some(MIGRATION_3_TO_4.to_owned()),
            _ => None,
        };
        if let Some(migration) = migration {
            let tx = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|source| self.failed(source))?;
            tx.execute_batch(&migration)
                .and_then(|()| tx.pragma_update(None, "user_version", SCHEMA_VERSION))
                .and_then(|()| tx.commit())
                .map_err(|source| self.failed(source))?;
            tracing::info!(path = %self.path.display(), "the task store was migrated to schema version {SCHEMA_VERSION}");
            return Ok(());
        }
        let tables: i64 = connection
            .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
            .map_err(|source| self.failed(source))?;
        if version != 0 || tables != 0 {
            return Err(StoreError::NotAStore {
                path: self.path.clone(),
            });
        }
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.failed(source))?;
        tx.execute_batch(&schema())
            .and_then(|()| {
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('created_by', ?1)",
                    [concat!("asynctask-store ", env!("CARGO_PKG_VERSION"))],
                )
            })
            .and_then(|_| tx.pragma_update(None, "user_version", SCHEMA_VERSION))
            .and_then(|()| tx.commit())
            .map_err(|source| self.failed(source))
    }

    /// The tasks the store holds now, in registration order (what
    /// [`open`](Self::open) returned, plus every change journaled since).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidTask`] for a task that cannot be read back,
    /// [`StoreError::Corrupt`] or [`StoreError::Sqlite`] when SQLite fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{Journal, JournalEntry};
    /// use asynctask_store::Store;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let (store, _) = Store::open(dir.path().join("tasks.db"))?;
    /// store.record(&[JournalEntry::Registered {
    ///     id: "a1", subagent_name: "tester", goal_prompt: "run the suite", launched_at: 1_000, origin: None,
    ///     queued: false, launch: None,
    /// }])?;
    /// assert_eq!(store.load()?[0].info.id, "a1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(&self) -> Result<Vec<StoredTask>, StoreError> {
        load_tasks(&self.connection(), &self.path, SCHEMA_VERSION)
    }

    /// Records that a client follows task `id` as an MCP Task since `since`
    /// (Unix ms), replacing an earlier time; committed (and, with
    /// [`Durability::PowerLoss`], flushed) before this returns. A task the
    /// store does not hold (pruned already) is left as it is. The mark goes
    /// with its task when the task is removed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] or [`StoreError::Sqlite`] when SQLite fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{Journal, JournalEntry};
    /// use asynctask_store::Store;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let (store, _) = Store::open(dir.path().join("tasks.db"))?;
    /// store.record(&[JournalEntry::Registered {
    ///     id: "a1", subagent_name: "tester", goal_prompt: "run the suite", launched_at: 1_000, origin: None,
    ///     queued: false, launch: None,
    /// }])?;
    /// store.follow("a1", 1_500)?;
    /// store.follow("gone", 1_600)?; // no such task: nothing to mark
    /// assert_eq!(store.followed()?, [("a1".to_owned(), 1_500)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn follow(&self, id: &str, since: u64) -> Result<(), StoreError> {
        self.connection()
            .prepare_cached("UPDATE tasks SET followed_at = ?2 WHERE id = ?1")
            .and_then(|mut update| update.execute(params![id, to_sql(since)]))
            .map(|_| ())
            .map_err(|source| self.failed(source))
    }

    /// The tasks clients follow as MCP Tasks, with the time each is followed
    /// since (see [`follow`](Self::follow)), in registration order.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] or [`StoreError::Sqlite`] when SQLite fails.
    pub fn followed(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let connection = self.connection();
        let mut statement = connection
            .prepare_cached(
                "SELECT id, followed_at FROM tasks WHERE followed_at IS NOT NULL ORDER BY seq",
            )
            .map_err(|source| self.failed(source))?;
        let rows = statement
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, from_sql(row.get::<_, i64>(1)?)))
            })
            .map_err(|source| self.failed(source))?;
        rows.collect::<Result<_, _>>()
            .map_err(|source| self.failed(source))
    }

    /// The tasks the store at `path` holds, read without changing anything:
    /// no lock is taken, nothing is created, no journal mode is set (so it
    /// works on a read-only file system, and beside a process that holds the
    /// store: it sees what that process committed).
    ///
    /// # Errors
    ///
    /// [`StoreError::NewerSchema`] for a store written by a newer asynctask,
    /// [`StoreError::NotAStore`] for another application's database, and the
    /// errors of [`load`](Self::load); a missing file is
    /// [`StoreError::Sqlite`] (check for it first).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_store::Store;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("tasks.db");
    /// drop(Store::open(&path)?);
    /// let before = std::fs::read_dir(dir.path())?.count();
    /// assert!(Store::read_only(&path)?.is_empty());
    /// assert_eq!(std::fs::read_dir(dir.path())?.count(), before, "nothing created");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_only(path: impl AsRef<Path>) -> Result<Vec<StoredTask>, StoreError> {
        let path = path.as_ref();
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        // With no write-ahead log beside it (its writer closed it cleanly, or
        // none ever wrote), everything is in the file itself: it is read as
        // immutable, so SQLite makes no `-wal` or `-shm` file for this reader.
        // A log left by a killed writer is read through as usual.
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let immutable = if Path::new(&wal).exists() {
            ""
        } else {
            "?immutable=1"
        };
        let uri = format!("file:{}{immutable}", uri_path(path));
        let connection =
            Connection::open_with_flags(uri, flags).map_err(|source| failed(path, source))?;
        let version: i64 = connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|source| failed(path, source))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        // A store its supervisor is creating right now has no schema yet:
        // it holds no task.
        if version == 0 {
            let tables: i64 = connection
                .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
                .map_err(|source| failed(path, source))?;
            if tables == 0 {
                return Ok(Vec::new());
            }
        }
        // A store of version 2 or 3 (a supervisor of an earlier release still
        // holds it) is read as it is: version 2 has no usage yet.
        if !(2..=SCHEMA_VERSION).contains(&version) {
            return Err(StoreError::NotAStore {
                path: path.to_owned(),
            });
        }
        load_tasks(&connection, path, version)
    }
}

/// `path` as the path of an SQLite URI: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    let mut text = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => text.push_str("%25"),
            '?' => text.push_str("%3f"),
            '#' => text.push_str("%23"),
            c => text.push(c),
        }
    }
    text
}

/// Every task of the store on `connection` (at `path`, of schema `version`:
/// this one, or 2), in registration order.
fn load_tasks(
    connection: &Connection,
    path: &Path,
    version: i64,
) -> Result<Vec<StoredTask>, StoreError> {
    let usage = if version == 2 { "NULL" } else { "usage" };
    let mut statement = connection
        .prepare_cached(&format!(
            "SELECT id, subagent_name, goal_prompt, origin, pid, status, launched_at,
                        completed_at, finish_order, notified_at, terminate_reason,
                        emitted_vars, final_message, error, started_at, launch, {usage}
                 FROM tasks ORDER BY seq"
        ))
        .map_err(|source| failed(path, source))?;
    let rows = statement
        .query_map([], Row::read)
        .map_err(|source| failed(path, source))?;
    let mut tasks = Vec::new();
    for row in rows {
        let row = row.map_err(|source| failed(path, source))?;
        tasks.push(row.into_task(path)?);
    }
    Ok(tasks)
}

impl Store {
    /// Applies one change in one transaction.
    fn write(&self, entries: &[JournalEntry<'_>]) -> Result<(), StoreError> {
        let mut connection = self.connection();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.failed(source))?;
        for entry in entries {
            self.apply(&tx, entry)?;
        }
        // Dropping an uncommitted transaction (on an error above) rolls it back.
        tx.commit().map_err(|source| self.failed(source))
    }

    fn apply(&self, tx: &Transaction<'_>, entry: &JournalEntry<'_>) -> Result<(), StoreError> {
        let changed = match *entry {
            JournalEntry::Registered {
                id,
                subagent_name,
                goal_prompt,
                launched_at,
                origin,
                queued,
                launch,
            } => tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO tasks
                         (id, subagent_name, goal_prompt, origin, pid, status, launched_at,
                          started_at, launch)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .and_then(|mut insert| {
                    let (status, started_at) = if queued {
                        ("queued", None)
                    } else {
                        ("running", Some(to_sql(launched_at)))
                    };
                    insert.execute(params![
                        id,
                        subagent_name,
                        goal_prompt,
                        origin,
                        self.pid,
                        status,
                        to_sql(launched_at),
                        started_at,
                        launch
                    ])
                }),
            JournalEntry::Started { id, started_at } => tx
                .prepare_cached(
                    "UPDATE tasks SET status = 'running', started_at = ?2, pid = ?3
                     WHERE id = ?1 AND status = 'queued'",
                )
                .and_then(|mut update| update.execute(params![id, to_sql(started_at), self.pid])),
            JournalEntry::Finished {
                id,
                outcome,
                completed_at,
                finish_order,
                usage,
            } => {
                let (reason, vars, message, error) = match outcome {
                    TerminalOutcome::Completed(output) => (
                        Some(output.terminate_reason.as_str()),
                        Some(encode_vars(&output.emitted_vars)),
                        output.final_message.as_deref(),
                        None,
                    ),
                    TerminalOutcome::Failed(error) => (None, None, None, Some(error)),
                    TerminalOutcome::Cancelled => (None, None, None, None),
                };
                let usage = usage.map(encode_usage);
                tx.prepare_cached(
                    "UPDATE tasks SET status = ?2, completed_at = ?3, finish_order = ?4,
                         terminate_reason = ?5, emitted_vars = ?6, final_message = ?7, error = ?8,
                         usage = ?9
                     WHERE id = ?1 AND status IN ('queued', 'running')",
                )
                .and_then(|mut update| {
                    update.execute(params![
                        id,
                        outcome.status().as_str(),
                        to_sql(completed_at),
                        to_sql(finish_order),
                        reason,
                        vars,
                        message,
                        error,
                        usage
                    ])
                })
            }
            // A repeat (a mark sent again after its write was reported
            // failed, or a result delivered again after a restart) takes the
            // latest time.
            JournalEntry::Notified { id, notified_at } => tx
                .prepare_cached(
                    "UPDATE tasks SET notified_at = ?2
                     WHERE id = ?1 AND status NOT IN ('queued', 'running')",
                )
                .and_then(|mut update| update.execute(params![id, to_sql(notified_at)])),
            JournalEntry::Removed { id } => tx
                .prepare_cached(
                    "DELETE FROM tasks
                     WHERE id = ?1 AND status NOT IN ('queued', 'running')
                       AND notified_at IS NOT NULL",
                )
                .and_then(|mut delete| delete.execute(params![id])),
        }
        .map_err(|source| self.failed(source))?;
        // Exactly one task must have changed — or the store already holds the
        // change (a repeat): anything else means the store missed a change,
        // and writing on would store a registry the manager does not hold.
        if changed == 1 || self.holds(tx, entry)? {
            Ok(())
        } else {
            Err(StoreError::Diverged {
                path: self.path.clone(),
                id: entry.id().to_owned(),
                change: entry.kind(),
            })
        }
    }
}

impl Store {
    /// Whether the store already holds the effect of `entry`: the manager
    /// sends a change again when its write was reported as failed, and it may
    /// have been recorded all the same. A registration is never sent again.
    fn holds(&self, tx: &Transaction<'_>, entry: &JournalEntry<'_>) -> Result<bool, StoreError> {
        let held = match *entry {
            JournalEntry::Registered { .. } | JournalEntry::Notified { .. } => return Ok(false),
            JournalEntry::Started { id, started_at } => tx
                .query_row(
                    "SELECT started_at = ?2 FROM tasks WHERE id = ?1",
                    params![id, to_sql(started_at)],
                    |row| row.get::<_, Option<bool>>(0),
                )
                .optional()
                .map(|same| same.flatten() == Some(true)),
            JournalEntry::Finished {
                id,
                outcome,
                completed_at,
                finish_order,
                usage: _,
            } => tx
                .query_row(
                    "SELECT status = ?2 AND completed_at = ?3 AND finish_order = ?4
                     FROM tasks WHERE id = ?1",
                    params![
                        id,
                        outcome.status().as_str(),
                        to_sql(completed_at),
                        to_sql(finish_order)
                    ],
                    |row| row.get::<_, bool>(0),
                )
                .optional()
                .map(|same| same == Some(true)),
            JournalEntry::Removed { id } => tx
                .query_row("SELECT 1 FROM tasks WHERE id = ?1", [id], |_| Ok(()))
                .optional()
                .map(|row| row.is_none()),
        };
        held.map_err(|source| self.failed(source))
    }
}

impl Journal for Store {
    /// Applies the change in one SQLite transaction, committed (and, with
    /// [`Durability::PowerLoss`], flushed to the disk) before this returns.
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        self.write(entries).map_err(JournalError::new)
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// A file that is not a database, or is damaged, is [`StoreError::Corrupt`];
/// anything else SQLite says is [`StoreError::Sqlite`].
fn failed(path: &Path, source: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { path, source }
        }
        _ => StoreError::Sqlite { path, source },
    }
}

fn create_parent(path: &Path) -> Result<(), StoreError> {
    let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|source| StoreError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })
}

/// Creates the database file `path`, empty and private to its owner (mode
/// 0600), when it does not exist: SQLite takes an empty file for a new
/// database, and creates its journal files with the database's mode. A file
/// that cannot be created is left to SQLite, whose error says why.
fn create_private(path: &Path) {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    if let Err(err) = options.open(path)
        && err.kind() != std::io::ErrorKind::AlreadyExists
    {
        tracing::debug!(path = %path.display(), %err, "cannot create the task store's file");
    }
}

/// The exclusive advisory lock on `<db>.lock`, held for the store's life. The
/// file holds the holder's pid, so that a refused opener can name it.
#[derive(Debug)]
struct LockFile {
    _file: File,
}

impl LockFile {
    fn acquire(db: &Path) -> Result<LockFile, StoreError> {
        let mut lock = db.as_os_str().to_owned();
        lock.push(".lock");
        let lock = PathBuf::from(lock);
        let io_error = |source| StoreError::Lock {
            path: db.to_path_buf(),
            lock: lock.clone(),
            source,
        };
        // std opens files close-on-exec: child processes never inherit the lock.
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&lock).map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let pid = file
                    .read_to_string(&mut holder)
                    .ok()
                    .and_then(|_| holder.trim().parse().ok());
                return Err(StoreError::Locked {
                    path: db.to_path_buf(),
                    pid,
                });
            }
            Err(TryLockError::Error(source)) => return Err(io_error(source)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(io_error)?;
        Ok(LockFile { _file: file })
    }
}
