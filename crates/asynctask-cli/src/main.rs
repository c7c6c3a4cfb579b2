//! The `asynctask` binary: background subagents from the command line.
//!
//! Today it answers `--help` and `--version`; the `demo`, `schemas`, `run` and
//! `mcp` subcommands arrive with the issues that build them.

use std::process::ExitCode;

const USAGE: &str = "\
asynctask — background subagent tasks for AI agent hosts

Usage: asynctask [OPTIONS]

Options:
  -h, --help       Print this help
  -V, --version    Print the version

The demo, schemas, run and mcp subcommands are not built yet.
The crates are usable today: see README.md.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None | Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            println!(
                "\nDefault limit: task-max-async = {}",
                asynctask_model::MaxAsyncTasks::default()
            );
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("asynctask {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("asynctask: unknown argument '{other}' (try --help)");
            ExitCode::from(2)
        }
    }
}
