//! A real PostgreSQL server for tests: the one `ASYNCTASK_TEST_DATABASE_URL`
//! names, or a private throwaway cluster started from the installed binaries;
//! a fresh database for each test either way.
//!
//! The private cluster lives in a temporary directory (under `TMPDIR`, so
//! `cargo xtask ci` can tell its processes apart), listens on a Unix socket in
//! that directory only (`listen_addresses = ''`), trusts local connections
//! (the directory is private to the cluster's user and root), runs without
//! `fsync`, and as `nobody` when the tests run as root (PostgreSQL refuses
//! root). One cluster is shared by the tests of a process that overlap in
//! time; the last [`TestDatabase`] dropped stops it (a fast shutdown, by
//! process id), panicking tests included. If the test process itself is
//! killed, the kernel kills the server with it (`setpriv --pdeathsig`), and
//! `cargo xtask ci` removes what such a server leaves behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio_postgres::{Config, NoTls};

/// The variable that names an existing server to test against (a
/// `postgresql://` URL or `key=value` string; the role needs `CREATEDB`).
pub const DATABASE_URL_VAR: &str = "ASYNCTASK_TEST_DATABASE_URL";

/// What to install when the binaries are missing.
const PACKAGE: &str = "postgresql-15";

/// How long a cluster may take to start or stop.
const DEADLINE: Duration = Duration::from_secs(60);

/// A fresh, empty database on the test server, for one test. Dropping it
/// drops the database (on a server named by [`DATABASE_URL_VAR`]) or lets the
/// private cluster stop once no test uses it.
#[derive(Debug)]
pub struct TestDatabase {
    config: Config,
    admin: Config,
    name: String,
    // Declared last: the cluster outlives the drop of the database.
    cluster: Option<Arc<Cluster>>,
}

impl TestDatabase {
    /// Creates a fresh database named after `prefix` on the test server,
    /// starting the private cluster if this process has none running.
    ///
    /// # Panics
    ///
    /// When no server can be had, with one line saying why: the PostgreSQL
    /// binaries are not installed (naming the package to install), the
    /// cluster did not start (with the end of its log), or the server named
    /// by [`DATABASE_URL_VAR`] refused. A test that needs a database fails
    /// without one; it is never skipped.
    pub async fn create(prefix: &str) -> TestDatabase {
        match Self::try_create(prefix).await {
            Ok(database) => database,
            Err(why) => panic!("no PostgreSQL server for the tests: {why}"),
        }
    }

    /// Creates a fresh database named after `prefix` on a private cluster of
    /// its own, started in `network`'s server namespace: it listens on the
    /// server's end of every link the network has now (port 5432) and on its
    /// Unix socket, and trusts every connection that reaches it. A host of
    /// the network reaches it through
    /// [`connection_string_via`](Self::connection_string_via) its link's
    /// server address; the test process through [`config`](Self::config)
    /// (the Unix socket).
    /// [`DATABASE_URL_VAR`] is not used: the server must be in the network.
    ///
    /// # Panics
    ///
    /// As [`create`](Self::create).
    pub async fn create_in(prefix: &str, network: &crate::Network) -> TestDatabase {
        Self::create_in_with(prefix, network, ServerSetup::default()).await
    }

    /// [`create_in`](Self::create_in), with a server set up as `setup`
    /// says: TLS with a given certificate, a password for connections over
    /// the links (SCRAM).
    ///
    /// # Panics
    ///
    /// As [`create`](Self::create).
    pub async fn create_in_with(
        prefix: &str,
        network: &crate::Network,
        setup: ServerSetup,
    ) -> TestDatabase {
        let place = Place {
            enter: network.exec_prefix(network.server_namespace()),
            listen: network.server_addresses().join(","),
            setup,
        };
        match Self::try_create_with(prefix, Some(place)).await {
            Ok(database) => database,
            Err(why) => panic!("no PostgreSQL server for the tests: {why}"),
        }
    }

