//! `asynctask mcp --database`: a real front process driven by rmcp's client
//! over stdio, a real `asynctask worker` process, and a real PostgreSQL. The
//! front shows the live workers' catalog, its tasks run on the worker, each
//! result rides on exactly one response, a cancel reaches the worker's
//! subagent, and the result of a front that closed goes to the next one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use asynctask_fleet::{Fleet, FleetOptions};
use asynctask_test_support::{TestDatabase, assert_gone_async, eventually_with, temp_dir};
use pretty_assertions::assert_eq;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// Only a hang takes this long.
pub(super) const DEADLINE: Duration = Duration::from_secs(30);

pub(super) type Client = RunningService<RoleClient, ()>;

/// A process the test started, killed (by pid) if the test ends first.
pub(super) struct Started {
    pub(super) child: tokio::process::Child,
    pub(super) log: PathBuf,
}

impl Started {
    pub(super) fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit, and checks that it exited 0.
    pub(super) async fn exits_cleanly(&mut self) {
        let status = self.child.wait().await.expect("waited");
        assert!(status.success(), "{status}: {}", self.log());
    }

    /// Stops the process with `SIGTERM`, as a service manager does, and checks
    /// that it exited 0.
    async fn terminate(&mut self) {
        super::signal(self.pid(), nix::sys::signal::Signal::SIGTERM);
        self.exits_cleanly().await;
    }
}

fn command(db: &TestDatabase, dir: &Path, log: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_asynctask"));
    command
        .current_dir(dir)
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(log).expect("log file"))
        .kill_on_drop(true);
    command
}

/// The workspace of a front in `dir` whose config names none.
fn default_workspace(dir: &Path) -> String {
    asynctask_cli::front::workspace_name(None, dir)
}

/// The workspaces the workers of these tests serve: the default one of a
/// front in `dir`, and `team`.
fn workspace_args(dir: &Path) -> [String; 4] {
    [
        "--workspace".to_owned(),
        default_workspace(dir),
        "--workspace".to_owned(),
        "team".to_owned(),
    ]
}

