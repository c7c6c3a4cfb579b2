//! `FleetError`: everything that can go wrong talking to the fleet's database.

/// Why a fleet operation failed. Database errors keep the driver's error as
/// their [`source`](std::error::Error::source); no message ever carries the
/// connection's credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The database could not be reached, or refused the connection.
    #[error("cannot connect to the fleet's database")]
    Connect {
        /// What the driver said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection string could not be parsed.
    #[error("the fleet's database URL is not valid")]
    BadUrl {
        /// What the driver said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A parameter of the connection string that asynctask reads itself
    /// (`sslmode`, `sslrootcert`, `passfile`, `require_auth`) is invalid,
    /// or its quoting is.
    #[error("the fleet's database URL is not valid: {0}")]
    InvalidUrl(String),
    /// TLS cannot be set up (a root certificate file that cannot be read).
    #[error("TLS to the fleet's database cannot be set up: {0}")]
    Tls(String),
    /// The client broke off the connection before sending any password:
    /// the server asked for the password in clear text over a connection
    /// that is neither checked TLS nor a private Unix socket, or for a way
    /// of authenticating that `require_auth` rules out. Retrying cannot mend
    /// it.
    #[error("refused to authenticate to the fleet's database: {0}")]
    AuthRefused(String),
    /// A query failed: the connection was lost, or the server refused the
    /// statement ([`is_transient`](Self::is_transient) tells which).
    #[error("the fleet's database failed a query ({what})")]
    Database {
        /// What was being done.
        what: &'static str,
        /// What the driver said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database holds a fleet schema newer than this asynctask knows. It
    /// is left untouched.
    #[error(
        "the fleet's database has schema version {found}, newer than the version {supported} \
         this asynctask knows: use a newer asynctask, or another database"
    )]
    NewerSchema {
        /// The database's schema version.
        found: i32,
        /// The newest version this crate knows ([`SCHEMA_VERSION`](crate::SCHEMA_VERSION)).
        supported: i32,
    },
    /// The database holds no fleet schema: its owner has not run
    /// `asynctask fleet migrate` ([`Fleet::migrate`](crate::Fleet::migrate)) yet.
    #[error(
        "the fleet's database has no asynctask schema on this role's search_path: run \
         `asynctask fleet migrate` on it (as the role that owns the schema) first, or put the \
         fleet's schema on this role's search_path and grant it USAGE"
    )]
    NoSchema,
    /// The database holds an older fleet schema than this asynctask needs:
    /// its owner runs `asynctask fleet migrate` to bring it up. Nothing was
    /// changed.
    #[error(
        "the fleet's database has schema version {found}, older than the version {supported} \
         this asynctask needs: run `asynctask fleet migrate` on it (as the role that owns the \
         schema)"
    )]
    OlderSchema {
        /// The database's schema version.
        found: i32,
        /// The version this crate needs ([`SCHEMA_VERSION`](crate::SCHEMA_VERSION)).
        supported: i32,
    },
    /// A migration cannot make the schema where the connection points.
    #[error("the fleet's schema cannot be made here: {0}")]
    UnusableSchema(String),
    /// A task with this id already exists.
    #[error("a task with id '{0}' already exists")]
    DuplicateId(String),
    /// A task's id, workspace, subagent or a worker's name is empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A worker names no workspace: it would serve none (a worker claims
    /// only the tasks of the workspaces it names).
    #[error(
        "worker {name} names no workspace: name each workspace it serves (`asynctask worker \
         --workspace NAME`, or `workspaces = [...]` in its config); it runs their tasks in its \
         checkout, with its secrets"
    )]
    NoWorkspaces {
        /// The worker's name.
        name: String,
    },
    /// A worker's capacity or lease is out of range.
    #[error("invalid worker: {0}")]
    InvalidWorker(&'static str),
    /// The worker's lease has expired (or it was declared lost): the fleet
    /// has given up its tasks. It must end its subagents, and register again
    /// to take new work.
    #[error("worker {name} has lost its lease: its tasks are no longer its own")]
    WorkerLost {
        /// The worker's name.
        name: String,
    },
    /// A front's lease has expired (or it retired): the results kept for it
    /// may have gone to other fronts. It registers again to go on.
    #[error("front {name} has lost its lease: its results may go to other fronts")]
    FrontLost {
        /// The front's name.
        name: String,
    },
    /// A write about a task was refused: the fencing token it carries is no
    /// longer the task's (the worker's lease expired, the task was declared
    /// interrupted, or it has already ended).
    #[error("task {task}: the write was refused, this claim on it is no longer current")]
    Fenced {
        /// The task's id.
        task: String,
    },
    /// The database did not answer in time: the connection is taken as lost.
    #[error("the fleet's database did not answer within {after:?}")]
    Unreachable {
        /// How long it was given.
        after: std::time::Duration,
    },
    /// A stored output could not be read or written as JSON.
    #[error("task {task}: its output is not valid JSON")]
    Output {
        /// The task's id.
        task: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A name (a workspace, a task's id, a subagent's, a worker's or a
    /// front's name) cannot be stored: too long, or holding a control
    /// character ([`check_name`](crate::check_name)).
    #[error("{what} is refused: {problem}")]
    InvalidName {
        /// What the name names.
        what: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

impl FleetError {
    /// A query error, saying what was being done.
    pub(crate) fn db(what: &'static str) -> impl FnOnce(tokio_postgres::Error) -> FleetError {
        move |source| FleetError::Database { what, source }
    }

    /// Whether the operation may succeed if tried again, on a new
    /// connection: the database could not be reached, did not answer, or
    /// lost the connection, or failed it for a while (a deadlock, a
    /// shutdown, a server made read-only, a missing privilege). `false` for a
    /// statement the server refused for good (a value it cannot store, a
    /// broken constraint, a limit of the server, an exception the fleet's
    /// own functions raise) and every error of the caller's making: sending
    /// it again would fail again, so it is not retried as a lost connection.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_fleet::FleetError;
    /// use std::time::Duration;
    ///
    /// assert!(FleetError::Unreachable { after: Duration::from_secs(5) }.is_transient());
    /// assert!(!FleetError::Empty("a workspace").is_transient());
    /// ```
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            FleetError::Connect { .. } | FleetError::Unreachable { .. } => true,
            FleetError::Database { source, .. } => crate::sql_error::is_transient(source),
            _ => false,
        }
    }

    /// The error with its whole chain of sources, on one line: what logs show.
    ///
    /// # Examples
    ///
    /// ```
    /// let error = asynctask_fleet::FleetError::Fenced { task: "a1".into() };
    /// assert_eq!(error.chain(), "task a1: the write was refused, this claim on it is no longer current");
    /// ```
    #[must_use]
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        text
    }
}
