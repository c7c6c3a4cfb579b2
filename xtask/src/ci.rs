//! `cargo xtask ci`: every check CI runs, in order, stopping at the first failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use crate::{codegen, tidy};

/// One step of the CI run.
enum Step {
    /// A command to run at the workspace root, with extra environment variables.
    Command(
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
    ),
    /// A check implemented in xtask itself.
    Builtin(fn(&Path) -> Result<(), String>),
}

const STEPS: &[(&str, Step)] = &[
    (
        "fmt",
        Step::Command(&["cargo", "fmt", "--all", "--check"], &[]),
    ),
    (
        "clippy",
        Step::Command(
            &[
                "cargo",
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
            &[],
        ),
    ),
    ("tidy", Step::Builtin(tidy::check)),
    ("codegen --check", Step::Builtin(codegen::check)),
    (
        "doc",
        Step::Command(
            &[
                "cargo",
                "doc",
                "--workspace",
                "--no-deps",
                "--all-features",
                "--locked",
            ],
            &[("RUSTDOCFLAGS", "-D warnings")],
        ),
    ),
    ("test", Step::Builtin(run_tests)),
    (
        // The runtime alone, as a host that does not want process spawning takes
        // it: built and tested without asynctask-process (and so without nix,
        // toml, or tokio's process driver).
        "test (runtime alone)",
        Step::Command(
            &["cargo", "test", "--locked", "-p", "asynctask-runtime"],
            &[],
        ),
    ),
    ("examples", Step::Builtin(run_examples)),
    (
        "doc tests",
        Step::Command(
            &[
                "cargo",
                "test",
                "--workspace",
                "--all-features",
                "--locked",
                "--doc",
            ],
            &[],
        ),
    ),
    ("python (MCP client)", Step::Builtin(run_python_tests)),
];

/// The run's own temporary directory, given to every command as `TMPDIR`, so
/// that whatever a test starts can be told apart from other runs' processes.
/// Short, under the system's: a state directory made in it must leave room
/// for a Unix socket's path (107 bytes at most).
static RUN_TMP: OnceLock<PathBuf> = OnceLock::new();

fn run_tmp() -> &'static Path {
    RUN_TMP.get_or_init(|| std::env::temp_dir().join(format!("atci-{}", std::process::id())))
}

/// Runs every step; the error names the step that failed. Then, whether the
/// steps passed or not, no process the run started may be left.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    let tmp = run_tmp();
    std::fs::create_dir_all(tmp)
        .map_err(|err| format!("cannot create {}: {err}", tmp.display()))?;
    let steps = run_steps(root);
    let leftovers = check_leftovers(tmp);
    remove_test_cluster_memory(tmp);
    remove_stale_namespaces();
    let _ = std::fs::remove_dir_all(tmp);
    steps?;
    leftovers
}