    async fn try_create(prefix: &str) -> Result<TestDatabase, String> {
        Self::try_create_with(prefix, None).await
    }

    async fn try_create_with(prefix: &str, place: Option<Place>) -> Result<TestDatabase, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let password = place
            .as_ref()
            .and_then(|place| place.setup.password.clone());
        let url = match (&place, std::env::var(DATABASE_URL_VAR)) {
            (None, Ok(url)) if !url.trim().is_empty() => Some(url),
            _ => None,
        };
        let (admin, cluster) = match url {
            Some(url) => {
                let admin: Config = url.parse().map_err(|err| {
                    format!("{DATABASE_URL_VAR} is not a connection string: {err}")
                })?;
                (admin, None)
            }
            None => {
                let cluster = tokio::task::spawn_blocking(move || match place {
                    None => Cluster::shared(),
                    Some(place) => Cluster::start(Some(place)).map(Arc::new),
                })
                .await
                .map_err(|err| format!("starting the cluster panicked: {err}"))??;
                (cluster.admin_config(), Some(cluster))
            }
        };
        let clean: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(30)
            .collect();
        let name = format!(
            "asynctask_{clean}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (client, connection) = admin
            .connect(NoTls)
            .await
            .map_err(|err| format!("cannot connect to the test server: {err}"))?;
        let driver = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .map_err(|err| format!("cannot create database {name}: {err}"))?;
        if let Some(password) = password {
            let quoted = password.replace('\'', "''");
            client
                .batch_execute(&format!("ALTER ROLE postgres PASSWORD '{quoted}'"))
                .await
                .map_err(|err| format!("cannot set the password: {err}"))?;
        }
        drop(client);
        let _ = driver.await;
        let mut config = admin.clone();
        config.dbname(&name);
        Ok(TestDatabase {
            config,
            admin,
            name,
            cluster,
        })
    }

    /// How to connect to this database (it carries no password unless
    /// [`DATABASE_URL_VAR`] gave one).
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How to connect to this database as a `key=value` string, for a
    /// process the test starts (`asynctask worker --database`). It holds a
    /// password only if [`DATABASE_URL_VAR`] gave one: pass it in the
    /// environment, never print it.
    #[must_use]
    pub fn connection_string(&self) -> String {
        self.connection_string_at(None)
    }

    /// How a host of the network given to [`create_in`](Self::create_in)
    /// connects to this database: over TCP to `address` (the server's end
    /// of the host's link), port 5432, as a `key=value` string.
    #[must_use]
    pub fn connection_string_via(&self, address: &str) -> String {
        self.connection_string_at(Some(address))
    }

    fn connection_string_at(&self, address: Option<&str>) -> String {
        use std::fmt::Write as _;
        let quote = |value: &str| format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"));
        let mut text = String::new();
        if let Some(address) = address {
            let _ = write!(text, "host={} port=5432 ", quote(address));
        } else {
            for host in self.config.get_hosts() {
                let host = match host {
                    tokio_postgres::config::Host::Tcp(name) => name.clone(),
                    tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                };
                let _ = write!(text, "host={} ", quote(&host));
            }
            if let Some(port) = self.config.get_ports().first() {
                let _ = write!(text, "port={port} ");
            }
        }
        if let Some(user) = self.config.get_user() {
            let _ = write!(text, "user={} ", quote(user));
        }
        if let Some(password) = self.config.get_password() {
            let _ = write!(
                text,
                "password={} ",
                quote(&String::from_utf8_lossy(password))
            );
        }
        let _ = write!(text, "dbname={}", quote(&self.name));
        text
    }

