//! Least privilege on the binary: `asynctask fleet migrate` as the role that
//! owns the fleet's schema, then a worker, a front and `fleet status` as a
//! role that may only read and write the fleet's tables and run its
//! functions, none of them running DDL.

use std::path::Path;
use std::process::{Output, Stdio};

use asynctask_fleet::{Fleet, FleetOptions};
use asynctask_test_support::{TestDatabase, eventually_with, temp_dir};
use pretty_assertions::assert_eq;
use rmcp::ServiceExt;
use serde_json::json;

use super::front::{DEADLINE, Started, call, texts};

/// Runs `asynctask ARGS` in `dir` on the database `url`.
async fn run(dir: &Path, url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(args)
        .current_dir(dir)
        .env("ASYNCTASK_DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("the binary runs")
}

/// Starts `asynctask ARGS` in `dir` on the database `url`, its log in
/// `dir/<name>.log`.
fn start(dir: &Path, url: &str, name: &str, args: &[&str]) -> tokio::process::Command {
    let log = dir.join(format!("{name}.log"));
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_asynctask"));
    command
        .args(args)
        .current_dir(dir)
        .env("ASYNCTASK_DATABASE_URL", url)
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(log).expect("log file"))
        .kill_on_drop(true);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_fleet_migrate_a_least_privileged_role_runs_a_worker_a_front_and_fleet_status() {
    let db = TestDatabase::create("cli_roles").await;
    let dir = temp_dir("cli-roles");
    // Roles belong to the whole server: named after the database, unique.
    let owner = format!("{}_owner", db.name());
    let app = format!("{}_app", db.name());
    let (admin, connection) = db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connects");
    let driver = tokio::spawn(connection);
    // The roles and grants docs/fleet.md gives, and an event trigger that
    // refuses any DDL by the least-privileged role.
    admin
        .batch_execute(&format!(
            "CREATE ROLE {owner} NOLOGIN;
             CREATE ROLE {app} NOLOGIN;
             CREATE SCHEMA asynctask AUTHORIZATION {owner};
             GRANT USAGE ON SCHEMA asynctask TO {app};
             ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA asynctask
                GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app};
             ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA asynctask
                GRANT USAGE ON SEQUENCES TO {app};
             ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA asynctask
                GRANT EXECUTE ON FUNCTIONS TO {app};
             CREATE FUNCTION public.refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
             BEGIN
                IF current_user = '{app}' THEN
                    RAISE EXCEPTION 'DDL by the least-privileged role: %', tg_tag;
                END IF;
             END $$;
             CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start
                EXECUTE FUNCTION public.refuse_ddl();"
        ))
        .await
        .expect("roles made");
    // Acting as a role from the connection's start, the fleet's schema on
    // its search_path, as `ALTER ROLE … SET search_path` gives it.
    let as_role = |role: &str| {
        format!(
            "{} options='-c role={role} -c search_path=asynctask'",
            db.connection_string()
        )
    };

    // Before the migration, `fleet status` says what to run.
    let refused = run(dir.path(), &as_role(&app), &["fleet", "status"]).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("run `asynctask fleet migrate` on it"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let version = asynctask_fleet::SCHEMA_VERSION;
    for said in [
        format!("created the fleet's schema, version {version}\n"),
        format!("the fleet's schema is already at version {version}\n"),
    ] {
        let migrated = run(dir.path(), &as_role(&owner), &["fleet", "migrate"]).await;
        assert!(
            migrated.status.success(),
            "{}",
            String::from_utf8_lossy(&migrated.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&migrated.stdout), said);
    }
    // The fleet role cannot migrate: that would be DDL.
    let refused = run(dir.path(), &as_role(&app), &["fleet", "migrate"]).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("DDL by the least-privileged role"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    std::fs::write(
        dir.path().join("worker.toml"),
        "[subagents.echo]\ncommand = [\"cat\"]\n",
    )
    .expect("written");
    let mut worker = Started {
        child: start(
            dir.path(),
            &as_role(&app),
            "worker",
            &[
                "worker",
                "--config",
                "worker.toml",
                "--name",
                "w1",
                "--workspace",
                "team",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("the worker starts"),
        log: dir.path().join("worker.log"),
    };
    let mut watch = db.config().clone();
    watch.options("-c search_path=asynctask");
    let fleet = Fleet::connect(&watch, FleetOptions::new())
        .await
        .expect("connects");
    eventually_with("the worker serves", DEADLINE, || async {
        !fleet
            .workspace_catalog("team")
            .await
            .expect("reads")
            .is_empty()
    })
    .await;

    let quoted = as_role(&app).replace('\\', "\\\\").replace('"', "\\\"");
    std::fs::write(
        dir.path().join("front.toml"),
        format!("database = \"{quoted}\"\nworkspace = \"team\"\n"),
    )
    .expect("written");
    let mut front = start(
        dir.path(),
        &as_role(&app),
        "front",
        &["mcp", "--config", "front.toml"],
    );
    let mut child = front
        .env_remove("ASYNCTASK_DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the front starts");
    let stdout = child.stdout.take().expect("piped");
    let stdin = child.stdin.take().expect("piped");
    let client = ().serve((stdout, stdin)).await.expect("the session starts");
    let mut front = Started {
        child,
        log: dir.path().join("front.log"),
    };
    let answered = texts(
        &call(
            &client,
            "task",
            json!({"subagent_name": "echo", "goal_prompt": "as the fleet role"}),
        )
        .await,
    );
    assert!(
        answered[0].contains("as the fleet role"),
        "{answered:?}: {}",
        front.log()
    );

    let status = run(dir.path(), &as_role(&app), &["fleet", "status"]).await;
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("; serves echo in team\n"), "{text}");

    client.cancel().await.expect("the session ends");
    front.exits_cleanly().await;
    super::signal(worker.pid(), nix::sys::signal::Signal::SIGTERM);
    worker.exits_cleanly().await;
    drop(fleet);
    admin
        .batch_execute(&format!(
            "DROP EVENT TRIGGER refuse_ddl;
             DROP OWNED BY {app};
             DROP OWNED BY {owner};
             DROP ROLE {app};
             DROP ROLE {owner};"
        ))
        .await
        .expect("roles dropped");
    drop(admin);
    let _ = driver.await;
}
