//! Where a run's files go: the output directory (the host's, or a temporary
//! one per runner that is removed with it) and the file names made from task
//! ids.

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The runner's temporary output directory: `asynctask-<pid>-<random>` under
/// [`std::env::temp_dir`], made on first use, removed (with everything in it)
/// when dropped — that is, when the last clone of the runner is.
#[derive(Debug, Default)]
pub(crate) struct TempOutputDir {
    path: Mutex<Option<PathBuf>>,
}

impl TempOutputDir {
    /// The directory, made now if it does not exist yet.
    pub(crate) fn get_or_create(&self) -> io::Result<PathBuf> {
        let mut path = self.path.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(path) = &*path {
            return Ok(path.clone());
        }
        let created = create_unique_dir(&std::path::absolute(std::env::temp_dir())?)?;
        *path = Some(created.clone());
        Ok(created)
    }
}

impl TempOutputDir {
    /// The directory, if it was made.
    pub(crate) fn existing(&self) -> Option<PathBuf> {
        self.path
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TempOutputDir {
    fn drop(&mut self) {
        let path = self.path.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(path) = path.take()
            && let Err(err) = std::fs::remove_dir_all(&path)
            && err.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %err, "cannot remove the subagents' output directory");
        }
    }
}

/// Makes a new directory `asynctask-<pid>-<random>` in `parent`, readable by
/// its owner only (it holds the subagents' output). A name that is taken is
/// never reused: another one is drawn.
fn create_unique_dir(parent: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..8 {
        // Each `RandomState` is seeded afresh, so this is a new random number.
        let random = RandomState::new().hash_one(std::process::id());
        let path = parent.join(format!(
            "asynctask-{}-{:08x}",
            std::process::id(),
            random & 0xffff_ffff
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// The most characters of a task id kept in a file name.
const STEM_CHARS: usize = 100;

/// The file name stem for a task's files: the id itself when it is made only of
/// ASCII letters, digits, `-` and `_` (a UUID is), else those characters with
/// every other one replaced by `_`, and a hash of the whole id appended so two
/// ids never share a file. A stem never holds `/` or `.`, so no id can name a
/// file outside the output directory.
pub(crate) fn file_stem(task_id: &str) -> String {
    let safe: String = task_id
        .chars()
        .take(STEM_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == task_id && !safe.is_empty() {
        return safe;
    }
    // `DefaultHasher::new` has fixed keys: the same id gets the same stem.
    let mut hasher = DefaultHasher::new();
    task_id.hash(&mut hasher);
    format!("{safe}-{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_is_its_own_stem() {
        let id = "3f2a09c1-7b4e-4d2a-9c1e-0a1b2c3d4e5f";
        assert_eq!(file_stem(id), id);
    }

    #[test]
    fn an_id_that_could_escape_is_made_safe_and_distinct() {
        for id in ["../../etc/passwd", "a/b", "..", "", ".hidden", "a b"] {
            let stem = file_stem(id);
            assert!(
                stem.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{id:?} -> {stem:?}"
            );
            assert_eq!(Path::new(&stem).components().count(), 1);
        }
        assert_ne!(file_stem("a/b"), file_stem("a_b"));
        assert_ne!(file_stem("a/b"), file_stem("a.b"));
        assert_eq!(file_stem("a/b"), file_stem("a/b"));
        assert!(file_stem(&"x".repeat(1000)).len() < 200);
    }

    #[test]
    fn the_temporary_directory_is_made_once_and_removed_on_drop() {
        let temp = TempOutputDir::default();
        let path = temp.get_or_create().expect("created");
        assert_eq!(temp.get_or_create().expect("same"), path);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        assert!(
            name.starts_with(&format!("asynctask-{}-", std::process::id())),
            "{name}"
        );
        std::fs::write(path.join("x.out"), "x").expect("write");
        drop(temp);
        assert!(!path.exists());
    }
}