fn run_steps(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    for (name, step) in STEPS {
        println!("\n==> xtask ci: {name}");
        let step_started = Instant::now();
        let result = match step {
            Step::Command(argv, env) => run_command(root, argv, env),
            Step::Builtin(check) => check(root),
        };
        result.map_err(|why| format!("ci step '{name}' failed: {why}"))?;
        println!(
            "==> {name}: ok ({:.1}s)",
            step_started.elapsed().as_secs_f64()
        );
    }
    println!(
        "\n==> xtask ci: all {} steps passed in {:.0}s",
        STEPS.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Fails when a process started by the run is still alive: one whose command
/// line or environment names the run's temporary directory (a supervisor's
/// `--state-dir`, a front's, a subagent's `ASYNCTASK_TEST_DIR`). Zombies have
/// ended and do not count. Those found are named, then killed by pid.
fn check_leftovers(tmp: &Path) -> Result<(), String> {
    println!("\n==> xtask ci: no process left behind");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        println!("(no /proc: not checked)");
        return Ok(());
    };
    let needle = tmp.as_os_str().as_encoded_bytes();
    let names = |bytes: &[u8]| bytes.windows(needle.len()).any(|window| window == needle);
    let mut left = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let dir = entry.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue; // gone meanwhile
        };
        // `pid (comm) state ...`: a zombie has ended.
        let ended = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
        if ended {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
        if names(&cmdline) || names(&environ) {
            let shown = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            left.push((pid, shown.trim().to_owned()));
        }
    }
    if left.is_empty() {
        println!("==> no process left behind: ok");
        return Ok(());
    }
    for (pid, cmdline) in &left {
        println!("left behind: {pid} {cmdline}");
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    Err(format!(
        "{} process(es) started by the run outlived it (killed now): {}",
        left.len(),
        left.iter()
            .map(|(pid, _)| pid.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Removes the shared memory of the test PostgreSQL clusters whose test
/// process was killed. A cluster's server dies with the test process that
/// started it (`setpriv --pdeathsig`), but a server killed that way leaves
/// its data directory, with `postmaster.pid`, and its small System V
/// segment, which nothing else would remove. A server that stopped
/// normally removed both.
fn remove_test_cluster_memory(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let pidfile = entry.path().join("data").join("postmaster.pid");
        let Ok(text) = std::fs::read_to_string(&pidfile) else {
            continue;
        };
        if let Some(shmid) = shared_memory_id(&text) {
            let removed = Command::new("ipcrm")
                .args(["-m", &shmid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if removed {
                println!(
                    "removed the shared memory of a killed test cluster ({})",
                    pidfile.display()
                );
            }
        }
    }
}

/// Removes the network namespaces of test processes that were killed. The
/// tests that simulate machines name theirs `asynctask-<pid>-...` after
/// the test process, and remove them when they end, failing or not; a
/// killed test process cannot, and a named namespace outlives it. Those of a
/// process still running (another run's) are left alone.
fn remove_stale_namespaces() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("asynctask-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let removed = Command::new("ip")
            .args(["netns", "del", &name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if removed {
            println!("removed the network namespace {name} of a killed test process");
        }
    }
}

/// The System V segment's id in a `postmaster.pid`: its seventh line holds
/// the key and the id.
fn shared_memory_id(pidfile: &str) -> Option<u64> {
    pidfile
        .lines()
        .nth(6)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Runs every example of every workspace member (found with `cargo metadata`), so
/// the code users copy first always works.
fn run_examples(root: &Path) -> Result<(), String> {
    let metadata = tidy::cargo_metadata_with(root, &["--no-deps", "--locked"])?;
    let mut examples = Vec::new();
    for package in metadata["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let name = package["name"].as_str().unwrap_or_default();
        for target in package["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let is_example = target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|kind| kind == "example"));
            if is_example {
                let example = target["name"].as_str().unwrap_or_default();
                examples.push((name.to_owned(), example.to_owned()));
            }
        }
    }
    if examples.is_empty() {
        return Err("no examples found".to_owned());
    }
    for (package, example) in &examples {
        println!("--> example {package}/{example}");
        run_command(
            root,
            &[
                "cargo",
                "run",
                "--quiet",
                "--locked",
                "--all-features",
                "-p",
                package,
                "--example",
                example,
            ],
            &[],
        )?;
    }
    println!("{} examples ran", examples.len());
    Ok(())
}

/// The MCP server's tests with the official Python `mcp` client (`tests/python`):
/// builds the binary, creates a venv under the target directory (once), installs
/// the pinned requirements, runs pytest. Python 3 is required: a missing
/// interpreter fails the step rather than skipping it.
fn run_python_tests(root: &Path) -> Result<(), String> {
    let (target, binary) = build_cli(root, false)?;
    let venv = format!("{target}/python-venv");
    let python = format!("{venv}/bin/python");
    if !Path::new(&python).exists() {
        run_command(root, &["python3", "-m", "venv", &venv], &[])?;
    }
    run_command(
        root,
        &[
            &python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "-r",
            "tests/python/requirements.txt",
        ],
        &[],
    )?;
    run_command(
        root,
        &[
            &python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-v",
            "tests/python",
        ],
        &[
            ("ASYNCTASK_BIN", binary.as_str()),
            ("PYTHONDONTWRITEBYTECODE", "1"),
        ],
    )
}

/// Builds the `asynctask` binary (release or debug); returns the target
/// directory and the binary's path.
pub(crate) fn build_cli(root: &Path, release: bool) -> Result<(String, String), String> {
    let mut argv = vec![
        "cargo",
        "build",
        "--quiet",
        "--locked",
        "-p",
        "asynctask-cli",
    ];
    if release {
        argv.push("--release");
    }
    run_command(root, &argv, &[])?;
    let metadata = tidy::cargo_metadata_with(root, &["--no-deps", "--locked"])?;
    let target = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata has no target_directory")?
        .to_owned();
    let binary = format!(
        "{target}/{}/asynctask",
        if release { "release" } else { "debug" }
    );
    Ok((target, binary))
}

/// The tests: cargo-nextest when installed, else `cargo test`.
fn run_tests(root: &Path) -> Result<(), String> {
    let nextest = Command::new("cargo")
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if nextest {
        run_command(
            root,
            &[
                "cargo",
                "nextest",
                "run",
                "--workspace",
                "--all-features",
                "--locked",
                "--no-fail-fast",
            ],
            &[],
        )
    } else {
        println!("(cargo-nextest is not installed: using cargo test)");
        run_command(
            root,
            &[
                "cargo",
                "test",
                "--workspace",
                "--all-features",
                "--locked",
                "--all-targets",
            ],
            &[],
        )
    }
}

/// Runs a command at the root. Its stderr goes to our stdout, so that each test
/// runner's summary line (nextest prints it on stderr) reaches CI's log in order.
pub(crate) fn run_command(root: &Path, argv: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let (program, args) = argv.split_first().ok_or("empty command")?;
    let status = Command::new(program)
        .args(args)
        .env("TMPDIR", run_tmp())
        .envs(env.iter().copied())
        .current_dir(root)
        .stderr(std::io::stdout())
        .status()
        .map_err(|err| format!("could not start `{}`: {err}", argv.join(" ")))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` exited with {status}", argv.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_memory_id_is_read_from_a_pidfile() {
        let pidfile =
            "10274\n/tmp/d/data\n1795577432\n5432\n/tmp/d\n\n 10010772         4\nready   \n";
        assert_eq!(shared_memory_id(pidfile), Some(4));
        assert_eq!(shared_memory_id("10274\n/tmp/d/data\n"), None);
    }

    #[test]
    fn a_process_naming_the_run_directory_is_reported_and_ended() {
        let tmp = std::env::temp_dir().join(format!("atci-test-{}", std::process::id()));
        let mut child = Command::new("sleep")
            .arg("30")
            .env("ASYNCTASK_TEST_DIR", &tmp)
            .spawn()
            .expect("sleep starts");
        // Until it has executed `sleep`, the child shows its parent's
        // environment: wait for that, so the check sees the sleeper's own.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read(format!("/proc/{}/cmdline", child.id()))
            .is_ok_and(|cmdline| !cmdline.starts_with(b"sleep"))
        {
            assert!(std::time::Instant::now() < deadline, "sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let found = check_leftovers(&tmp);
        // Ended by the check; reaped here in any case.
        let _ = child.kill();
        let _ = child.wait();
        let err = found.expect_err("the sleeper is left behind");
        assert!(err.contains(&child.id().to_string()), "{err}");
        assert_eq!(check_leftovers(&tmp), Ok(()));
    }
}
