//! `cargo xtask hosts`: the MCP server inside the real clients, Claude Code,
//! Codex CLI and Gemini CLI, against a scripted fake model (`tests/hosts`).
//!
//! Not a CI step: CI machines have no node clients. It builds `asynctask` (the
//! debug build `cargo xtask ci` builds too; `--release` for the release build) and
//! runs `tests/hosts/run_hosts.py` with it, passing on any other arguments
//! (`--client codex`, `--keep`, ...); a client that is not installed fails the
//! run unless `--client` leaves it out. The clients are found by
//! `run_hosts.py`: `--claude`/`--codex`/`--gemini`, else `$CLAUDE_BIN`,
//! `$CODEX_BIN`, `$GEMINI_BIN`, else the commands on `PATH`.

use std::path::Path;

use crate::ci;

/// Builds `asynctask` (debug, or release when `args` holds `--release`) and runs
/// the host tests with it.
pub(crate) fn run(root: &Path, args: &[&str]) -> Result<(), String> {
    let release = args.contains(&"--release");
    let (_, binary) = ci::build_cli(root, release)?;
    let mut argv = vec!["python3", "tests/hosts/run_hosts.py", "--binary", &binary];
    argv.extend(args.iter().filter(|arg| **arg != "--release"));
    ci::run_command(root, &argv, &[])
}