    /// Cuts every connection to this database and refuses new ones
    /// (`reachable = false`), or lets them in again: what a worker sees when
    /// its link to the server is cut, then restored.
    ///
    /// # Panics
    ///
    /// When the server refuses the change.
    pub async fn set_reachable(&self, reachable: bool) {
        let (client, connection) = self
            .admin
            .connect(NoTls)
            .await
            .expect("the test server answers");
        let driver = tokio::spawn(connection);
        let name = &self.name;
        client
            .batch_execute(&format!(
                "ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS {reachable}"
            ))
            .await
            .expect("changed");
        if !reachable {
            client
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[name],
                )
                .await
                .expect("cut");
        }
        drop(client);
        let _ = driver.await;
    }

    /// The database's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id of the private cluster's server, when the tests run on
    /// one (none on a server named by [`DATABASE_URL_VAR`]).
    #[must_use]
    pub fn server_pid(&self) -> Option<u32> {
        self.cluster.as_ref().and_then(|cluster| cluster.pid())
    }

    /// Restarts the server of a private cluster made by
    /// [`create_in`](Self::create_in) (a fast shutdown, as `pg_ctl restart -m
    /// fast` does: every connection is cut), and waits until it accepts
    /// connections again.
    ///
    /// # Panics
    ///
    /// When this database is not on a cluster of its own, or the server does
    /// not start again.
    pub async fn restart_server(&self) {
        let cluster = self
            .cluster
            .clone()
            .filter(|cluster| cluster.launch.place.is_some())
            .expect("only a cluster of its own (TestDatabase::create_in) is restarted");
        tokio::task::spawn_blocking(move || {
            cluster.stop_server();
            cluster.start_server()
        })
        .await
        .expect("the restart ran")
        .unwrap_or_else(|why| panic!("the PostgreSQL server did not restart: {why}"));
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.cluster.is_some() {
            // The cluster is thrown away whole.
            return;
        }
        // Dropped in a thread of its own: `drop` may run inside a runtime.
        let admin = self.admin.clone();
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok((client, connection)) = admin.connect(NoTls).await {
                    let driver = tokio::spawn(connection);
                    let _ = client.batch_execute(&sql).await;
                    drop(client);
                    let _ = driver.await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// Where a private cluster runs when not on this process's network: the
/// command prefix that enters a network namespace, and the addresses to
/// listen on there.
#[derive(Debug, Clone)]
struct Place {
    enter: Vec<String>,
    listen: String,
    setup: ServerSetup,
}

/// How a private cluster in a network is set up beyond the defaults (no
/// TLS, every connection over a link trusted).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ServerSetup {
    /// TLS on, with this certificate and private key (PEM).
    pub tls: Option<(String, String)>,
    /// Connections over the links must give this password for the role
    /// `postgres` (SCRAM-SHA-256); the Unix socket is still trusted.
    pub password: Option<String>,
}

impl ServerSetup {
    /// TLS on, with `cert` and `key` (PEM).
    #[must_use]
    pub fn with_tls(mut self, cert: impl Into<String>, key: impl Into<String>) -> Self {
        self.tls = Some((cert.into(), key.into()));
        self
    }

    /// Connections over the links must give `password`.
    #[must_use]
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }
}

/// A certificate authority, and a server certificate it signed for `names`
/// (host names or IP addresses), for a server set up with
/// [`ServerSetup::with_tls`]: the CA's certificate (what a client's
/// `sslrootcert` names), the server's certificate and its private key, in
/// PEM. A fresh CA each call: one call's CA does not sign another's server.
///
/// # Panics
///
/// When a name is not a valid DNS name or IP address.
///
/// ```
/// use asynctask_test_support::{ServerSetup, certificates};
/// let (ca, cert, key) = certificates(&["10.231.1.1".to_owned()]);
/// assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
/// let setup = ServerSetup::default().with_tls(cert, key);
/// assert!(setup.tls.is_some());
/// ```
#[must_use]
pub fn certificates(names: &[String]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("a key")).expect("a CA");
    let key = KeyPair::generate().expect("a key");
    let server = CertificateParams::new(names.to_vec())
        .expect("valid names")
        .signed_by(&key, &ca)
        .expect("signed");
    (ca.pem(), server.pem(), key.serialize_pem())
}

