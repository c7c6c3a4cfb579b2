//! The fleet across machines, simulated honestly: each `asynctask worker`
//! runs in a network namespace of its own and reaches the test's PostgreSQL
//! server, which runs in a namespace of its own too, over a veth link; the
//! server listens on its ends of the links and nowhere else. Cutting a link
//! brings it down (its packets are lost, as when a cable is pulled).
//!
//! These tests need root (namespaces): without it they fail, saying so in
//! one line; they are never skipped.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use asynctask_fleet::{Fleet, FleetOptions, NewTask, lost_worker_error};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks};
use asynctask_test_support::{
    Host, Network, ServerSetup, TempDir, TestDatabase, assert_gone_async, certificates,
    eventually_with, process_gone, temp_dir,
};
use pretty_assertions::assert_eq;

use super::{signal, status_of};

/// A subagent that starts a grandchild in its process group, writes both
/// pids (`<task>.child`, then `<task>`), and waits for ever.
fn slow_subagent(pids: &Path) -> String {
    format!(
        "command = [\"sh\", \"-c\", \"sleep 600 & echo $! > '{dir}'/\\\"$ASYNCTASK_TASK_ID.child\\\"; \
         echo $$ > '{dir}'/\\\"$ASYNCTASK_TASK_ID\\\"; wait\"]\n",
        dir = pids.display()
    )
}

/// One test's machines: the network, the server in it, a directory for
/// configs, logs and pids, and the workers started (ended by pid on drop).
pub(super) struct Machines {
    // Dropped in this order: the workers, the server, the namespaces.
    workers: Vec<WorkerProcess>,
    pub(super) db: TestDatabase,
    pub(super) dir: TempDir,
    pub(super) hosts: Vec<Host>,
    pub(super) network: Network,
}

struct WorkerProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Machines {
    /// A network of `hosts` machines and a server reached from each.
    pub(super) async fn new(label: &str, hosts: usize) -> Machines {
        Self::with_setup(label, hosts, |_| ServerSetup::default()).await
    }

    /// [`new`](Self::new), the server set up as `setup` says for the
    /// hosts (the server's addresses on their links).
    pub(super) async fn with_setup(
        label: &str,
        hosts: usize,
        setup: impl FnOnce(&[Host]) -> ServerSetup,
    ) -> Machines {
        let mut network = Network::new().unwrap_or_else(|err| panic!("{err}"));
        let hosts: Vec<Host> = (0..hosts)
            .map(|_| network.add_host().unwrap_or_else(|err| panic!("{err}")))
            .collect();
        let setup = setup(&hosts);
        let db = TestDatabase::create_in_with(label, &network, setup).await;
        Fleet::migrate(db.config()).await.expect("migrated");
        let dir = temp_dir(label);
        std::fs::create_dir(dir.path().join("pids")).expect("made");
        let front = Fleet::connect(db.config(), FleetOptions::new())
            .await
            .expect("connects");
        front
            .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
            .await
            .expect("set");
        Machines {
            workers: Vec::new(),
            db,
            dir,
            hosts,
            network,
        }
    }

    pub(super) fn pids(&self) -> PathBuf {
        self.dir.path().join("pids")
    }

    /// The pids a slow subagent of `task` wrote: its own and its grandchild's.
    async fn subagent_pids(&self, task: &str) -> [u32; 2] {
        let file = self.pids().join(task);
        eventually_with(
            &format!("the subagent of {task} started"),
            Duration::from_secs(30),
            || async { std::fs::read_to_string(&file).is_ok_and(|text| text.ends_with('\n')) },
        )
        .await;
        let read = |path: PathBuf| -> u32 {
            std::fs::read_to_string(&path)
                .expect("read")
                .trim()
                .parse()
                .expect("a pid")
        };
        [read(file), read(self.pids().join(format!("{task}.child")))]
    }

    /// Starts `asynctask worker` on host `host` as `name`, serving the
    /// subagents of `config` (TOML text), and waits until it serves.
    pub(super) async fn start_worker(
        &mut self,
        host: usize,
        name: &str,
        config: &str,
        lease_secs: u32,
    ) {
        let url = self
            .db
            .connection_string_via(&self.hosts[host].server_address());
        let index = self.spawn_worker(host, name, config, lease_secs, &url, &[]);
        eventually_with(
            &format!("worker {name} serves the fleet"),
            Duration::from_secs(30),
            || async { self.log(index).contains("serving the fleet") },
        )
        .await;
    }

