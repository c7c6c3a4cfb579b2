//! `cargo xtask codegen`: regenerate, or check, the generated files.
//!
//! The generated files are the tool definitions for each LLM provider,
//! `docs/schemas/<provider>/<tool>.json`, and the tool reference `docs/tools.md`.
//! They are rendered by the code that owns their content: the test
//! `codegen::generated_files_are_fresh` of `asynctask-tools` (in
//! `crates/asynctask-tools/tests/it/codegen.rs`). xtask depends on no workspace
//! crate, so it runs that one test through cargo:
//!
//! - `cargo xtask codegen` sets `ASYNCTASK_CODEGEN=write`, and the test writes
//!   every stale or missing file and deletes provider files no longer generated;
//! - `cargo xtask codegen --check` (also a `cargo xtask ci` step) runs it without
//!   the variable, and the test fails naming each stale, missing or leftover file,
//!   with the hint to run `cargo xtask codegen`.
//!
//! A plain `cargo test` runs the same check, so a stale file fails CI even when
//! nobody runs xtask.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// Whether to write the generated files or only check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Write every generated file.
    Write,
    /// Fail when a file on disk differs from what would be generated.
    Check,
}

/// The test that renders the generated files, and the variable that makes it write.
const GENERATOR_TEST: &str = "codegen::generated_files_are_fresh";
const WRITE_VAR: &str = "ASYNCTASK_CODEGEN";

/// The cargo arguments that run the generator test.
fn cargo_args(mode: Mode) -> Vec<&'static str> {
    let mut args = vec![
        "test",
        "-p",
        "asynctask-tools",
        "--test",
        "it",
        "--locked",
        "--",
        GENERATOR_TEST,
        "--exact",
    ];
    if mode == Mode::Write {
        // Show which files were written: a passing test's output is captured.
        args.push("--nocapture");
    }
    args
}

/// The `codegen --check` CI step.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    run(root, Mode::Check)
}

/// Writes or checks every generated file.
pub(crate) fn run(root: &Path, mode: Mode) -> Result<(), String> {
    // The cargo that runs xtask, so that the same toolchain builds the test.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let args = cargo_args(mode);
    let mut command = Command::new(&cargo);
    command.args(&args).current_dir(root);
    match mode {
        Mode::Write => command.env(WRITE_VAR, "write"),
        // A variable left exported in the shell must not turn a check into a write.
        Mode::Check => command.env_remove(WRITE_VAR),
    };
    let shown = format!("cargo {}", args.join(" "));
    let status = command
        .status()
        .map_err(|err| format!("could not start `{shown}`: {err}"))?;
    match (status.success(), mode) {
        (true, _) => Ok(()),
        (false, Mode::Write) => Err(format!("`{WRITE_VAR}=write {shown}` exited with {status}")),
        (false, Mode::Check) => Err(format!(
            "generated files are stale or `{shown}` failed (see above); run `cargo xtask codegen`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where [`GENERATOR_TEST`] lives.
    const GENERATOR_SOURCE: &str = "crates/asynctask-tools/tests/it/codegen.rs";

    // Running the generator from here would start cargo inside `cargo test`, which
    // waits on the build lock the outer cargo holds. The generator test itself runs
    // in every `cargo test`; these tests pin the contract between the two instead.

    #[test]
    fn check_and_write_run_the_same_exact_test() {
        let check = cargo_args(Mode::Check);
        assert_eq!(
            check,
            [
                "test",
                "-p",
                "asynctask-tools",
                "--test",
                "it",
                "--locked",
                "--",
                "codegen::generated_files_are_fresh",
                "--exact"
            ]
        );
        let write = cargo_args(Mode::Write);
        assert_eq!(write[..check.len()], check[..]);
        assert_eq!(write[check.len()..], ["--nocapture"]);
    }

    #[test]
    fn the_generator_test_exists_and_reads_the_write_variable() {
        let path = crate::project_root().join(GENERATOR_SOURCE);
        let source = std::fs::read_to_string(&path).expect("the generator test's source");
        let name = GENERATOR_TEST.rsplit("::").next().expect("a test name");
        assert!(
            source.contains(&format!("#[test]\nfn {name}()")),
            "{} must define `#[test] fn {name}()`",
            path.display()
        );
        assert!(
            source.contains(&format!("\"{WRITE_VAR}\"")) && source.contains("\"write\""),
            "{} must write the files when {WRITE_VAR}=write",
            path.display()
        );
        let module = GENERATOR_TEST.split("::").next().expect("a module name");
        let main = std::fs::read_to_string(path.with_file_name("main.rs")).expect("main.rs");
        assert!(
            main.contains(&format!("mod {module};")),
            "tests/it/main.rs must declare `mod {module};`"
        );
    }
}
