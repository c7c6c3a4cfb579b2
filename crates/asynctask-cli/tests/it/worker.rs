//! `asynctask worker` against a real PostgreSQL server: the binary runs the
//! fleet's tasks, and a killed worker's running task is reported lost once,
//! by another worker.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use asynctask_fleet::{Fleet, FleetOptions, NewTask, lost_worker_error};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks};
use asynctask_test_support::{TestDatabase, assert_gone_async, eventually_with, temp_dir};
use asynctask_tools::SubagentRequest;
use pretty_assertions::assert_eq;

use super::{signal, status_of};

/// A worker process, killed (by pid) if the test ends before it does.
struct WorkerProcess {
    child: Child,
    log: PathBuf,
}

impl WorkerProcess {
    fn start(db: &TestDatabase, config: &Path, name: &str, lease_secs: u32, log: PathBuf) -> Self {
        Self::start_with(db, config, name, lease_secs, log, &["--workspace", "ws"])
    }

    fn start_with(
        db: &TestDatabase,
        config: &Path,
        name: &str,
        lease_secs: u32,
        log: PathBuf,
        more: &[&str],
    ) -> Self {
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .args(["worker", "--config"])
            .arg(config)
            .args(["--name", name, "--capacity", "4", "--lease-seconds"])
            .arg(lease_secs.to_string())
            .args(more)
            .current_dir(config.parent().expect("a directory"))
            // The database comes from the environment, as a unit file gives it.
            .env("ASYNCTASK_DATABASE_URL", db.connection_string())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("the worker starts");
        WorkerProcess { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_the_fleets_tasks_and_a_killed_ones_task_is_reported_lost_once() {
    let db = super::fleet_database("cli_worker").await;
    let dir = temp_dir("worker");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("made");
    let echo_config = dir.path().join("echo.toml");
    std::fs::write(&echo_config, "[subagents.echo]\ncommand = [\"cat\"]\n").expect("written");
    let slow_config = dir.path().join("slow.toml");
    std::fs::write(
        &slow_config,
        format!(
            "[subagents.slow]\ncommand = [\"sh\", \"-c\", \"echo $$ > '{}'/\\\"$ASYNCTASK_TASK_ID\\\"; exec sleep 600\"]\n",
            pids.display()
        ),
    )
    .expect("written");

    let mut front = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    front
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");

    // Twenty tasks through one worker process: each completed once, with
    // what its subagent printed, and each result delivered once.
    let steady = WorkerProcess::start(
        &db,
        &echo_config,
        "steady",
        2,
        dir.path().join("steady.log"),
    );
    for n in 0..20 {
        front
            .submit(NewTask::new(
                format!("e{n:02}"),
                "ws",
                "echo",
                format!("goal {n}"),
            ))
            .await
            .expect("submitted");
    }
    eventually_with(
        "twenty tasks completed",
        Duration::from_secs(60),
        || async {
            let tasks = front.tasks("ws").await.expect("read");
            tasks
                .iter()
                .all(|t| t.info.status == AsyncTaskStatus::Completed)
        },
    )
    .await;
    for (n, task) in front.tasks("ws").await.expect("read").iter().enumerate() {
        let message = task
            .info
            .output
            .as_ref()
            .and_then(|o| o.final_message.clone());
        assert_eq!(
            (message.as_deref(), task.worker.as_deref()),
            (Some(format!("goal {n}").as_str()), Some("steady")),
            "{}",
            steady.log()
        );
    }
    let claim = front.claim_results("ws", 100).await.expect("claims");
    assert_eq!(claim.tasks().len(), 20);
    claim.acknowledge().await.expect("acknowledged");
    let again = front.claim_results("ws", 100).await.expect("claims");
    assert_eq!(again.tasks().len(), 0, "each result is delivered once");
    drop(again);
    let log = steady.log();
    assert_eq!(log.matches("task ended").count(), 20, "{log}");
    assert!(!log.contains("end was refused"), "{log}");

    // A worker killed with SIGKILL mid-task: after its lease, the steady
    // worker reaps it, and its task is failed as interrupted, once.
    let doomed = WorkerProcess::start(
        &db,
        &slow_config,
        "doomed",
        2,
        dir.path().join("doomed.log"),
    );
    front
        .submit(NewTask::new("s1", "ws", "slow", "take your time"))
        .await
        .expect("submitted");
    let pid_file = pids.join("s1");
    eventually_with(
        "the slow subagent started",
        Duration::from_secs(30),
        || async { std::fs::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n')) },
    )
    .await;
    let subagent: u32 = std::fs::read_to_string(&pid_file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid");
    assert_eq!(status_of(&front, "s1").await, AsyncTaskStatus::Running);
    signal(doomed.pid(), nix::sys::signal::Signal::SIGKILL);
    // The subagent does not outlive its worker (the reaper ends it).
    assert_gone_async(&[doomed.pid(), subagent], Duration::from_secs(10)).await;
    eventually_with(
        "the task is reported interrupted",
        Duration::from_secs(30),
        || async { status_of(&front, "s1").await == AsyncTaskStatus::Failed },
    )
    .await;
    let s1 = front.task("s1").await.expect("read").expect("exists");
    assert_eq!(
        (s1.info.error, s1.worker.as_deref()),
        (Some(lost_worker_error("doomed")), Some("doomed"))
    );
    let claim = front.claim_results("ws", 100).await.expect("claims");
    let ids: Vec<&str> = claim.tasks().iter().map(|t| t.info.id.as_str()).collect();
    assert_eq!(ids, ["s1"]);
    claim.acknowledge().await.expect("acknowledged");
    let again = front.claim_results("ws", 100).await.expect("claims");
    assert_eq!(again.tasks().len(), 0, "reported once");
    drop(again);
    // The reaper logs once its statement has committed: the failed task can
    // be read a moment before the line is written.
    eventually_with(
        "the steady worker's log of the reaping",
        Duration::from_secs(10),
        || async { steady.log().contains("reaped the tasks of lost workers") },
    )
    .await;

    // SIGTERM stops the steady worker cleanly; nothing is left behind.
    signal(steady.pid(), nix::sys::signal::Signal::SIGTERM);
    let mut steady = steady;
    let status = steady.child.wait().expect("waited");
    assert!(status.success(), "{status:?}: {}", steady.log());
    assert_gone_async(
        &[steady.pid(), doomed.pid(), subagent],
        Duration::from_secs(10),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_past_its_lease_ends_its_subagents_and_its_late_end_is_refused() {
    let db = super::fleet_database("cli_worker_cut").await;
    let dir = temp_dir("worker-cut");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("made");
    let config = dir.path().join("asynctask.toml");
    std::fs::write(
        &config,
        format!(
            "[subagents.slow]\ncommand = [\"sh\", \"-c\", \"echo $$ > '{}'/\\\"$ASYNCTASK_TASK_ID\\\"; exec sleep 600\"]\n\
             [subagents.echo]\ncommand = [\"cat\"]\n",
            pids.display()
        ),
    )
    .expect("written");
    {
        let front = Fleet::connect(db.config(), FleetOptions::new())
            .await
            .expect("connects");
        front
            .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
            .await
            .expect("set");
    }
    let worker = WorkerProcess::start(&db, &config, "island", 2, dir.path().join("island.log"));
    let mut front = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    front
        .submit(NewTask::new("s1", "ws", "slow", "take your time"))
        .await
        .expect("submitted");
    let pid_file = pids.join("s1");
    eventually_with(
        "the slow subagent started",
        Duration::from_secs(30),
        || async { std::fs::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n')) },
    )
    .await;
    let subagent: u32 = std::fs::read_to_string(&pid_file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid");
    drop(front);

    // The link is cut for longer than the lease: the worker cannot renew,
    // so it ends its subagent itself.
    db.set_reachable(false).await;
    assert_gone_async(&[subagent], Duration::from_secs(10)).await;
    assert!(
        !asynctask_test_support::process_gone(worker.pid()),
        "the worker keeps going"
    );
    db.set_reachable(true).await;

    // Back on the link: the fleet reports the task interrupted once, the
    // worker's own late end of it is refused, and it serves again under a
    // new registration.
    let mut front = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    eventually_with(
        "the task is reported interrupted",
        Duration::from_secs(30),
        || async { status_of(&front, "s1").await == AsyncTaskStatus::Failed },
    )
    .await;
    let s1 = front.task("s1").await.expect("read").expect("exists");
    assert_eq!(s1.info.error, Some(lost_worker_error("island")));
    front
        .submit(NewTask::new("e1", "ws", "echo", "still here"))
        .await
        .expect("submitted");
    eventually_with(
        "the worker serves again",
        Duration::from_secs(30),
        || async { status_of(&front, "e1").await == AsyncTaskStatus::Completed },
    )
    .await;
    let claim = front.claim_results("ws", 100).await.expect("claims");
    let ids: Vec<&str> = claim.tasks().iter().map(|t| t.info.id.as_str()).collect();
    assert_eq!(ids, ["s1", "e1"]);
    claim.acknowledge().await.expect("acknowledged");
    let log = worker.log();
    assert!(log.contains("the lease was lost"), "{log}");
    assert!(log.contains("the task's end was refused"), "{log}");
    signal(worker.pid(), nix::sys::signal::Signal::SIGTERM);
    assert_gone_async(&[worker.pid(), subagent], Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_deletes_the_tasks_delivered_longer_ago_than_retain_days() {
    let db = super::fleet_database("cli_retention").await;
    let dir = temp_dir("retention");
    let config = dir.path().join("echo.toml");
    std::fs::write(&config, "[subagents.echo]\ncommand = [\"cat\"]\n").expect("written");
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    // Two tasks ended and delivered, one of them (by the database's clock)
    // 36 hours ago, the other 12 hours ago; a third ended undelivered 36
    // hours ago.
    for id in ["old", "recent", "undelivered"] {
        fleet
            .submit(NewTask::new(id, "ws", "elsewhere", "go"))
            .await
            .expect("submitted");
    }
    let lease = fleet
        .register_worker(
            &asynctask_fleet::WorkerSpec::new("w", ["elsewhere"])
                .with_workspaces(["ws"])
                .with_capacity(3),
        )
        .await
        .expect("registered");
    for task in fleet.claim(&lease, 3).await.expect("claims") {
        fleet
            .complete(
                &task,
                &asynctask_model::OutputObject::new(asynctask_model::TerminateReason::Goal),
            )
            .await
            .expect("current");
    }
    fleet
        .mark_notified(&["old".to_owned(), "recent".to_owned()])
        .await
        .expect("marked");
    let (client, connection) = db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connects");
    let driver = tokio::spawn(connection);
    client
        .execute(
            "UPDATE asynctask_tasks SET
                completed_at = completed_at - CASE id WHEN 'recent' THEN 12 ELSE 36 END * 3600000,
                notified_at = notified_at - CASE id WHEN 'recent' THEN 12 ELSE 36 END * 3600000",
            &[],
        )
        .await
        .expect("aged");

    let worker = WorkerProcess::start_with(
        &db,
        &config,
        "pruner",
        30,
        dir.path().join("pruner.log"),
        &["--retain-days", "1", "--workspace", "ws"],
    );
    eventually_with(
        "the old task is deleted",
        Duration::from_secs(30),
        || async { fleet.task("old").await.expect("read").is_none() },
    )
    .await;
    assert_eq!(
        status_of(&fleet, "recent").await,
        AsyncTaskStatus::Completed
    );
    assert_eq!(
        status_of(&fleet, "undelivered").await,
        AsyncTaskStatus::Completed
    );
    let output = Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["fleet", "output", "old"])
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(
            "the task was deleted after its result was delivered (workers' --retain-days)"
        ),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = worker.log();
    assert!(
        log.contains("deleted delivered tasks past their retention"),
        "{log}"
    );
    signal(worker.pid(), nix::sys::signal::Signal::SIGTERM);
    assert_gone_async(&[worker.pid()], Duration::from_secs(10)).await;
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_task_under_the_timeout_its_front_gave_it() {
    let db = super::fleet_database("cli_worker_launch").await;
    let dir = temp_dir("worker_launch");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("made");
    let config = dir.path().join("slow.toml");
    std::fs::write(
        &config,
        format!(
            "[subagents.slow]\ncommand = [\"sh\", \"-c\", \"echo $$ > '{}'/\\\"$ASYNCTASK_TASK_ID\\\"; \
             exec sleep 600\"]\n",
            pids.display()
        ),
    )
    .expect("written");
    let mut front = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let worker = WorkerProcess::start(&db, &config, "w", 3, dir.path().join("w.log"));
    // Launched with a timeout of 1 s (a worker gave every task 900 s).
    let request = SubagentRequest::new("t1", "slow", "wait").with_timeout(Duration::from_secs(1));
    front
        .submit(NewTask::from_request("ws", &request))
        .await
        .expect("submitted");
    let pid_file = pids.join("t1");
    eventually_with("the subagent started", Duration::from_secs(30), || async {
        std::fs::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n'))
    })
    .await;
    let subagent: u32 = std::fs::read_to_string(&pid_file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid");
    eventually_with("the task times out", Duration::from_secs(30), || async {
        status_of(&front, "t1").await.is_terminal()
    })
    .await;
    let t1 = front.task("t1").await.expect("read").expect("exists");
    let error = t1.info.error.unwrap_or_default();
    assert!(
        error.starts_with("Subagent 'slow' timed out after 1 seconds"),
        "{error}: {}",
        worker.log()
    );
    assert_gone_async(&[subagent], Duration::from_secs(10)).await;

    signal(worker.pid(), nix::sys::signal::Signal::SIGTERM);
    let mut worker = worker;
    let status = worker.child.wait().expect("waited");
    assert!(status.success(), "{status:?}: {}", worker.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_the_workspaces_it_names_and_refuses_to_start_naming_none() {
    let db = super::fleet_database("cli_worker_workspaces").await;
    let dir = temp_dir("worker-workspaces");
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, "[subagents.echo]\ncommand = [\"cat\"]\n").expect("written");
    // Naming none: refused at start, before it registers, with one line
    // saying what to do.
    let refusal = tokio::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["worker", "--config"])
        .arg(&plain)
        .args(["--name", "nowhere"])
        .current_dir(dir.path())
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    // Bounded: a worker that started would serve until stopped.
    let refused = tokio::time::timeout(Duration::from_secs(30), refusal)
        .await
        .expect("refused at once, not served")
        .expect("runs");
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "asynctask: worker nowhere names no workspace: name each workspace it serves \
         (`asynctask worker --workspace NAME`, or `workspaces = [...]` in its config); it runs \
         their tasks in its checkout, with its secrets\n"
    );

    // Named in the config; `--workspace` replaces the config's.
    let named = dir.path().join("named.toml");
    std::fs::write(
        &named,
        "workspaces = [\"alice@desk:/workspace\", \"team\"]\n\
         [subagents.echo]\ncommand = [\"cat\"]\n",
    )
    .expect("written");
    let from_config = WorkerProcess::start_with(
        &db,
        &named,
        "from-config",
        30,
        dir.path().join("from-config.log"),
        &[],
    );
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let served = |status: &asynctask_fleet::FleetStatus, name: &str| {
        status
            .workers
            .iter()
            .find(|w| w.name == name && w.state == "live")
            .map(|w| w.workspaces.clone())
    };
    eventually_with("the worker registers", Duration::from_secs(30), || async {
        !fleet
            .workspace_catalog("team")
            .await
            .expect("reads")
            .is_empty()
    })
    .await;
    let status = fleet.status().await.expect("reads");
    assert_eq!(
        served(&status, "from-config"),
        Some(vec!["alice@desk:/workspace".to_owned(), "team".to_owned()]),
        "{}",
        from_config.log()
    );
    // A task of another workspace with the same path waits.
    for (id, workspace) in [
        ("bob1", "bob@laptop:/workspace"),
        ("alice1", "alice@desk:/workspace"),
    ] {
        fleet
            .submit(NewTask::new(id, workspace, "echo", "hi"))
            .await
            .expect("submitted");
    }
    eventually_with(
        "alice's task completes",
        Duration::from_secs(30),
        || async { status_of(&fleet, "alice1").await == AsyncTaskStatus::Completed },
    )
    .await;
    assert_eq!(status_of(&fleet, "bob1").await, AsyncTaskStatus::Queued);
    drop(from_config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_writing_a_nul_to_stderr_fails_its_task_and_its_worker_goes_on() {
    let db = super::fleet_database("cli_worker_nul").await;
    let dir = temp_dir("worker-nul");
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        "[subagents.nul]\ncommand = [\"sh\", \"-c\", \"printf 'boom\\\\000tail\\\\n' >&2; exit 1\"]\n\
         [subagents.echo]\ncommand = [\"cat\"]\n",
    )
    .expect("written");
    let mut front = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    front
        .submit(NewTask::new("t1", "ws", "nul", "go"))
        .await
        .expect("submitted");
    let worker = WorkerProcess::start(&db, &config, "w", 30, dir.path().join("worker.log"));
    eventually_with("the task fails", Duration::from_secs(60), || async {
        status_of(&front, "t1").await == AsyncTaskStatus::Failed
    })
    .await;
    let t1 = front.task("t1").await.expect("read").expect("exists");
    let error = t1.info.error.unwrap_or_default();
    assert!(error.contains("boom\\0tail"), "{error}");
    // The worker goes on claiming.
    front
        .submit(NewTask::new("t2", "ws", "echo", "after"))
        .await
        .expect("submitted");
    eventually_with(
        "the next task completes",
        Duration::from_secs(60),
        || async { status_of(&front, "t2").await == AsyncTaskStatus::Completed },
    )
    .await;
    let log = worker.log();
    assert!(!log.contains("cannot reach the fleet's database"), "{log}");
}