    /// Starts `asynctask worker` on host `host` with the database `url` and
    /// the variables `env`; returns its index.
    pub(super) fn spawn_worker(
        &mut self,
        host: usize,
        name: &str,
        config: &str,
        lease_secs: u32,
        url: &str,
        env: &[(&str, &str)],
    ) -> usize {
        let config_path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config_path, config).expect("written");
        let log = self.dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let host = &self.hosts[host];
        let child = self
            .network
            .command(host, env!("CARGO_BIN_EXE_asynctask"))
            .args(["worker", "--config"])
            .arg(&config_path)
            .args(["--workspace", "ws", "--workspace", "team"])
            .args(["--name", name, "--capacity", "4", "--lease-seconds"])
            .arg(lease_secs.to_string())
            .current_dir(self.dir.path())
            .env("ASYNCTASK_DATABASE_URL", url)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("the worker starts");
        self.workers.push(WorkerProcess {
            name: name.to_owned(),
            child,
            log,
        });
        self.workers.len() - 1
    }

    pub(super) fn log(&self, worker: usize) -> String {
        std::fs::read_to_string(&self.workers[worker].log).unwrap_or_default()
    }

    pub(super) fn worker_pid(&self, worker: usize) -> u32 {
        self.workers[worker].child.id()
    }

    /// A connection from the test's own machine (the server's Unix socket).
    pub(super) async fn front(&self) -> Fleet {
        Fleet::connect(self.db.config(), FleetOptions::new())
            .await
            .expect("connects")
    }

    /// Runs `work` as a client on host `host`: a connection of its own over
    /// the host's link, on a thread inside the host's namespace.
    fn client<R, F>(&self, host: usize, work: impl FnOnce(Fleet) -> F + Send + 'static) -> R
    where
        R: Send + 'static,
        F: Future<Output = R> + 'static,
    {
        let url = self
            .db
            .connection_string_via(&self.hosts[host].server_address());
        tokio::task::block_in_place(|| {
            self.network.run_in(&self.hosts[host], move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let fleet = Fleet::connect_url(&url, FleetOptions::new())
                        .await
                        .expect("connects over the link");
                    work(fleet).await
                })
            })
        })
    }

    /// Stops every worker with SIGTERM and checks that each exits 0.
    pub(super) fn stop_workers(&mut self) {
        for worker in &mut self.workers {
            if process_gone(worker.child.id()) {
                continue;
            }
            signal(worker.child.id(), nix::sys::signal::Signal::SIGTERM);
            let status = worker.child.wait().expect("waited");
            let log = std::fs::read_to_string(&worker.log).unwrap_or_default();
            assert!(status.success(), "{}: {status:?}: {log}", worker.name);
        }
    }
}