/// A private cluster: its directory, how its server is started, and the
/// server now running.
#[derive(Debug)]
struct Cluster {
    socket_dir: PathBuf,
    launch: Launch,
    server: Mutex<Option<Server>>,
    // Declared last: removed once the server has stopped.
    _dir: TempDir,
}

/// How to start a cluster's server.
#[derive(Debug)]
struct Launch {
    postgres: PathBuf,
    data: PathBuf,
    log: PathBuf,
    user: Option<User>,
    place: Option<Place>,
}

/// A running server: its pid, and the thread that started it and stops it.
#[derive(Debug)]
struct Server {
    pid: u32,
    stop: mpsc::Sender<()>,
    keeper: JoinHandle<()>,
}

/// The cluster the tests of this process share while any of them runs.
static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());

impl Cluster {
    /// The running cluster, or a new one.
    fn shared() -> Result<Arc<Cluster>, String> {
        let mut shared = SHARED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(cluster) = shared.upgrade() {
            return Ok(cluster);
        }
        let cluster = Arc::new(Cluster::start(None)?);
        *shared = Arc::downgrade(&cluster);
        Ok(cluster)
    }

    fn admin_config(&self) -> Config {
        let mut config = Config::new();
        config
            .host_path(&self.socket_dir)
            .user("postgres")
            .dbname("postgres");
        config
    }

    fn pid(&self) -> Option<u32> {
        self.server
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .map(|server| server.pid)
    }

