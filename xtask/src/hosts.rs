//! `cargo xtask hosts`: the MCP server inside the real clients, Claude Code,
//! Codex CLI and Gemini CLI, against a scripted fake model (`tests/hosts`).
//!
//! Not a CI step: CI machines have no node clients. It builds the release binary
//! and runs `tests/hosts/run_hosts.py` with it, passing on any other arguments
//! (`--client codex`, `--keep`, ...); a client that is not installed fails the
//! run unless `--client` leaves it out.

use std::path::Path;

use crate::ci;

/// Builds `asynctask` (release) and runs the host tests with it.
pub(crate) fn run(root: &Path, args: &[&str]) -> Result<(), String> {
    let (_, binary) = ci::build_cli(root, true)?;
    let mut argv = vec!["python3", "tests/hosts/run_hosts.py", "--binary", &binary];
    argv.extend_from_slice(args);
    ci::run_command(root, &argv, &[])
}