/// Claims the workspace's results once and acknowledges them, then checks
/// that nothing is offered again; returns the ids claimed.
async fn deliver_once(front: &mut Fleet) -> Vec<String> {
    let claim = front.claim_results("ws", 1000).await.expect("claims");
    let mut ids: Vec<String> = claim.tasks().iter().map(|t| t.info.id.clone()).collect();
    claim.acknowledge().await.expect("acknowledged");
    let again = front.claim_results("ws", 1000).await.expect("claims");
    assert_eq!(again.tasks().len(), 0, "each result is delivered once");
    drop(again);
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_two_machines_share_200_tasks_each_result_once() {
    let mut machines = Machines::new("machines_share", 2).await;
    let echo = "[subagents.echo]\ncommand = [\"cat\"]\n";
    machines.start_worker(0, "left", echo, 3).await;
    machines.start_worker(1, "right", echo, 3).await;
    let mut front = machines.front().await;
    for n in 0..200 {
        front
            .submit(NewTask::new(
                format!("t{n:03}"),
                "ws",
                "echo",
                format!("goal {n}"),
            ))
            .await
            .expect("submitted");
    }
    eventually_with("200 tasks completed", Duration::from_secs(120), || async {
        let tasks = front.tasks("ws").await.expect("read");
        tasks
            .iter()
            .all(|t| t.info.status == AsyncTaskStatus::Completed)
    })
    .await;
    let mut by_worker: BTreeMap<String, usize> = BTreeMap::new();
    for (n, task) in front.tasks("ws").await.expect("read").iter().enumerate() {
        let message = task
            .info
            .output
            .as_ref()
            .and_then(|o| o.final_message.clone());
        assert_eq!(message, Some(format!("goal {n}")));
        *by_worker
            .entry(task.worker.clone().expect("run by a worker"))
            .or_default() += 1;
    }
    let names: Vec<&String> = by_worker.keys().collect();
    assert_eq!(names, ["left", "right"], "both did work: {by_worker:?}");
    let ids = deliver_once(&mut front).await;
    assert_eq!(ids.len(), 200);
    let ended = machines.log(0).matches("task ended").count()
        + machines.log(1).matches("task ended").count();
    assert_eq!(ended, 200, "each task ended once");
    machines.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_on_its_machine_has_its_tasks_reported_lost_once() {
    let mut machines = Machines::new("machines_kill", 2).await;
    let slow = format!("[subagents.slow]\n{}", slow_subagent(&machines.pids()));
    machines.start_worker(0, "doomed", &slow, 2).await;
    machines
        .start_worker(1, "reaper", "[subagents.echo]\ncommand = [\"cat\"]\n", 2)
        .await;
    let mut front = machines.front().await;
    for id in ["s1", "s2"] {
        front
            .submit(NewTask::new(id, "ws", "slow", "take your time"))
            .await
            .expect("submitted");
    }
    let mut pids = vec![machines.worker_pid(0)];
    pids.extend(machines.subagent_pids("s1").await);
    pids.extend(machines.subagent_pids("s2").await);
    signal(machines.worker_pid(0), nix::sys::signal::Signal::SIGKILL);
    // Its subagents' process groups, grandchildren included, go with it.
    assert_gone_async(&pids, Duration::from_secs(10)).await;
    eventually_with(
        "both tasks reported interrupted",
        Duration::from_secs(30),
        || async {
            status_of(&front, "s1").await == AsyncTaskStatus::Failed
                && status_of(&front, "s2").await == AsyncTaskStatus::Failed
        },
    )
    .await;
    for id in ["s1", "s2"] {
        let task = front.task(id).await.expect("read").expect("exists");
        assert_eq!(task.info.error, Some(lost_worker_error("doomed")));
    }
    assert_eq!(deliver_once(&mut front).await, ["s1", "s2"]);
    // Logged once the reaping has committed, a moment after it can be read.
    eventually_with(
        "the other worker's log of the reaping",
        Duration::from_secs(10),
        || async { machines.log(1).contains("reaped the tasks of lost workers") },
    )
    .await;
    machines.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_cut_off_past_its_lease_ends_its_subagents_and_is_fenced() {
    let mut machines = Machines::new("machines_cut", 2).await;
    let slow = format!("[subagents.slow]\n{}", slow_subagent(&machines.pids()));
    machines.start_worker(0, "island", &slow, 2).await;
    machines
        .start_worker(1, "mainland", "[subagents.echo]\ncommand = [\"cat\"]\n", 2)
        .await;
    let mut front = machines.front().await;
    front
        .submit(NewTask::new("s1", "ws", "slow", "take your time"))
        .await
        .expect("submitted");
    let subagent = machines.subagent_pids("s1").await;

    // The link is cut for longer than the lease: the worker cannot renew, so
    // it ends its subagent (and the grandchild) itself, and keeps running.
    machines.network.set_link(&machines.hosts[0], false);
    assert_gone_async(&subagent, Duration::from_secs(15)).await;
    assert!(
        !process_gone(machines.worker_pid(0)),
        "the worker keeps going"
    );
    eventually_with(
        "the worker says its lease was lost",
        Duration::from_secs(15),
        || async { machines.log(0).contains("the lease was lost") },
    )
    .await;
    // Meanwhile the other machine reports the task interrupted.
    eventually_with(
        "the task is reported interrupted",
        Duration::from_secs(30),
        || async { status_of(&front, "s1").await == AsyncTaskStatus::Failed },
    )
    .await;

    // The link is back: the worker's late end of the task is refused, and it
    // serves again under a new registration.
    machines.network.set_link(&machines.hosts[0], true);
    eventually_with(
        "the late end is refused",
        Duration::from_secs(30),
        || async { machines.log(0).contains("the task's end was refused") },
    )
    .await;
    eventually_with(
        "the worker registers anew",
        Duration::from_secs(30),
        || async { machines.log(0).matches("serving the fleet").count() == 2 },
    )
    .await;
    let s1 = front.task("s1").await.expect("read").expect("exists");
    assert_eq!(
        (s1.info.status, s1.info.error),
        (AsyncTaskStatus::Failed, Some(lost_worker_error("island")))
    );
    assert_eq!(deliver_once(&mut front).await, ["s1"]);
    machines.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_mid_run_loses_nothing() {
    let mut machines = Machines::new("machines_restart", 2).await;
    let work = "[subagents.work]\ncommand = [\"sh\", \"-c\", \"sleep 0.2; cat\"]\n";
    // A lease longer than the restart takes: running tasks keep their claims.
    machines.start_worker(0, "first", work, 10).await;
    machines.start_worker(1, "second", work, 10).await;
    let mut front = machines.front().await;
    for n in 0..40 {
        front
            .submit(NewTask::new(
                format!("r{n:02}"),
                "ws",
                "work",
                format!("goal {n}"),
            ))
            .await
            .expect("submitted");
    }
    eventually_with("a few tasks completed", Duration::from_secs(60), || async {
        let tasks = front.tasks("ws").await.expect("read");
        tasks
            .iter()
            .filter(|t| t.info.status == AsyncTaskStatus::Completed)
            .count()
            >= 4
    })
    .await;
    drop(front);
    machines.db.restart_server().await;

    let mut front = machines.front().await;
    eventually_with("every task completed", Duration::from_secs(120), || async {
        let tasks = front.tasks("ws").await.expect("read");
        tasks
            .iter()
            .all(|t| t.info.status == AsyncTaskStatus::Completed)
    })
    .await;
    for (n, task) in front.tasks("ws").await.expect("read").iter().enumerate() {
        let message = task
            .info
            .output
            .as_ref()
            .and_then(|o| o.final_message.clone());
        assert_eq!(message, Some(format!("goal {n}")));
    }
    assert_eq!(deliver_once(&mut front).await.len(), 40);
    for worker in 0..2 {
        let log = machines.log(worker);
        assert!(log.contains("the fleet's database answers again"), "{log}");
        // A fenced end, not a connect refused while the server restarts.
        assert!(!log.contains("end was refused"), "{log}");
        assert!(!log.contains("the lease was lost"), "{log}");
    }
    machines.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_reaches_a_client_on_another_machine_after_the_first_closed() {
    let mut machines = Machines::new("machines_moved", 3).await;
    machines
        .start_worker(0, "worker", "[subagents.echo]\ncommand = [\"cat\"]\n", 3)
        .await;
    // On the laptop: three tasks launched, their results taken but never
    // acknowledged, and the connection closed (the lid shut mid-delivery).
    let offered = machines.client(1, |mut laptop| async move {
        for n in 0..3 {
            laptop
                .submit(NewTask::new(
                    format!("m{n}"),
                    "ws",
                    "echo",
                    format!("goal {n}"),
                ))
                .await
                .expect("submitted");
        }
        eventually_with("three tasks completed", Duration::from_secs(30), || async {
            let tasks = laptop.tasks("ws").await.expect("read");
            tasks
                .iter()
                .all(|t| t.info.status == AsyncTaskStatus::Completed)
        })
        .await;
        let claim = laptop.claim_results("ws", 100).await.expect("claims");
        claim.tasks().len()
        // The claim and the connection end here, unacknowledged.
    });
    assert_eq!(offered, 3);
    // On another machine, another client: each result once.
    let taken = machines.client(2, |mut desktop| async move {
        let claim = desktop.claim_results("ws", 100).await.expect("claims");
        let mut ids: Vec<String> = claim.tasks().iter().map(|t| t.info.id.clone()).collect();
        claim.acknowledge().await.expect("acknowledged");
        ids.sort();
        ids
    });
    assert_eq!(taken, ["m0", "m1", "m2"]);
    let again = machines.client(1, |mut laptop| async move {
        laptop
            .claim_results("ws", 100)
            .await
            .expect("claims")
            .tasks()
            .len()
    });
    assert_eq!(again, 0, "delivered once");
    machines.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_take_passwords_from_the_environment_use_tls_and_never_log_them() {
    let mut machines = Machines::with_setup("machines_credentials", 1, |hosts| {
        let (_, cert, key) = certificates(&[hosts[0].server_address()]);
        ServerSetup::default()
            .with_tls(cert, key)
            .with_password("pa55-from-env")
    })
    .await;
    let server = machines.hosts[0].server_address();
    let name = machines.db.name().to_owned();
    let url = format!("postgresql://postgres@{server}:5432/{name}?sslmode=require");
    let passfile = machines.dir.path().join("pgpass");
    std::fs::write(
        &passfile,
        format!("{server}:5432:{name}:postgres:pa55-from-env\n"),
    )
    .expect("written");
    std::fs::set_permissions(
        &passfile,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let passfile = passfile.display().to_string();
    let echo = "[subagents.echo]\ncommand = [\"cat\"]\n";
    let from_env =
        machines.spawn_worker(0, "env", echo, 3, &url, &[("PGPASSWORD", "pa55-from-env")]);
    let from_file = machines.spawn_worker(0, "file", echo, 3, &url, &[("PGPASSFILE", &passfile)]);
    let wrong_env = machines.spawn_worker(
        0,
        "wrong-env",
        echo,
        3,
        &url,
        &[("PGPASSWORD", "wrong-pa55-env")],
    );
    let in_url =
        format!("postgresql://postgres:wrong-pa55-url@{server}:5432/{name}?sslmode=require");
    let wrong_url = machines.spawn_worker(0, "wrong-url", echo, 3, &in_url, &[]);
    for worker in [from_env, from_file] {
        eventually_with("the worker serves", Duration::from_secs(30), || async {
            machines.log(worker).contains("serving the fleet")
        })
        .await;
    }
    for (worker, password) in [(wrong_env, "wrong-pa55-env"), (wrong_url, "wrong-pa55-url")] {
        eventually_with("the worker is refused", Duration::from_secs(30), || async {
            machines
                .log(worker)
                .contains("password authentication failed")
        })
        .await;
        let log = machines.log(worker);
        assert!(!log.contains(password), "{log}");
        assert!(!log.contains("serving the fleet"), "{log}");
    }
    // Work flows over the encrypted links.
    let mut front = machines.front().await;
    front
        .submit(NewTask::new("c1", "ws", "echo", "over TLS"))
        .await
        .expect("submitted");
    eventually_with("the task completed", Duration::from_secs(30), || async {
        status_of(&front, "c1").await == AsyncTaskStatus::Completed
    })
    .await;
    assert_eq!(deliver_once(&mut front).await, ["c1"]);
    // The server's view: both serving workers' connections (statements and
    // wake-ups) are encrypted.
    let (client, connection) = machines
        .db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("the Unix socket");
    let driver = tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT bool_and(s.ssl), count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a \
             USING (pid) WHERE a.datname = $1 AND a.client_addr IS NOT NULL",
            &[&name],
        )
        .await
        .expect("answers");
    // (Refused workers retrying may add connections, encrypted too.)
    assert!(row.get::<_, bool>(0));
    assert!(row.get::<_, i64>(1) >= 4);
    drop(client);
    let _ = driver.await;
    machines.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_busy_without_pause_still_renews_its_lease() {
    let mut machines = Machines::new("machines_busy", 1).await;
    // A one-second lease, and tasks ending and arriving without pause for
    // several leases: the renewals must not wait behind them.
    machines
        .start_worker(0, "busy", "[subagents.quick]\ncommand = [\"true\"]\n", 1)
        .await;
    let mut front = machines.front().await;
    for n in 0..600 {
        front
            .submit(NewTask::new(format!("q{n:03}"), "ws", "quick", "x"))
            .await
            .expect("submitted");
    }
    eventually_with("600 tasks ended", Duration::from_secs(120), || async {
        let tasks = front.tasks("ws").await.expect("read");
        tasks.iter().all(|t| {
            matches!(
                t.info.status,
                AsyncTaskStatus::Completed | AsyncTaskStatus::Failed
            )
        })
    })
    .await;
    let log = machines.log(0);
    assert!(!log.contains("the lease was lost"), "{log}");
    let tasks = front.tasks("ws").await.expect("read");
    let failed: Vec<_> = tasks
        .iter()
        .filter(|t| t.info.status != AsyncTaskStatus::Completed)
        .map(|t| (t.info.id.clone(), t.info.error.clone()))
        .collect();
    assert_eq!(failed, []);
    assert_eq!(deliver_once(&mut front).await.len(), 600);
    machines.stop_workers();
}