    fn start(place: Option<Place>) -> Result<Cluster, String> {
        let initdb = binary("initdb")?;
        let postgres = binary("postgres")?;
        let dir = crate::temp_dir("pg");
        let user = if running_as_root() {
            let user = unprivileged_user()?;
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))
                .map_err(|err| format!("cannot give {} to nobody: {err}", dir.path().display()))?;
            Some(user)
        } else {
            None
        };
        let data = dir.path().join("data");
        let output = as_user(user.as_ref(), &initdb)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-N", "--no-instructions"])
            .args(["-E", "UTF8", "--no-locale"])
            .output()
            .map_err(|err| format!("cannot run {}: {err}", initdb.display()))?;
        if !output.status.success() {
            return Err(format!(
                "initdb failed ({}): {}",
                output.status,
                last_line(&String::from_utf8_lossy(&output.stderr))
            ));
        }
        if let Some(place) = &place {
            // Only the network's links reach the server's addresses.
            let method = if place.setup.password.is_some() {
                "scram-sha-256"
            } else {
                "trust"
            };
            std::fs::write(
                data.join("pg_hba.conf"),
                format!("local all all trust\nhost all all 10.231.0.0/16 {method}\n"),
            )
            .map_err(|err| format!("cannot write pg_hba.conf: {err}"))?;
            if let Some((cert, key)) = &place.setup.tls {
                use std::os::unix::fs::PermissionsExt;
                for (name, text) in [("server.crt", cert), ("server.key", key)] {
                    let file = data.join(name);
                    std::fs::write(&file, text)
                        .and_then(|()| {
                            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                        })
                        .map_err(|err| format!("cannot write {name}: {err}"))?;
                    if let Some(user) = &user {
                        std::os::unix::fs::chown(&file, Some(user.uid), Some(user.gid))
                            .map_err(|err| format!("cannot give {name} to nobody: {err}"))?;
                    }
                }
            }
        }
        let cluster = Cluster {
            socket_dir: dir.path().to_owned(),
            launch: Launch {
                postgres,
                log: dir.path().join("server.log"),
                data,
                user,
                place,
            },
            server: Mutex::new(None),
            _dir: dir,
        };
        cluster.start_server()?;
        Ok(cluster)
    }

    /// Starts the server and waits until it accepts connections.
    fn start_server(&self) -> Result<(), String> {
        let launch = &self.launch;
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&launch.log)
            .map_err(|err| format!("cannot open {}: {err}", launch.log.display()))?;
        let log_err = log_file
            .try_clone()
            .map_err(|err| format!("cannot open {}: {err}", launch.log.display()))?;
        let mut command = match &launch.place {
            Some(place) => {
                let mut command = Command::new(&place.enter[0]);
                command.args(&place.enter[1..]);
                if let Some(user) = &launch.user {
                    command
                        .arg("setpriv")
                        .arg(format!("--reuid={}", user.uid))
                        .arg(format!("--regid={}", user.gid))
                        .args(["--clear-groups", "--"]);
                }
                command.arg("setpriv");
                command
            }
            None => as_user(launch.user.as_ref(), Path::new("setpriv")),
        };
        let listen = launch
            .place
            .as_ref()
            .map_or(String::new(), |place| place.listen.clone());
        let tls = launch
            .place
            .as_ref()
            .is_some_and(|place| place.setup.tls.is_some());
        // The server dies with the thread that started it (the keeper, which
        // lives as long as the server): a killed test process leaves no server.
        command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(&launch.postgres)
            .arg("-D")
            .arg(&launch.data)
            .arg("-k")
            .arg(&self.socket_dir)
            .args([
                "-c",
                &format!("listen_addresses={listen}"),
                "-c",
                "fsync=off",
            ])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"])
            .args(["-c", if tls { "ssl=on" } else { "ssl=off" }])
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err);
        let (started_tx, started_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let keeper = std::thread::Builder::new()
            .name("asynctask-test-postgres".to_owned())
            .spawn(move || keep(command, started_tx, stop_rx))
            .map_err(|err| format!("cannot start the cluster's keeper thread: {err}"))?;
        let pid = started_rx
            .recv()
            .map_err(|_| "the cluster's keeper thread ended".to_owned())??;
        *self
            .server
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Server {
            pid,
            stop: stop_tx,
            keeper,
        });
        let pidfile = launch.data.join("postmaster.pid");
        let deadline = Instant::now() + DEADLINE;
        loop {
            // The eighth line of postmaster.pid says `ready` once the server
            // accepts connections; its first is the server's pid.
            let ready = std::fs::read_to_string(&pidfile).is_ok_and(|text| {
                text.lines()
                    .next()
                    .is_some_and(|l| l.trim() == pid.to_string())
                    && text.lines().nth(7).is_some_and(|l| l.trim() == "ready")
            });
            if ready {
                return Ok(());
            }
            if crate::process_gone(pid) || Instant::now() > deadline {
                let text = std::fs::read_to_string(&launch.log).unwrap_or_default();
                return Err(format!(
                    "the PostgreSQL server did not start: {}",
                    last_line(&text)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the server (a fast shutdown, by pid) and waits until it has.
    fn stop_server(&self) {
        let server = self
            .server
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(server) = server {
            drop(server.stop); // the keeper wakes when the sender is gone
            let _ = server.keeper.join();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_server();
    }
}

/// The keeper thread: starts the server, reports its pid, waits until the
/// cluster is dropped, then stops the server by pid (a fast shutdown; killed
/// if it has not stopped by the deadline) and reaps it.
fn keep(
    mut command: Command,
    started: mpsc::Sender<Result<u32, String>>,
    stop: mpsc::Receiver<()>,
) {
    let mut child: Child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let _ = started.send(Err(format!(
                "cannot start the PostgreSQL server (setpriv, from util-linux, is needed): {err}"
            )));
            return;
        }
    };
    let pid = child.id();
    let _ = started.send(Ok(pid));
    // Returns when the cluster drops its sender.
    let _ = stop.recv();
    if let Ok(raw) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGINT,
        );
    }
    let deadline = Instant::now() + DEADLINE;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A PostgreSQL binary: on `PATH`, else where Debian installs it.
fn binary(name: &str) -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    debian.sort();
    debian.reverse(); // the newest version first
    on_path
        .into_iter()
        .chain(debian)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            format!(
                "PostgreSQL's {name} is not installed (not on PATH nor in /usr/lib/postgresql/*/bin): \
                 install the {PACKAGE} package, or set {DATABASE_URL_VAR} to a server's URL"
            )
        })
}

