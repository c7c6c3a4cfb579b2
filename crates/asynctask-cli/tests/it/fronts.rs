//! Fronts across machines, with real processes only: the PostgreSQL server
//! in a network namespace of its own, a real `asynctask worker` in another,
//! and real fronts (`asynctask mcp`, its config naming the database) each in
//! one more, driven over stdio by rmcp's client as a model's host drives
//! them. What a test reads of a result is what the model would read: the
//! text of the tool responses.
//!
//! These tests need root (namespaces): without it they fail, saying so in
//! one line; they are never skipped.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use asynctask_model::AsyncTaskStatus;
use asynctask_test_support::{Host, ServerSetup, assert_gone_async, certificates, eventually_with};
use pretty_assertions::assert_eq;
use rmcp::ServiceExt;
use serde_json::json;

use super::front::{Client, DEADLINE, Started, call, collect_results, launched_id, texts};
use super::machines::Machines;
use super::status_of;

/// `echo` says its goal back; `gated` writes its pid (`pids/<task>`), says
/// its goal back, and ends once the file `gate` exists.
fn subagents(pids: &Path, gate: &Path) -> String {
    format!(
        "[subagents.echo]\ncommand = [\"cat\"]\n\
         [subagents.gated]\ncommand = [\"sh\", \"-c\", \"echo $$ > '{pids}'/\\\"$ASYNCTASK_TASK_ID\\\"; \
         cat; while [ ! -e '{gate}' ]; do sleep 0.05; done\"]\n",
        pids = pids.display(),
        gate = gate.display()
    )
}

/// Starts `asynctask mcp` on host `host`, its config naming the database
/// `url` and the workspace `team`, with the variables `env`; and a client
/// connected to it over its stdio.
async fn start_front(
    machines: &Machines,
    host: usize,
    name: &str,
    url: &str,
    env: &[(&str, &str)],
) -> (Started, Client) {
    let config = machines.dir.path().join(format!("{name}.toml"));
    let quoted = url.replace('\\', "\\\\").replace('"', "\\\"");
    std::fs::write(
        &config,
        format!("database = \"{quoted}\"\nworkspace = \"team\"\n"),
    )
    .expect("written");
    let log = machines.dir.path().join(format!("{name}.log"));
    let mut command = tokio::process::Command::from(
        machines
            .network
            .command(&machines.hosts[host], env!("CARGO_BIN_EXE_asynctask")),
    );
    command
        .args(["mcp", "--config"])
        .arg(&config)
        .current_dir(machines.dir.path())
        .env_remove("ASYNCTASK_DATABASE_URL")
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true);
    let mut child = command.spawn().expect("the front starts");
    let stdout = child.stdout.take().expect("piped");
    let stdin = child.stdin.take().expect("piped");
    let client = ().serve((stdout, stdin)).await.expect("the session starts");
    (Started { child, log }, client)
}

/// Launches `subagent` in the background with `goal`: the task's id, and
/// the texts that rode on the launch's response after its own.
async fn launch(client: &Client, subagent: &str, goal: &str) -> (String, String) {
    let launched = texts(
        &call(
            client,
            "task",
            json!({"subagent_name": subagent, "goal_prompt": goal, "async": true}),
        )
        .await,
    );
    (launched_id(&launched[0]), launched[1..].concat())
}

/// The pid a `gated` subagent of `task` wrote, once it started.
async fn gated_pid(machines: &Machines, task: &str) -> u32 {
    let file = machines.pids().join(task);
    eventually_with(
        &format!("the subagent of {task} started"),
        DEADLINE,
        || async { std::fs::read_to_string(&file).is_ok_and(|text| text.ends_with('\n')) },
    )
    .await;
    std::fs::read_to_string(&file)
        .expect("read")
        .trim()
        .parse()
        .expect("a pid")
}

/// Checks that a few more calls carry no result: nothing rides on their
/// responses but their own text.
async fn nothing_rides_again(client: &Client, who: &str) {
    for (tool, arguments) in [
        ("check_async_tasks", json!({})),
        ("wait_async_tasks", json!({"timeout_seconds": 1})),
        ("check_async_tasks", json!({})),
    ] {
        let answered = texts(&call(client, tool, arguments).await);
        assert_eq!(answered.len(), 1, "{who}, {tool}: {answered:?}");
        assert!(!answered[0].contains("\"agent_id\""), "{who}: {answered:?}");
    }
}

