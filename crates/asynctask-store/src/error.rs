//! `StoreError`: everything that can go wrong opening, reading or writing a store.

use std::path::PathBuf;

/// Why a store could not be opened, read or written. Every variant names the
/// database's path; none flattens the underlying error (it is the
/// [`source`](std::error::Error::source)).
///
/// # Examples
///
/// ```
/// use asynctask_store::{Store, StoreError};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("tasks.db");
/// std::fs::write(&path, b"this is not a database, just some text that is long enough")?;
/// let Err(error) = Store::open(&path) else { panic!("a text file is not a store") };
/// assert!(matches!(error, StoreError::Corrupt { .. }));
/// assert!(error.to_string().contains("tasks.db"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store's directory could not be created.
    #[error("cannot create the directory {dir} for the task store")]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The lock file beside the database could not be opened or locked.
    #[error("cannot lock the task store {path} (lock file {lock})")]
    Lock {
        /// The database.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the store open: two writers would corrupt each
    /// other's view, so the second is refused.
    #[error("the task store {path} is in use by {}", holder_text(*.pid))]
    Locked {
        /// The database.
        path: PathBuf,
        /// The process holding it, as its lock file says (`None` when the
        /// lock file did not say yet).
        pid: Option<u32>,
    },
    /// The file is not an SQLite database, or is damaged.
    #[error("the task store {path} is not a database or is damaged")]
    Corrupt {
        /// The database.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is an SQLite database, but not a task store (it has other
    /// tables and no schema version).
    #[error("{path} is an SQLite database but not a task store")]
    NotAStore {
        /// The database.
        path: PathBuf,
    },
    /// The store was written by a newer asynctask, with a schema this one does
    /// not know. It is left untouched.
    #[error(
        "the task store {path} has schema version {found}, newer than the version {supported} \
         this asynctask knows: use a newer asynctask, or another store"
    )]
    NewerSchema {
        /// The database.
        path: PathBuf,
        /// The store's schema version.
        found: i64,
        /// The newest version this crate reads and writes.
        supported: i64,
    },
    /// A stored task cannot be read back (the store was edited, say).
    #[error("the task store {path} holds an unreadable task '{id}': {problem}")]
    InvalidTask {
        /// The database.
        path: PathBuf,
        /// The task's id.
        id: String,
        /// What is wrong with it.
        problem: String,
        /// The decoding error, when a stored value did not decode.
        #[source]
        source: Option<serde_json::Error>,
    },
    /// The store does not hold the task a change is about in a state that
    /// allows the change (it missed an earlier change, or was edited).
    #[error(
        "the task store {path} cannot record '{change}' for task '{id}': it holds no such task in a state that allows it"
    )]
    Diverged {
        /// The database.
        path: PathBuf,
        /// The task's id.
        id: String,
        /// The change: `registered`, `finished`, `notified` or `removed`.
        change: &'static str,
    },
    /// SQLite failed.
    #[error("the task store {path} failed")]
    Sqlite {
        /// The database.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
}

fn holder_text(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("another process (pid {pid})"),
        None => "another process".to_owned(),
    }
}
