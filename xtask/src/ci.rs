//! `cargo xtask ci`: every check CI runs, in order, stopping at the first failure.

use std::path::Path;
use std::process::{Command, Stdio};
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

/// Runs every step; the error names the step that failed.
pub(crate) fn run(root: &Path) -> Result<(), String> {
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
    run_command(
        root,
        &[
            "cargo",
            "build",
            "--quiet",
            "--locked",
            "-p",
            "asynctask-cli",
        ],
        &[],
    )?;
    let metadata = tidy::cargo_metadata_with(root, &["--no-deps", "--locked"])?;
    let target = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata has no target_directory")?;
    let binary = format!("{target}/debug/asynctask");
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