#[derive(Debug)]
struct User {
    uid: u32,
    gid: u32,
}

/// Whether this process runs as root (the owner of `/proc/self` is the
/// effective user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// The user a cluster runs as when the tests run as root: `nobody`, which
/// every system has, so nothing is added to the system.
fn unprivileged_user() -> Result<User, String> {
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|err| format!("cannot read /etc/passwd: {err}"))?;
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&"nobody"))
        .and_then(|fields| {
            Some(User {
                uid: fields.get(2)?.parse().ok()?,
                gid: fields.get(3)?.parse().ok()?,
            })
        })
        .ok_or_else(|| {
            "running as root, and there is no user nobody to run PostgreSQL as".to_owned()
        })
}

/// A command run as `user` when given (through `setpriv`, which drops every
/// group), else as this process's user.
fn as_user(user: Option<&User>, program: &Path) -> Command {
    match user {
        Some(user) => {
            let mut command = Command::new("setpriv");
            command
                .arg(format!("--reuid={}", user.uid))
                .arg(format!("--regid={}", user.gid))
                .args(["--clear-groups", "--"])
                .arg(program);
            command
        }
        None => Command::new(program),
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fresh_database_answers_and_the_cluster_stops_with_the_last_user() {
        let first = TestDatabase::create("support").await;
        let second = TestDatabase::create("support").await;
        assert_ne!(first.name(), second.name());
        assert_eq!(first.server_pid(), second.server_pid());
        let (client, connection) = first.config().connect(NoTls).await.expect("connects");
        let driver = tokio::spawn(connection);
        let row = client
            .query_one("SELECT current_database()", &[])
            .await
            .expect("answers");
        assert_eq!(row.get::<_, String>(0), first.name());
        drop(client);
        driver.await.expect("joined").expect("closed cleanly");
        let pid = first.server_pid();
        drop(first);
        drop(second);
        if let Some(pid) = pid {
            // Dropping the last user stopped and reaped the server.
            assert!(crate::process_gone(pid));
        }
    }

    #[tokio::test]
    async fn a_cluster_in_a_network_is_reached_over_a_link_and_restarts() {
        let mut network = crate::Network::new().unwrap_or_else(|err| panic!("{err}"));
        let host = network.add_host().expect("a host");
        let db = TestDatabase::create_in("support_net", &network).await;
        let via = db.connection_string_via(&host.server_address());
        assert!(!via.contains("password"), "{via}");
        let ask = |via: String| {
            network.run_in(&host, move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let (client, connection) = tokio_postgres::connect(&via, NoTls)
                        .await
                        .expect("connects over the link");
                    let driver = tokio::spawn(connection);
                    let row = client
                        .query_one("SELECT host(inet_client_addr())", &[])
                        .await
                        .expect("answers");
                    drop(client);
                    let _ = driver.await;
                    row.get::<_, String>(0)
                })
            })
        };
        assert_eq!(ask(via.clone()), host.address());
        let before = db.server_pid().expect("a private server");
        db.restart_server().await;
        let after = db.server_pid().expect("a private server");
        assert_ne!(before, after);
        assert!(crate::process_gone(before));
        assert_eq!(ask(via), host.address());
        drop(db);
        assert!(crate::process_gone(after));
    }

    #[test]
    fn a_missing_binary_names_the_package() {
        let err = binary("asynctask-no-such-postgres-binary").expect_err("not installed");
        assert!(err.contains("install the postgresql-15 package"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }
}