/// `asynctask worker` serving `echo` and `slow`.
fn start_worker(db: &TestDatabase, dir: &Path) -> Started {
    let log = dir.join("worker.log");
    let child = command(db, dir, &log)
        .args(["worker", "--config", "worker.toml", "--name", "w1"])
        .args(workspace_args(dir))
        .args(["--capacity", "4", "--lease-seconds", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("the worker starts");
    Started { child, log }
}

/// `asynctask mcp` whose config names the database (`database = "…"`), and
/// a client connected to it.
async fn start_front(db: &TestDatabase, dir: &Path, name: &str) -> (Started, Client) {
    start_front_with(db, dir, name, &[]).await
}

/// [`start_front`] with more arguments.
async fn start_front_with(
    db: &TestDatabase,
    dir: &Path,
    name: &str,
    args: &[&str],
) -> (Started, Client) {
    start_front_in(db, dir, name, args, &[]).await
}

/// [`start_front`] with more arguments and environment variables.
async fn start_front_in(
    db: &TestDatabase,
    dir: &Path,
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Started, Client) {
    let log = dir.join(format!("{name}.log"));
    let mut child = command(db, dir, &log)
        .env_remove("ASYNCTASK_DATABASE_URL")
        .envs(env.iter().copied())
        .args(["mcp", "--config", "front.toml"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the front starts");
    let stdout = child.stdout.take().expect("piped");
    let stdin = child.stdin.take().expect("piped");
    let client = ().serve((stdout, stdin)).await.expect("the session starts");
    (Started { child, log }, client)
}

pub(super) async fn call(client: &Client, name: &'static str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .expect("the call is answered")
}

pub(super) fn texts(result: &CallToolResult) -> Vec<String> {
    serde_json::to_value(&result.content)
        .expect("content serializes")
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .map(|block| block["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn launched_id(text: &str) -> String {
    text.split("(ID: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("the launch names its id: {text}"))
        .to_owned()
}

/// Waits (with `wait_async_tasks`) until every id in `ids` has ridden on a
/// response — `carried` holds the texts of responses read before (a launch's
/// response carries the results that ended meanwhile) — and returns how often
/// each did, and every text read.
pub(super) async fn collect_results(
    client: &Client,
    ids: &[String],
    carried: &str,
) -> (Vec<usize>, String) {
    let count = |text: &str, id: &str| text.matches(&format!("\"agent_id\": \"{id}\"")).count();
    let mut seen: Vec<usize> = ids.iter().map(|id| count(carried, id)).collect();
    let mut all = carried.to_owned();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.contains(&0) {
        assert!(tokio::time::Instant::now() < deadline, "results: {seen:?}");
        for text in texts(&call(client, "wait_async_tasks", json!({"timeout_seconds": 5})).await) {
            for (n, id) in ids.iter().enumerate() {
                seen[n] += count(&text, id);
            }
            all.push_str(&text);
        }
    }
    (seen, all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_runs_its_tasks_on_a_worker_and_delivers_each_result_once() {
    let db = super::fleet_database("cli_front").await;
    let dir = temp_dir("front");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("made");
    std::fs::write(
        dir.path().join("worker.toml"),
        format!(
            "[subagents.echo]\ncommand = [\"cat\"]\ndescription = \"Says its goal back\"\n\
             [subagents.big]\ncommand = [\"seq\", \"1\", \"5000\"]\n\
             [subagents.slow]\ncommand = [\"sh\", \"-c\", \"echo $$ > '{}'/\\\"$ASYNCTASK_TASK_ID\\\"; \
             echo started; exec sleep 600\"]\n",
            pids.display()
        ),
    )
    .expect("written");
    let url = db
        .connection_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{url}\"\n"),
    )
    .expect("written");

    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let mut worker = start_worker(&db, dir.path());
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while fleet.catalog().await.expect("reads").len() != 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker is not live: {}",
            worker.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // `fleet status` shows it.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["fleet", "status"])
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(text.starts_with("fleet at "), "{text}");
    assert!(
        text.contains("\nworkers: 1 live\n  w1 (#1) live: 0/4 running, lease for "),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "; serves big, echo, slow in {}, team\n\nworkspaces: 0\n",
            default_workspace(dir.path())
        )),
        "{text}"
    );

    // The catalog is the live worker's.
    let (front, client) = start_front(&db, dir.path(), "front-a").await;
    let tools = client.list_all_tools().await.expect("listed");
    let task = tools
        .iter()
        .find(|t| t.name == "task")
        .expect("task is served");
    let description = task.description.as_deref().unwrap_or_default();
    assert!(
        description.ends_with(
            "Available subagents (subagent_name):\n- big\n- echo: Says its goal back\n- slow"
        ),
        "{description}"
    );
    let unknown = call(
        &client,
        "task",
        json!({"subagent_name": "nobody", "goal_prompt": "g", "async": true}),
    )
    .await;
    assert_eq!(
        texts(&unknown),
        [
            "Invalid parameters for task: subagent_name: unknown subagent 'nobody'; the available \
          subagents are: big, echo, slow"
        ]
    );

    // Eight tasks: each result rides on exactly one response.
    let mut ids = Vec::new();
    let mut carried = String::new();
    for n in 0..8 {
        let launched = texts(
            &call(
                &client,
                "task",
                json!({"subagent_name": "echo", "goal_prompt": format!("goal {n}"), "async": true}),
            )
            .await,
        );
        ids.push(launched_id(&launched[0]));
        carried.extend(launched.into_iter().skip(1));
    }
    assert_eq!(
        collect_results(&client, &ids, &carried).await.0,
        vec![1; 8],
        "{}",
        front.log()
    );
    let after = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&after).len(), 1, "nothing rides again");
    // A result cut on the worker points to its whole output in the fleet.
    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "big", "goal_prompt": "count", "async": true}),
    )
    .await;
    let big = launched_id(&texts(&launched)[0]);
    let (_, text) = collect_results(&client, std::slice::from_ref(&big), "").await;
    assert!(
        text.contains(&format!(
            "[whole output: `asynctask fleet output {big}` prints it on any machine of the fleet \
             (23893 bytes, the last 23893 of them stored)]"
        )),
        "{text}"
    );
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["fleet", "output", &big])
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .output()
        .expect("runs");
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let expected: String = (1..=5000).map(|n| format!("{n}\n")).collect();
    assert!(
        printed.stdout == expected.as_bytes(),
        "the whole output, as the subagent printed it"
    );

    // A synchronous call answers on its own response, and is marked there.
    let sync = texts(
        &call(
            &client,
            "task",
            json!({"subagent_name": "echo", "goal_prompt": "right away"}),
        )
        .await,
    );
    assert!(sync[0].contains("right away"), "{sync:?}");
    eventually_with(
        "the deliveries are marked in the fleet",
        DEADLINE,
        || async {
            let tasks = fleet
                .tasks(&default_workspace(dir.path()))
                .await
                .expect("reads");
            tasks.len() == 10 && tasks.iter().all(|t| t.info.notified_at.is_some())
        },
    )
    .await;
    let tasks = fleet
        .tasks(&default_workspace(dir.path()))
        .await
        .expect("reads");
    let sync_id = tasks[9].info.id.clone();
    let stored = tasks.iter().find(|t| t.info.id == big).expect("held");
    assert_eq!(stored.whole_output_bytes, Some(23_893));
    for task in tasks.iter().filter(|t| t.info.subagent_name == "echo") {
        let goal = task.info.goal_prompt.clone();
        let said = task
            .info
            .output
            .as_ref()
            .and_then(|o| o.final_message.clone());
        assert_eq!((said, task.worker.as_deref()), (Some(goal), Some("w1")));
    }

    // A task still running when its front closes: its result goes to the
    // next front of the workspace, once.
    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "slow", "goal_prompt": "outlive the front", "async": true}),
    )
    .await;
    let slow = launched_id(&texts(&launched)[0]);
    let pid_file = pids.join(&slow);
    eventually_with("the slow subagent started", DEADLINE, || async {
        std::fs::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n'))
    })
    .await;
    let subagent: u32 = std::fs::read_to_string(&pid_file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid");
    let front_a = front.pid();
    client.cancel().await.expect("closed");
    let mut front = front;
    let status = front.child.wait().await.expect("waited");
    assert!(status.success(), "{status:?}: {}", front.log());
    assert_gone_async(&[front_a], DEADLINE).await;
    let kept = fleet.task(&slow).await.expect("reads").expect("held");
    assert_eq!(
        kept.info.status,
        asynctask_model::AsyncTaskStatus::Running,
        "left to the fleet"
    );

    let (front_b, client) = start_front(&db, dir.path(), "front-b").await;
    // Its cancel, from the other front, reaches the worker's subagent.
    let peek = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&peek).len(), 1, "{:?}", texts(&peek));
    let cancelled = fleet
        .request_cancel(&default_workspace(dir.path()), &slow)
        .await
        .expect("asks");
    assert_eq!(cancelled, asynctask_fleet::CancelRequest::Requested);
    assert_gone_async(&[subagent], DEADLINE).await;
    let (seen, all) = collect_results(&client, std::slice::from_ref(&slow), "").await;
    assert_eq!(seen, [1]);
    assert!(
        !all.contains(&sync_id),
        "the synchronous result came again: {all}"
    );
    let after = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&after).len(), 1, "nothing rides again");
    let ended = fleet.task(&slow).await.expect("reads").expect("held");
    assert_eq!(
        ended.info.status,
        asynctask_model::AsyncTaskStatus::Cancelled
    );

    // The front's own cancel reaches the worker too, and the worker's last
    // line of progress shows in check_async_tasks.
    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "slow", "goal_prompt": "be cancelled", "async": true}),
    )
    .await;
    let doomed = launched_id(&texts(&launched)[0]);
    let pid_file = pids.join(&doomed);
    eventually_with("the second slow subagent started", DEADLINE, || async {
        std::fs::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n'))
    })
    .await;
    let second: u32 = std::fs::read_to_string(&pid_file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let peek = texts(&call(&client, "check_async_tasks", json!({"task_id": &doomed})).await);
        if peek[0].contains("\"recentOutput\": [\n    \"started\"\n  ]") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress: {peek:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ended = texts(&call(&client, "end_async_task", json!({"task_id": &doomed})).await);
    assert_eq!(ended[0], format!("Cancelled task: {doomed}"));
    assert_eq!(ended.len(), 2, "the cancel rides along: {ended:?}");
    assert_gone_async(&[second], DEADLINE).await;
    eventually_with("the worker wrote the cancel", DEADLINE, || async {
        let task = fleet.task(&doomed).await.expect("reads").expect("held");
        task.info.status == asynctask_model::AsyncTaskStatus::Cancelled
            && task.info.notified_at.is_some()
    })
    .await;
    let after = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&after).len(), 1, "the cancel is not delivered again");

    client.cancel().await.expect("closed");
    let mut front_b = front_b;
    front_b.exits_cleanly().await;
    worker.terminate().await;
    assert_gone_async(&[front_a, subagent], DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_messages_reach_a_worker_s_subagent_in_order_even_sent_while_queued() {
    let db = super::fleet_database("cli_steer").await;
    let dir = temp_dir("steer");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("made");
    // `steer` prints the first two messages it reads; `quiet` takes none.
    std::fs::write(
        dir.path().join("worker.toml"),
        format!(
            "[subagents.steer]\ncommand = [\"sh\", \"-c\", \"read goal; read a; read b; \
             echo \\\"$a\\\"; echo \\\"$b\\\"\"]\nstdin = \"jsonl\"\n\
             [subagents.quiet]\ncommand = [\"sh\", \"-c\", \"echo $$ > '{}'/quiet; exec sleep 600\"]\n",
            pids.display()
        ),
    )
    .expect("written");
    let url = db
        .connection_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{url}\"\n"),
    )
    .expect("written");
    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    // One slot: `steer` waits in the database behind `quiet`.
    let log = dir.path().join("worker.log");
    let mut worker = Started {
        child: command(&db, dir.path(), &log)
            .args(["worker", "--config", "worker.toml", "--name", "w1"])
            .args(workspace_args(dir.path()))
            .args(["--capacity", "1", "--lease-seconds", "3"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("the worker starts"),
        log,
    };
    eventually_with("the worker is live", DEADLINE, || async {
        fleet.catalog().await.expect("reads").len() == 2
    })
    .await;
    let (front, client) = start_front(&db, dir.path(), "front").await;

    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "quiet", "goal_prompt": "hold the slot", "async": true}),
    )
    .await;
    let quiet = launched_id(&texts(&launched)[0]);
    let pid_file = pids.join("quiet");
    eventually_with("the quiet subagent started", DEADLINE, || async {
        std::fs::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n'))
    })
    .await;
    let quiet_pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid");
    let refused = call(
        &client,
        "message_async_task",
        json!({"task_id": &quiet, "message": "hello"}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(
        texts(&refused),
        [format!(
            "Subagent 'quiet' (async task {quiet}) does not take messages while it runs. Wait \
             for its result, or cancel it and launch a new task with the new instructions."
        )]
    );

    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "steer", "goal_prompt": "listen", "async": true}),
    )
    .await;
    let steer = launched_id(&texts(&launched)[0]);
    for message in ["narrow the scope to src/io", "skip the benches"] {
        let sent = call(
            &client,
            "message_async_task",
            json!({"task_id": &steer, "message": message}),
        )
        .await;
        assert_ne!(sent.is_error, Some(true), "{:?}", texts(&sent));
    }
    eventually_with("steer waits in the database's queue", DEADLINE, || async {
        // Submitted by the front's runner, after the launch answered.
        let task = fleet.task(&steer).await.expect("reads");
        task.is_some_and(|task| task.info.status == asynctask_model::AsyncTaskStatus::Queued)
    })
    .await;

    // The slot frees: `steer` starts and reads both, in order.
    let ended = texts(&call(&client, "end_async_task", json!({"task_id": &quiet})).await);
    assert_eq!(ended[0], format!("Cancelled task: {quiet}"));
    assert_gone_async(&[quiet_pid], DEADLINE).await;
    let (seen, all) = collect_results(&client, std::slice::from_ref(&steer), "").await;
    assert_eq!(seen, [1], "{}", worker.log());
    assert!(
        all.contains(
            r#"{\"type\":\"message\",\"text\":\"narrow the scope to src/io\"}\n{\"type\":\"message\",\"text\":\"skip the benches\"}"#
        ),
        "{all}"
    );
    let late = call(
        &client,
        "message_async_task",
        json!({"task_id": &steer, "message": "too late"}),
    )
    .await;
    assert_eq!(late.is_error, Some(true));
    assert!(
        texts(&late)[0].starts_with(&format!(
            "Async task {steer} (subagent 'steer') is already completed: its subagent reads no \
             more messages."
        )),
        "{:?}",
        texts(&late)
    );

    client.cancel().await.expect("closed");
    let mut front = front;
    let front_pid = front.pid();
    front.exits_cleanly().await;
    worker.terminate().await;
    assert_gone_async(&[front_pid, quiet_pid], DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_s_subagent_asks_the_front_s_session_and_gets_its_answer() {
    let db = super::fleet_database("cli_ask").await;
    let dir = temp_dir("ask");
    // `asker` asks through its FIFO and prints the answer line it reads.
    let script = dir.path().join("ask.sh");
    std::fs::write(
        &script,
        "read goal\n\
         printf '%s\\n' '{\"type\":\"question\",\"text\":\"Delete the 3 stale branches?\",\
         \"choices\":[\"yes\",\"no\"]}' > \"$ASYNCTASK_QUESTIONS\"\n\
         read answer\necho \"$answer\"\n",
    )
    .expect("written");
    std::fs::write(
        dir.path().join("worker.toml"),
        format!(
            "[subagents.asker]\ncommand = [\"sh\", \"{}\"]\nstdin = \"jsonl\"\n",
            script.display()
        ),
    )
    .expect("written");
    let url = db
        .connection_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{url}\"\n"),
    )
    .expect("written");
    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let mut worker = start_worker(&db, dir.path());
    eventually_with("the worker is live", DEADLINE, || async {
        fleet.catalog().await.expect("reads").len() == 1
    })
    .await;
    let (front, client) = start_front(&db, dir.path(), "front").await;

    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "asker", "goal_prompt": "tidy up", "async": true}),
    )
    .await;
    let asker = launched_id(&texts(&launched)[0]);
    // The question surfaces on the front as a local subagent's does.
    eventually_with("the question surfaces on the front", DEADLINE, || async {
        texts(&call(&client, "check_async_tasks", json!({})).await)
            .join("\n")
            .contains("Delete the 3 stale branches?")
    })
    .await;
    let answered = call(
        &client,
        "answer_async_task",
        json!({"task_id": &asker, "answer": "yes"}),
    )
    .await;
    assert_ne!(answered.is_error, Some(true), "{:?}", texts(&answered));
    let (seen, all) = collect_results(&client, std::slice::from_ref(&asker), "").await;
    assert_eq!(seen, [1], "{}", worker.log());
    assert!(
        all.contains(r#"\"status\":\"answered\",\"text\":\"yes\""#),
        "{all}"
    );
    let again = call(
        &client,
        "answer_async_task",
        json!({"task_id": &asker, "answer": "no"}),
    )
    .await;
    assert_eq!(again.is_error, Some(true), "{:?}", texts(&again));

    // A task ended while its question waits: the question is withdrawn, on
    // the front and in the database.
    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "asker", "goal_prompt": "tidy up again", "async": true}),
    )
    .await;
    let doomed = launched_id(&texts(&launched)[0]);
    let workspace = default_workspace(dir.path());
    eventually_with(
        "the second question waits in the database",
        DEADLINE,
        || async {
            fleet
                .waiting_questions(&workspace, &doomed)
                .await
                .expect("reads")
                .len()
                == 1
        },
    )
    .await;
    let ended = texts(&call(&client, "end_async_task", json!({"task_id": &doomed})).await);
    assert_eq!(ended[0], format!("Cancelled task: {doomed}"));
    let peek = texts(&call(&client, "check_async_tasks", json!({})).await).join("\n");
    assert!(!peek.contains("Delete the 3 stale branches?"), "{peek}");
    eventually_with("the worker ended the task", DEADLINE, || async {
        let task = fleet.task(&doomed).await.expect("reads").expect("held");
        task.info.status == asynctask_model::AsyncTaskStatus::Cancelled
    })
    .await;
    assert_eq!(
        fleet
            .waiting_questions(&workspace, &doomed)
            .await
            .expect("reads"),
        []
    );

    client.cancel().await.expect("closed");
    let mut front = front;
    let front_pid = front.pid();
    front.exits_cleanly().await;
    worker.terminate().await;
    assert_gone_async(&[front_pid], DEADLINE).await;
}