/// The name of the front registration the task `id`'s result is kept for,
/// and whether it is marked delivered, as the database holds them.
async fn delivery_row(machines: &Machines, id: &str) -> (Option<String>, bool) {
    let (client, connection) = machines
        .db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("the Unix socket");
    let driver = tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT f.name, t.notified_at IS NOT NULL FROM asynctask_tasks t \
             LEFT JOIN asynctask_fronts f ON f.id = t.front_id WHERE t.id = $1",
            &[&id],
        )
        .await
        .expect("answers");
    drop(client);
    let _ = driver.await;
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_closed_on_one_machine_leaves_its_result_to_a_front_on_another_once() {
    let mut machines = Machines::new("fronts_moved", 4).await;
    let gate = machines.dir.path().join("gate");
    let config = subagents(&machines.pids(), &gate);
    machines.start_worker(0, "worker", &config, 3).await;
    let fleet = machines.front().await;
    let via = |host: usize| {
        machines
            .db
            .connection_string_via(&machines.hosts[host].server_address())
    };

    // On the laptop: a task launched, then the session closed (stdin ends)
    // while the task still runs.
    let (mut laptop, client) = start_front(&machines, 1, "laptop", &via(1), &[]).await;
    let (id, _) = launch(&client, "gated", "outlive the laptop's session").await;
    let subagent = gated_pid(&machines, &id).await;
    let laptop_pid = laptop.pid();
    client.cancel().await.expect("closed");
    laptop.exits_cleanly().await;
    assert_eq!(status_of(&fleet, &id).await, AsyncTaskStatus::Running);

    // On the desktop, a session of the same workspace opens; then the task
    // ends. Its result reaches the desktop's model once.
    let (mut desktop, client) = start_front(&machines, 2, "desktop", &via(2), &[]).await;
    nothing_rides_again(&client, "the desktop, before the end").await;
    std::fs::write(&gate, "").expect("the gate opens");
    let (seen, all) = collect_results(&client, std::slice::from_ref(&id), "").await;
    assert_eq!(seen, [1], "{}", desktop.log());
    assert!(all.contains("outlive the laptop's session"), "{all}");
    nothing_rides_again(&client, "the desktop, after the end").await;
    eventually_with("the delivery is marked", DEADLINE, || async {
        delivery_row(&machines, &id).await.1
    })
    .await;
    let (kept_for, _) = delivery_row(&machines, &id).await;
    assert!(
        kept_for
            .as_deref()
            .is_some_and(|name| name.ends_with(&format!(":{}", desktop.pid()))),
        "taken by the desktop's front: {kept_for:?}"
    );

    // A third session, on a third machine: nothing comes again.
    let (mut third, other) = start_front(&machines, 3, "third", &via(3), &[]).await;
    nothing_rides_again(&other, "the third front").await;
    nothing_rides_again(&client, "the desktop, once more").await;

    let pids = [laptop_pid, desktop.pid(), third.pid(), subagent];
    for (front, client) in [(&mut desktop, client), (&mut third, other)] {
        client.cancel().await.expect("closed");
        front.exits_cleanly().await;
    }
    let worker = machines.worker_pid(0);
    machines.stop_workers();
    assert_gone_async(&[pids.as_slice(), &[worker]].concat(), DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fronts_on_other_machines_launch_and_deliver_over_tls_checked_as_their_url_says() {
    let mut ca = String::new();
    let mut machines = Machines::with_setup("fronts_tls", 3, |hosts| {
        let (authority, cert, key) =
            certificates(&hosts.iter().map(Host::server_address).collect::<Vec<_>>());
        ca = authority;
        ServerSetup::default()
            .with_tls(cert, key)
            .with_password("pa55-front")
    })
    .await;
    let (other_ca, _, _) = certificates(&[machines.hosts[2].server_address()]);
    let dir = machines.dir.path().to_owned();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("written");
        path.display().to_string()
    };
    let ca_file = write("ca.pem", &ca);
    let other_ca_file = write("other-ca.pem", &other_ca);
    let database = machines.db.name().to_owned();
    let servers: Vec<String> = machines.hosts.iter().map(Host::server_address).collect();
    let url = |host: usize, params: &str| {
        format!(
            "postgresql://postgres@{}:5432/{database}?{params}",
            servers[host]
        )
    };
    let password = [("PGPASSWORD", "pa55-front")];
    let worker = machines.spawn_worker(
        0,
        "worker",
        "[subagents.echo]\ncommand = [\"cat\"]\n",
        3,
        &url(0, "sslmode=require"),
        &password,
    );
    eventually_with("the worker serves", DEADLINE, || async {
        machines.log(worker).contains("serving the fleet")
    })
    .await;

    // verify-full against another CA: the front is refused at start, saying why.
    let refused = url(
        2,
        &format!("sslmode=verify-full&sslrootcert={other_ca_file}"),
    );
    let config = write(
        "refused.toml",
        &format!("database = \"{refused}\"\nworkspace = \"team\"\n"),
    );
    let output = machines
        .network
        .command(&machines.hosts[2], env!("CARGO_BIN_EXE_asynctask"))
        .args(["mcp", "--config", &config])
        .current_dir(machines.dir.path())
        .env_remove("ASYNCTASK_DATABASE_URL")
        .envs(password)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("certificate"), "{stderr}");
    assert!(!stderr.contains("pa55-front"), "{stderr}");

    // require (encryption only), and verify-full with the right CA: each
    // front launches, and its result comes back once.
    let mut fronts = Vec::new();
    for (host, name, params) in [
        (1, "front-require", "sslmode=require".to_owned()),
        (
            2,
            "front-verify",
            format!("sslmode=verify-full&sslrootcert={ca_file}"),
        ),
    ] {
        let (front, client) =
            start_front(&machines, host, name, &url(host, &params), &password).await;
        let goal = format!("over TLS from {name}");
        let (id, carried) = launch(&client, "echo", &goal).await;
        let (seen, all) = collect_results(&client, std::slice::from_ref(&id), &carried).await;
        assert_eq!(seen, [1], "{}", front.log());
        assert!(all.contains(&goal), "{all}");
        fronts.push((front, client));
    }
    // The server's view: every connection from the fronts' machines is
    // encrypted, two a front (its statements, and its wake-ups, which a
    // front listens to before it first looks for a result).
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
             USING (pid) WHERE a.datname = $1 AND host(a.client_addr) IN ($2, $3)",
            &[
                &database,
                &machines.hosts[1].address(),
                &machines.hosts[2].address(),
            ],
        )
        .await
        .expect("answers");
    drop(client);
    let _ = driver.await;
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 4));

    let mut pids = vec![machines.worker_pid(worker)];
    for (mut front, client) in fronts {
        pids.push(front.pid());
        client.cancel().await.expect("closed");
        front.exits_cleanly().await;
    }
    machines.stop_workers();
    assert_gone_async(&pids, DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_cut_off_for_less_than_its_lease_loses_nothing_and_says_it_reconnected() {
    let mut machines = Machines::new("fronts_cut", 2).await;
    let gate = machines.dir.path().join("gate");
    let config = subagents(&machines.pids(), &gate);
    machines.start_worker(0, "worker", &config, 3).await;
    let fleet = machines.front().await;
    let url = machines
        .db
        .connection_string_via(&machines.hosts[1].server_address());
    let (mut front, client) = start_front(&machines, 1, "laptop", &url, &[]).await;
    let (first, _) = launch(&client, "gated", "outlive the cut").await;
    let subagent = gated_pid(&machines, &first).await;

    // The laptop's link is cut (its packets are lost): the model launches
    // meanwhile, and the running task ends on the worker.
    machines.network.set_link(&machines.hosts[1], false);
    let client = Arc::new(client);
    let launching = tokio::spawn({
        let client = Arc::clone(&client);
        async move { launch(&client, "echo", "launched during the cut").await }
    });
    std::fs::write(&gate, "").expect("the gate opens");
    eventually_with("the task ended on the worker", DEADLINE, || async {
        status_of(&fleet, &first).await == AsyncTaskStatus::Completed
    })
    .await;
    // The front gives its hung connection up rather than wait for it.
    eventually_with("the front gives its connection up", DEADLINE, || async {
        front.log().contains("the fleet's database does not answer")
    })
    .await;
    machines.network.set_link(&machines.hosts[1], true);

    // Nothing lost: both results come, each once.
    let (second, carried) = launching.await.expect("the launch is answered");
    let ids = [first.clone(), second.clone()];
    let (seen, all) = collect_results(&client, &ids, &carried).await;
    assert_eq!(seen, [1, 1], "{}", front.log());
    assert!(all.contains("outlive the cut"), "{all}");
    assert!(all.contains("launched during the cut"), "{all}");
    nothing_rides_again(&client, "the laptop").await;
    for id in &ids {
        eventually_with("the delivery is marked", DEADLINE, || async {
            delivery_row(&machines, id).await.1
        })
        .await;
    }
    let log = front.log();
    assert!(log.contains("connected to the fleet again"), "{log}");
    assert!(!log.contains("lease had expired"), "{log}");

    let pids = [front.pid(), machines.worker_pid(0), subagent];
    let client = Arc::into_inner(client).expect("the launch has ended");
    client.cancel().await.expect("closed");
    front.exits_cleanly().await;
    machines.stop_workers();
    assert_gone_async(&pids, DEADLINE).await;
}
