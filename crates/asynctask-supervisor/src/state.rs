//! A workspace's state directory — its socket, lock, log, store and outputs —
//! and the lock that keeps one supervisor per workspace.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where a workspace's supervisor keeps its state: the socket sessions connect
/// to, the lock that keeps one supervisor per workspace, its log, its store and
/// the subagents' output files. The directory is private to the user who owns
/// it (mode 0700), and so is every file created in it (mode 0600).
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_supervisor::StateDir;
///
/// let state = StateDir::new("/work/project/.asynctask");
/// assert_eq!(state.socket(), Path::new("/work/project/.asynctask/supervisor.sock"));
/// assert_eq!(state.store(), Path::new("/work/project/.asynctask/tasks.db"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// The state directory at `path`, made absolute now (relative to the
    /// working directory), so that every check and every process started
    /// later sees the same path. Nothing is created yet.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        StateDir {
            path: std::path::absolute(&path).unwrap_or(path),
        }
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The socket sessions and commands connect to.
    #[must_use]
    pub fn socket(&self) -> PathBuf {
        self.path.join("supervisor.sock")
    }

    /// Checks that the socket's path fits a Unix socket address (at most
    /// [`MAX_SOCKET_PATH`] bytes).
    ///
    /// # Errors
    ///
    /// [`SocketPathTooLong`], naming the path.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_supervisor::StateDir;
    ///
    /// assert!(StateDir::new("/work/project/.asynctask").check_socket_path().is_ok());
    /// let deep = format!("/{}", "d".repeat(120));
    /// assert!(StateDir::new(deep).check_socket_path().is_err());
    /// ```
    pub fn check_socket_path(&self) -> Result<(), SocketPathTooLong> {
        let socket = self.socket();
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(SocketPathTooLong { path: socket, len });
        }
        Ok(())
    }

    /// Where the socket's name is moved while an idle supervisor makes sure no
    /// connection is on its way before it ends.
    pub(crate) fn socket_aside(&self) -> PathBuf {
        self.path.join("supervisor.sock.closing")
    }

    /// Checks that the current user owns the directory (when it exists): a
    /// supervisor serves only its owner, and another user cannot use it.
    ///
    /// # Errors
    ///
    /// `PermissionDenied`, naming the directory and both users, for a
    /// directory another user owns; the I/O error of reading it otherwise (a
    /// missing directory is no error).
    pub fn check_owner(&self) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let owner = match std::fs::metadata(&self.path) {
            Ok(meta) => meta.uid(),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err),
        };
        // Without a way to tell (no `/proc`), the supervisor's own check of
        // every connection's credentials still applies.
        let Some(me) = effective_uid() else {
            return Ok(());
        };
        if owner != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to another user (uid {owner}; you are uid {me}): its \
                     supervisor serves only its owner; run as that user, or give this \
                     project a state directory of your own with --state-dir",
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// The lock file that keeps one supervisor per workspace.
    #[must_use]
    pub fn lock_file(&self) -> PathBuf {
        self.path.join("supervisor.lock")
    }

    /// The supervisor's log (its stderr).
    #[must_use]
    pub fn log_file(&self) -> PathBuf {
        self.path.join("supervisor.log")
    }

    /// The task store.
    #[must_use]
    pub fn store(&self) -> PathBuf {
        self.path.join("tasks.db")
    }

    /// Where subagents' whole outputs are kept.
    #[must_use]
    pub fn outputs(&self) -> PathBuf {
        self.path.join("outputs")
    }

    /// Creates the directory (and its parents) if missing, private to its
    /// owner: a new directory gets mode 0700, its `outputs` directory too,
    /// and a `.gitignore` of `*` (it is
    /// a project's state, never its source), an existing one that other users
    /// may enter, or that another user owns, is refused.
    ///
    /// # Errors
    ///
    /// The I/O error, or `PermissionDenied` for a directory open to others or
    /// owned by another user.
    pub fn create(&self) -> io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path)?;
        self.check_owner()?;
        // Made here, private: the runner that writes into it makes a missing
        // directory with the umask's mode.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(self.outputs())?;
        let ignore = self.path.join(".gitignore");
        if !ignore.exists() {
            use std::io::Write as _;
            private_file(std::fs::OpenOptions::new().write(true).create(true))
                .open(&ignore)?
                .write_all(b"# asynctask's state: never committed\n*\n")?;
        }
        let mode = std::fs::metadata(&self.path)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is open to other users (mode {:o}); make it private with chmod 700",
                    self.path.display(),
                    mode & 0o777
                ),
            ));
        }
        Ok(())
    }
}

/// `options`, creating a file private to its owner (mode 0600): every file
/// of a state directory is created so.
pub(crate) fn private_file(options: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt as _;
    options.mode(0o600)
}

/// The effective uid of this process (std has no `geteuid`; its directory in
/// `/proc` is owned by it); `None` without `/proc`.
pub(crate) fn effective_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|meta| meta.uid())
}

/// The longest path a Unix socket can be bound to or connected at, in bytes
/// (the address holds 108, the last a NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// A state directory so deep that its socket's path does not fit a Unix socket
/// address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the supervisor's socket {} would be {len} bytes long, more than the {MAX_SOCKET_PATH} a \
     Unix socket allows: choose a shorter state directory with --state-dir",
    path.display()
)]
pub struct SocketPathTooLong {
    /// The socket's path.
    pub path: PathBuf,
    /// Its length in bytes.
    pub len: usize,
}

/// The lock that makes a supervisor the only one of its workspace, held for its
/// life (an advisory lock dies with its process, so a killed supervisor never
/// blocks the next).
#[derive(Debug)]
pub struct SupervisorLock {
    _file: std::fs::File,
}

impl SupervisorLock {
    /// Takes the workspace's supervisor lock; `Ok(None)` when another
    /// supervisor holds it.
    ///
    /// # Errors
    ///
    /// The I/O error when the lock file cannot be opened.
    pub fn acquire(state: &StateDir) -> io::Result<Option<Self>> {
        let file = private_file(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true),
        )
        .open(state.lock_file())?;
        match file.try_lock() {
            Ok(()) => Ok(Some(SupervisorLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(err)) => Err(err),
        }
    }
}