#[test]
fn fleet_status_without_a_database_says_how_to_name_one() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["fleet", "status"])
        .env_remove("ASYNCTASK_DATABASE_URL")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "asynctask: no fleet database: pass --database URL or set ASYNCTASK_DATABASE_URL\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_given_max_async_tasks_sets_its_workspace_s_limit_across_the_fleet() {
    let db = super::fleet_database("cli_front_max").await;
    let dir = temp_dir("front-max");
    let url = db
        .connection_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{url}\"\nworkspace = \"team\"\n"),
    )
    .expect("written");
    let limit = async || {
        let (client, connection) = db
            .config()
            .connect(tokio_postgres::NoTls)
            .await
            .expect("connects");
        let driver = tokio::spawn(connection);
        let row = client
            .query_opt(
                "SELECT max_async FROM asynctask_workspaces WHERE name = 'team'",
                &[],
            )
            .await
            .expect("reads");
        drop(client);
        let _ = driver.await;
        row.map(|row| row.get::<_, i32>(0))
    };
    // Not given: the fleet's limit is left alone.
    let (mut front, client) = start_front(&db, dir.path(), "plain").await;
    assert_eq!(limit().await, None);
    client.cancel().await.expect("closed");
    front.exits_cleanly().await;
    // No worker serves `team`: the front's log says how one would.
    assert!(
        front.log().contains(
            "no live worker serves this workspace yet: a worker runs only the workspaces it \
             names (`asynctask worker --workspace NAME`)"
        ),
        "{}",
        front.log()
    );
    // Given: set for the workspace when the front starts; the last wins.
    for max in ["2", "-1"] {
        let (mut front, client) =
            start_front_with(&db, dir.path(), "given", &["--max-async-tasks", max]).await;
        assert_eq!(limit().await.map(|n| n.to_string()).as_deref(), Some(max));
        client.cancel().await.expect("closed");
        assert!(
            front.child.wait().await.expect("waited").success(),
            "{}",
            front.log()
        );
    }
    // `fleet set-max-async` sets it too, and says what it was; a front
    // started later with `--max-async-tasks` sets it again.
    let set = |max: &str| fleet(&db, &["set-max-async", "team", max]);
    assert_eq!(
        set("3"),
        "team: task-max-async is now 3 across the fleet (it was unlimited). \
         A front started with --max-async-tasks sets it again.\n"
    );
    assert_eq!(limit().await, Some(3));
    let (mut front, client) =
        start_front_with(&db, dir.path(), "later", &["--max-async-tasks", "2"]).await;
    assert_eq!(limit().await, Some(2));
    client.cancel().await.expect("closed");
    front.exits_cleanly().await;
    assert_eq!(
        set("unlimited"),
        "team: task-max-async is now unlimited across the fleet (it was 2). \
         A front started with --max-async-tasks sets it again.\n"
    );
    assert_eq!(limit().await, Some(-1));
    // A name the fleet has never seen is refused (a typo, most likely) and
    // creates nothing, unless --create.
    let typo = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["fleet", "set-max-async", "tema", "4"])
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .output()
        .expect("runs");
    assert_eq!(typo.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&typo.stderr).contains(
            "the fleet has no workspace \"tema\": no front has launched a task in it nor set its \
             limit. Check its name, or pass --create to set the limit of a workspace to come"
        ),
        "{}",
        String::from_utf8_lossy(&typo.stderr)
    );
    let reader = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    assert_eq!(
        reader.max_async("tema").await.expect("reads"),
        None,
        "nothing created"
    );
    assert_eq!(
        fleet(&db, &["set-max-async", "--create", "tema", "4"]),
        "tema: task-max-async is now 4 across the fleet (a workspace the fleet had not seen, \
         created). A front started with --max-async-tasks sets it again.\n"
    );
    assert_eq!(
        reader
            .max_async("tema")
            .await
            .expect("reads")
            .map(|max| max.get()),
        Some(4)
    );

    // `fleet status --json`: the stable shape, here a queued task of an
    // unlimited workspace.
    let mut submitter = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    submitter
        .submit(asynctask_fleet::NewTask::new("q1", "team", "nobody", "go"))
        .await
        .expect("submitted");
    let status: Value = serde_json::from_str(&fleet(&db, &["status", "--json"])).expect("JSON");
    assert_eq!(status["version"], 1);
    assert!(status["now_ms"].as_u64().is_some(), "{status}");
    let team = &status["workspaces"][0];
    assert_eq!(
        (
            &team["name"],
            &team["max_async"],
            &team["queued"],
            &team["running"]
        ),
        (&json!("team"), &Value::Null, &json!(1), &json!(0))
    );
    assert_eq!(status["running"], json!([]));
}

