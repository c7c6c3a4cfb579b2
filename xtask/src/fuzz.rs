//! `cargo xtask fuzz`: the MCP server's fuzz test, run long or replaying one
//! session.
//!
//! The fuzzing lives in the test `fuzz::sessions_keep_the_protocol` of
//! `asynctask-mcp` (`crates/asynctask-mcp/src/fuzz.rs`), which every
//! `cargo test` runs bounded (256 sessions from a fixed seed). xtask depends on
//! no workspace crate, so it runs that one test through cargo, steering it
//! with environment variables:
//!
//! - `cargo xtask fuzz [--minutes N]` (default 10) sets `ASYNCTASK_FUZZ_MINUTES`:
//!   rounds of 64 sessions from fresh seeds until the time is up, progress
//!   after each round. A failure is shrunk and written under `target/fuzz/`
//!   as the lines to send, with the command that replays it;
//! - `cargo xtask fuzz --replay FILE` sets `ASYNCTASK_FUZZ_REPLAY`: one
//!   session of FILE's lines, its transcript printed;
//! - `--seed S` and `--cases N` run the bounded test with another seed or
//!   more cases (`ASYNCTASK_FUZZ_SEED`, `ASYNCTASK_FUZZ_CASES`).

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::tidy;

/// The test that fuzzes, and the variables that steer it.
const FUZZ_TEST: &str = "fuzz::sessions_keep_the_protocol";
const MINUTES_VAR: &str = "ASYNCTASK_FUZZ_MINUTES";
const REPLAY_VAR: &str = "ASYNCTASK_FUZZ_REPLAY";
const SEED_VAR: &str = "ASYNCTASK_FUZZ_SEED";
const CASES_VAR: &str = "ASYNCTASK_FUZZ_CASES";
const DIR_VAR: &str = "ASYNCTASK_FUZZ_DIR";

/// How long `cargo xtask fuzz` runs without `--minutes`.
const DEFAULT_MINUTES: &str = "10";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// Fresh seeds for this many minutes.
    Minutes(String),
    /// The bounded run, with this seed and number of cases.
    Bounded {
        seed: Option<String>,
        cases: Option<String>,
    },
    /// One session, from this file.
    Replay(String),
}

fn parse(args: &[&str]) -> Result<Request, String> {
    let mut minutes = None;
    let mut replay = None;
    let mut seed = None;
    let mut cases = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .map(|value| (*value).to_owned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match *arg {
            "--minutes" => {
                let value = value("--minutes")?;
                if !value.parse::<f64>().is_ok_and(|m| m > 0.0) {
                    return Err(format!("--minutes {value}: not a positive number"));
                }
                minutes = Some(value);
            }
            "--replay" => replay = Some(value("--replay")?),
            "--seed" => seed = Some(value("--seed")?),
            "--cases" => cases = Some(value("--cases")?),
            other => return Err(format!("fuzz: unknown argument {other:?}")),
        }
    }
    match (minutes, replay, seed.is_some() || cases.is_some()) {
        (None, None, false) => Ok(Request::Minutes(DEFAULT_MINUTES.to_owned())),
        (Some(minutes), None, false) => Ok(Request::Minutes(minutes)),
        (None, Some(file), false) => Ok(Request::Replay(file)),
        (None, None, true) => Ok(Request::Bounded { seed, cases }),
        _ => Err("fuzz: --minutes, --replay and --seed/--cases do not go together".to_owned()),
    }
}

/// The cargo arguments that run the fuzz test, its output shown.
fn cargo_args() -> Vec<&'static str> {
    vec![
        "test",
        "-p",
        "asynctask-mcp",
        "--lib",
        "--locked",
        "--",
        FUZZ_TEST,
        "--exact",
        "--nocapture",
    ]
}

