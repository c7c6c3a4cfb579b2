//! `cargo xtask codegen`: the generated files and their freshness check.
//!
//! Each generator renders a file from the code that owns its content. In write
//! mode the files are written; in check mode a stale or missing file is an error
//! that says to run `cargo xtask codegen`. No file is generated yet: the tool
//! schemas arrive with `asynctask-tools`.

use std::path::{Path, PathBuf};

/// Whether to write the generated files or only check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Write every generated file.
    Write,
    /// Fail when a file on disk differs from what would be generated.
    Check,
}

/// A generated file: its path relative to the workspace root and its contents.
#[derive(Debug)]
pub(crate) struct Generated {
    pub(crate) path: PathBuf,
    pub(crate) contents: String,
}

/// Every file the project generates.
pub(crate) fn generate(_root: &Path) -> Result<Vec<Generated>, String> {
    Ok(Vec::new())
}

/// The `codegen --check` CI step.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    run(root, Mode::Check)
}

/// Writes or checks every generated file.
pub(crate) fn run(root: &Path, mode: Mode) -> Result<(), String> {
    let files = generate(root)?;
    let mut stale = Vec::new();
    for file in &files {
        let path = root.join(&file.path);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(file.contents.as_str()) {
            continue;
        }
        match mode {
            Mode::Check => stale.push(file.path.display().to_string()),
            Mode::Write => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
                }
                std::fs::write(&path, &file.contents)
                    .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
                println!("codegen: wrote {}", file.path.display());
            }
        }
    }
    if !stale.is_empty() {
        return Err(format!(
            "generated files are stale: {}; run `cargo xtask codegen`",
            stale.join(", ")
        ));
    }
    println!("codegen: {} generated file(s) up to date", files.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_files_are_fresh() {
        let root = crate::project_root();
        if let Err(why) = super::check(&root) {
            panic!("{why}");
        }
    }
}