/// `asynctask fleet ARGS` on `db`: its stdout, once it succeeded.
fn fleet(db: &TestDatabase, args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .arg("fleet")
        .args(args)
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .env("RUST_LOG", "warn")
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn fleet_set_max_async_refuses_bad_input_with_a_clear_error() {
    let refusal = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .arg("fleet")
            .args(args)
            // Refused before any database is needed.
            .env_remove("ASYNCTASK_DATABASE_URL")
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        String::from_utf8(output.stderr).expect("UTF-8")
    };
    let rule = "must be an integer from 1 to 100, or `unlimited` for no limit";
    for (value, shown) in [
        ("-3", "\"-3\""),
        ("0", "\"0\""),
        ("101", "\"101\""),
        ("99999999999999999999", "\"99999999999999999999\""),
        ("five", "\"five\""),
        ("", "\"\""),
    ] {
        let stderr = refusal(&["set-max-async", "team", value]);
        assert!(
            stderr.contains(&format!(
                "invalid value '{value}' for '<N|unlimited>': {rule}, not {shown}"
            )),
            "{stderr}"
        );
    }
    for workspace in ["", "   "] {
        let stderr = refusal(&["set-max-async", workspace, "3"]);
        assert!(
            stderr.contains(&format!(
                "invalid value '{workspace}' for '<WORKSPACE>': must name a workspace"
            )),
            "{stderr}"
        );
    }
    assert!(refusal(&["set-max-async", "team"]).contains("<N|unlimited>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_past_the_fleet_s_limit_and_queue_is_refused_as_on_one_machine() {
    let db = super::fleet_database("cli_front_queue").await;
    let dir = temp_dir("front-queue");
    let url = db
        .connection_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{url}\"\nworkspace = \"team\"\n"),
    )
    .expect("written");
    // A live worker that claims nothing: launches wait in the database.
    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    fleet
        .register_worker(
            &asynctask_fleet::WorkerSpec::new("idle", ["echo"])
                .with_workspaces(["team"])
                .with_lease(Duration::from_secs(600)),
        )
        .await
        .expect("registered");
    let (mut front, client) = start_front_with(
        &db,
        dir.path(),
        "front",
        &["--max-async-tasks", "1", "--max-queued-tasks", "1"],
    )
    .await;
    let launch = async || {
        let result = call(
            &client,
            "task",
            json!({"subagent_name": "echo", "goal_prompt": "hi", "async": true}),
        )
        .await;
        texts(&result)[0].clone()
    };
    for held in 1..=2 {
        let text = launch().await;
        assert!(text.contains("(ID: "), "launched: {text}");
        eventually_with("the launch reaches the database", DEADLINE, || async {
            fleet.tasks("team").await.expect("reads").len() == held
        })
        .await;
    }
    assert_eq!(
        launch().await,
        "Max async tasks (1) reached, and the queue of 1 waiting tasks is full. Wait for a task \
         to finish and check progress with 'check_async_tasks', run this subagent synchronously \
         (without async: true), or try again later."
    );
    assert_eq!(
        fleet.tasks("team").await.expect("reads").len(),
        2,
        "nothing submitted"
    );
    client.cancel().await.expect("closed");
    front.exits_cleanly().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_s_subagent_is_given_the_whole_launch_and_its_variables_reach_the_model() {
    let db = super::fleet_database("cli_launch").await;
    let dir = temp_dir("launch");
    // `show` prints what it was given, and emits one of the two variables
    // its output spec asks for.
    let script = dir.path().join("show.sh");
    std::fs::write(
        &script,
        "read -r goal\n\
         printf 'goal=%s\\n' \"$goal\"\n\
         printf 'behaviour=%s\\n' \"$ASYNCTASK_BEHAVIOUR\"\n\
         printf 'context=%s\\n' \"$ASYNCTASK_CONTEXT\"\n\
         printf 'spec=%s\\n' \"$ASYNCTASK_OUTPUT_SPEC\"\n\
         printf 'tools=%s\\n' \"$ASYNCTASK_TOOLS\"\n\
         printf 'depth=%s\\n' \"$ASYNCTASK_DEPTH\"\n\
         printf '{\"summary\":\"all green\"}' > \"$ASYNCTASK_VARS_FILE\"\n",
    )
    .expect("written");
    std::fs::write(
        dir.path().join("worker.toml"),
        format!(
            "[subagents.show]\ncommand = [\"sh\", \"{}\"]\n",
            script.display()
        ),
    )
    .expect("written");
    let url = db
        .connection_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{url}\"\n"),
    )
    .expect("written");
    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let mut worker = start_worker(&db, dir.path());
    eventually_with("the worker is live", DEADLINE, || async {
        fleet.catalog().await.expect("reads").len() == 1
    })
    .await;
    // The front runs inside a subagent at depth 1: what it launches runs at 2.
    let (front, client) =
        start_front_in(&db, dir.path(), "front", &[], &[("ASYNCTASK_DEPTH", "1")]).await;

    let launched = call(
        &client,
        "task",
        json!({
            "subagent_name": "show",
            "goal_prompt": "check the build",
            "behaviour_prompts": ["be brief", "cite files"],
            "context": [{"name": "branch", "value": "main"}],
            "output_spec": [
                {"name": "summary", "description": "one line"},
                {"name": "failures", "description": "how many failed"}
            ],
            "tool_whitelist": ["read", "grep"],
            "timeout_seconds": 600,
            "async": true
        }),
    )
    .await;
    let id = launched_id(&texts(&launched)[0]);
    let (seen, text) = collect_results(&client, std::slice::from_ref(&id), "").await;
    assert_eq!(seen, [1], "{}", worker.log());
    // The variables, and the note on the one missing, as a local run gives them.
    assert!(
        text.contains("\"emitted_vars\": {\n    \"summary\": \"all green\"\n  }"),
        "{text}"
    );
    assert!(
        text.contains("[the output spec asked for a variable the subagent did not emit: failures]"),
        "{text}"
    );
    let task = fleet.task(&id).await.expect("reads").expect("held");
    let message = task.info.output.and_then(|o| o.final_message);
    assert_eq!(
        message.as_deref(),
        Some(
            "goal=check the build\n\
             behaviour=be brief\ncite files\n\
             context={\"branch\":\"main\"}\n\
             spec=[{\"name\":\"summary\",\"description\":\"one line\"},\
             {\"name\":\"failures\",\"description\":\"how many failed\"}]\n\
             tools=[\"read\",\"grep\"]\n\
             depth=2\n\n\
             [the output spec asked for a variable the subagent did not emit: failures]"
        )
    );
    // The timeout the front resolved is the one stored with the task.
    let (pg, connection) = db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connects");
    let driver = tokio::spawn(connection);
    let stored: String = pg
        .query_one("SELECT request FROM asynctask_tasks WHERE id = $1", &[&id])
        .await
        .expect("reads")
        .get(0);
    let stored: Value = serde_json::from_str(&stored).expect("JSON");
    assert_eq!(stored["timeout"], json!({"secs": 600, "nanos": 0}));
    drop(pg);
    let _ = driver.await;

    client.cancel().await.expect("closed");
    let mut front = front;
    front.exits_cleanly().await;
    worker.terminate().await;
}

#[test]
fn a_front_whose_workspace_the_fleet_cannot_store_is_refused_at_start() {
    let dir = temp_dir("front-long-workspace");
    std::fs::write(
        dir.path().join("front.toml"),
        format!(
            "workspace = \"{}\"\ndatabase = \"host=/nonexistent dbname=none\"\n",
            "w".repeat(8_100)
        ),
    )
    .expect("written");
    // Refused before anything connects: the database named need not exist.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["mcp", "--config", "front.toml"])
        .current_dir(dir.path())
        .env_remove("ASYNCTASK_DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.lines().last(),
        Some("asynctask: a workspace is refused: it is 8100 bytes long, the most is 1024"),
        "{stderr}"
    );
}