/// Runs the fuzz test as `args` ask.
pub(crate) fn run(root: &Path, args: &[&str]) -> Result<(), String> {
    let request = parse(args)?;
    let metadata = tidy::cargo_metadata_with(root, &["--no-deps", "--locked"])?;
    let target = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata has no target_directory")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(&cargo);
    command.args(cargo_args()).current_dir(root);
    // Variables left exported in the shell must not change what was asked.
    for var in [MINUTES_VAR, REPLAY_VAR, SEED_VAR, CASES_VAR] {
        command.env_remove(var);
    }
    command.env(DIR_VAR, Path::new(target).join("fuzz"));
    match &request {
        Request::Minutes(minutes) => {
            command.env(MINUTES_VAR, minutes);
        }
        Request::Bounded { seed, cases } => {
            if let Some(seed) = seed {
                command.env(SEED_VAR, seed);
            }
            if let Some(cases) = cases {
                command.env(CASES_VAR, cases);
            }
        }
        Request::Replay(file) => {
            // The test runs in the crate's directory: the path must not be relative.
            let file =
                std::path::absolute(file).map_err(|err| format!("fuzz: --replay {file}: {err}"))?;
            if !file.is_file() {
                return Err(format!("fuzz: --replay {}: no such file", file.display()));
            }
            command.env(REPLAY_VAR, file);
        }
    }
    let shown = format!("cargo {}", cargo_args().join(" "));
    let status = command
        .status()
        .map_err(|err| format!("could not start `{shown}`: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{shown}` exited with {status}: see the reproducer and the replay command above"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where [`FUZZ_TEST`] lives.
    const FUZZ_SOURCE: &str = "crates/asynctask-mcp/src/fuzz.rs";

    #[test]
    fn arguments_say_what_runs() {
        assert_eq!(parse(&[]), Ok(Request::Minutes("10".to_owned())));
        assert_eq!(
            parse(&["--minutes", "2.5"]),
            Ok(Request::Minutes("2.5".to_owned()))
        );
        assert_eq!(
            parse(&["--replay", "target/fuzz/f.jsonl"]),
            Ok(Request::Replay("target/fuzz/f.jsonl".to_owned()))
        );
        assert_eq!(
            parse(&["--seed", "0x2a", "--cases", "1000"]),
            Ok(Request::Bounded {
                seed: Some("0x2a".to_owned()),
                cases: Some("1000".to_owned())
            })
        );
        assert!(parse(&["--minutes"]).is_err());
        assert!(parse(&["--minutes", "0"]).is_err());
        assert!(parse(&["--minutes", "1", "--replay", "f"]).is_err());
        assert!(parse(&["--fast"]).is_err());
    }

    // Running the test from here would start cargo inside `cargo test`; the
    // test itself runs in every `cargo test`. These pin the contract between
    // the two instead.
    #[test]
    fn the_fuzz_test_exists_and_reads_its_variables() {
        let root = crate::project_root();
        let path = root.join(FUZZ_SOURCE);
        let source = std::fs::read_to_string(&path).expect("the fuzz test's source");
        let name = FUZZ_TEST.rsplit("::").next().expect("a test name");
        assert!(
            source.contains(&format!("#[test]\nfn {name}()")),
            "{} must define `#[test] fn {name}()`",
            path.display()
        );
        let run = std::fs::read_to_string(path.with_file_name("fuzz").join("run.rs"))
            .expect("the fuzz run's source");
        for var in [MINUTES_VAR, REPLAY_VAR, SEED_VAR, CASES_VAR, DIR_VAR] {
            assert!(
                run.contains(&format!("\"{var}\"")),
                "the fuzz run must read {var}"
            );
        }
        let lib =
            std::fs::read_to_string(root.join("crates/asynctask-mcp/src/lib.rs")).expect("lib.rs");
        assert!(
            lib.contains("mod fuzz;"),
            "asynctask-mcp's lib.rs must declare `mod fuzz;`"
        );
        assert_eq!(cargo_args()[..4], ["test", "-p", "asynctask-mcp", "--lib"]);
    }
}
