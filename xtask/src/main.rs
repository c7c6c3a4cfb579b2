//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask ci` — everything CI checks, in order, stopping at the first failure;
//! - `cargo xtask tidy` — the house rules (also run by `cargo test` as a `#[test]`);
//! - `cargo xtask codegen [--check]` — regenerate (or check) the generated files;
//! - `cargo xtask fuzz [--minutes N | --replay FILE]` — fuzz the MCP server for N
//!   minutes (its bounded run is part of `cargo test`), or replay a session;
//! - `cargo xtask hosts [ARGS]` — the MCP server inside Claude Code, Codex CLI and
//!   Gemini CLI (not part of `ci`: it needs the node clients).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "xtask reports to the developer who runs it"
)]

mod ci;
mod codegen;
mod fuzz;
mod hosts;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
Usage: cargo xtask <TASK>

Tasks:
  ci                 fmt, clippy, tidy, codegen --check, docs, tests, doc tests
  tidy               check the house rules (file headers, lints, layering, ...)
  codegen [--check]  regenerate the generated files, or check they are fresh
  fuzz [--minutes N] fuzz the MCP server with fresh seeds for N minutes (default
                     10; a bounded run is part of the tests)
  fuzz --replay FILE replay one session (a reproducer under target/fuzz/)
  hosts [ARGS]       the MCP server inside Claude Code, Codex CLI and Gemini CLI
                     (tests/hosts; not part of ci) with the debug build
                     (--release: the release build); other ARGS go to
                     run_hosts.py, e.g. --client codex";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let root = project_root();
    let result = match args.as_slice() {
        ["ci"] => ci::run(&root),
        ["tidy"] => tidy::check(&root).map(|()| println!("tidy: ok")),
        ["codegen"] => codegen::run(&root, codegen::Mode::Write),
        ["codegen", "--check"] => codegen::run(&root, codegen::Mode::Check),
        ["fuzz", rest @ ..] => fuzz::run(&root, rest),
        ["hosts", rest @ ..] => hosts::run(&root, rest),
        ["-h" | "--help" | "help"] | [] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("xtask: unknown arguments {args:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's directory.
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}
