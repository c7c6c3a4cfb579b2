//! Where a run's files go: the output directory (the host's, or a temporary
//! one per runner that is removed with it), the file names made from task
//! ids, a run's files, and removing a file that may be gone.

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::Duration;

/// What every temporary output directory's name starts with; the process id
/// and a random number follow (`asynctask-<pid>-<8 hex digits>`).
const PREFIX: &str = "asynctask-";

/// What a temporary output directory's name gets when its removal begins.
const REMOVING: &str = ".removing";

/// The file in a temporary output directory its owner holds an exclusive
/// `flock` on for as long as it uses the directory. Another runner sweeps the
/// directory only when it can take that lock: a process id alone says nothing
/// across PID namespaces (containers sharing a `$TMPDIR`).
const LOCK: &str = ".lock";

/// A held exclusive lock on a directory's [`LOCK`] file.
type DirLock = nix::fcntl::Flock<std::fs::File>;

/// How long dropping the directory waits for its removal. Whatever is not
/// removed by then is removed by a thread of its own; if the process exits
/// first, by the next runner that makes its temporary directory under the same
/// parent. A client that stops its MCP server with a signal gives it half a
/// second before `SIGKILL`, and on a busy disk unlinking files that were just
/// written can take longer than that.
pub(crate) const REMOVAL_WAIT: Duration = Duration::from_millis(100);

/// The runner's temporary output directory: `asynctask-<pid>-<random>` under
/// [`std::env::temp_dir`], made on first use, removed (with everything in it)
/// when dropped — that is, when the last clone of the runner is. While it
/// exists it holds an exclusive lock on its [`LOCK`] file. Making it also
/// removes, in the background, the temporary directories of runners
/// whose process is gone (killed, or exited before their removal finished).
#[derive(Debug, Default)]
pub(crate) struct TempOutputDir {
    /// Where the directory is made; `None`: [`std::env::temp_dir`].
    parent: Option<PathBuf>,
    path: Mutex<Option<(PathBuf, DirLock)>>,
}

impl TempOutputDir {
    /// A temporary directory made under `parent` instead of the system's.
    #[cfg(test)]
    pub(crate) fn under(parent: PathBuf) -> Self {
        TempOutputDir {
            parent: Some(parent),
            path: Mutex::default(),
        }
    }

    /// The directory, made now if it does not exist yet.
    pub(crate) fn get_or_create(&self) -> io::Result<PathBuf> {
        let mut path = self.path.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((path, _)) = &*path {
            return Ok(path.clone());
        }
        let parent = match &self.parent {
            Some(parent) => parent.clone(),
            None => std::path::absolute(std::env::temp_dir())?,
        };
        let created = create_unique_dir(&parent)?;
        let lock = match lock_new(&created) {
            Ok(lock) => lock,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&created);
                return Err(err);
            }
        };
        *path = Some((created.clone(), lock));
        drop(path);
        let owner = std::fs::metadata(&created)?.uid();
        // Best effort, and never in the way of the run that made the
        // directory: a thread that cannot start sweeps nothing.
        let _ = std::thread::Builder::new()
            .name("asynctask-outputs-sweep".to_owned())
            .spawn(move || sweep_abandoned(&parent, owner));
        Ok(created)
    }

    /// The directory, if it was made.
    pub(crate) fn existing(&self) -> Option<PathBuf> {
        self.path
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(path, _)| path.clone())
    }
}

/// Creates (or empties) the file at `path`, private to its owner (mode 0600),
/// as the state directory it may be in: a subagent's output file.
pub(crate) fn create_private(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Creates the lock file in the new directory `dir` and takes its lock.
fn lock_new(dir: &Path) -> io::Result<DirLock> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join(LOCK))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| io::Error::from(errno))
}

/// Whether the directory `dir` of a process that looks gone is free to
/// remove: `Some(lock)`, held until the removal is done, when its owner
/// holds no lock on it; `Some(None)` for a directory without a lock file (a
/// runner of an older version made it: its process id must do); `None` when
/// it is locked, or its lock file cannot be read.
fn take_abandoned(dir: &Path) -> Option<Option<DirLock>> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(dir.join(LOCK));
    match opened {
        Ok(file) => nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .ok()
            .map(Some),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Some(None),
        Err(_) => None,
    }
}

impl Drop for TempOutputDir {
    fn drop(&mut self) {
        let path = self.path.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some((path, lock)) = path.take() {
            remove_within(&path, lock, REMOVAL_WAIT);
        }
    }
}

/// Removes the directory `path` with everything in it, waiting at most
/// `wait`; a thread finishes what takes longer. The directory's `lock` is
/// held until the removal is done.
///
/// The directory is first renamed to `<name>.removing`: one change to its
/// parent, fast even when unlinking freshly written files waits for the disk.
/// Its name is gone at once, and what is left of it, should the process exit
/// before the thread is done, is plainly abandoned.
fn remove_within(path: &Path, lock: DirLock, wait: Duration) {
    let mut doomed = path.as_os_str().to_owned();
    doomed.push(REMOVING);
    let doomed = PathBuf::from(doomed);
    let target = match std::fs::rename(path, &doomed) {
        Ok(()) => doomed,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return,
        Err(_) => path.to_owned(),
    };
    let (done, finished) = mpsc::channel();
    let removal = {
        let target = target.clone();
        std::thread::Builder::new()
            .name("asynctask-outputs-removal".to_owned())
            .spawn(move || {
                let removed = std::fs::remove_dir_all(&target);
                drop(lock);
                let _ = done.send(removed);
            })
    };
    let result = match removal {
        Ok(_) => match finished.recv_timeout(wait) {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(
                    path = %target.display(),
                    waited_ms = wait.as_millis(),
                    "the subagents' output directory is still being removed; if this process \
                     exits first, the next runner to make a temporary directory there removes \
                     what is left"
                );
                return;
            }
        },
        Err(_) => std::fs::remove_dir_all(&target),
    };
    if let Err(err) = result
        && err.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %target.display(), %err, "cannot remove the subagents' output directory");
    }
}

/// The process id in a temporary output directory's name
/// (`asynctask-<pid>-<8 hex digits>`, maybe followed by `.removing`); `None`
/// for any other name.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, random) = rest.split_once('-')?;
    let random = random.strip_suffix(REMOVING).unwrap_or(random);
    let well_formed = !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && random.len() == 8
        && random.bytes().all(|b| b.is_ascii_hexdigit());
    if well_formed { pid.parse().ok() } else { None }
}

/// Whether process `pid` may still run (anything but "no such process" counts
/// as yes: a directory is never taken from a process that may use it).
fn may_be_running(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return true;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Removes, in `parent`, the temporary output directories owned by user
/// `owner` whose process is gone: left behind by a process that was killed,
/// or that exited while its removal was still going on. Gone means both that
/// no process has the id in the directory's name and that the lock on its
/// [`LOCK`] file can be taken (a directory without one, made by an older
/// version, goes on its process id alone). Returns how many it removed.
/// Another process's directory, one of this process, anything not a
/// directory (a symbolic link is not followed) and any other name are left
/// alone.
pub(crate) fn sweep_abandoned(parent: &Path, owner: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let own_pid = std::process::id();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if pid == own_pid || may_be_running(pid) {
            continue;
        }
        // `DirEntry::metadata` does not follow a symbolic link.
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        if !metadata.is_dir() || metadata.uid() != owner {
            continue;
        }
        let Some(_lock) = take_abandoned(&entry.path()) else {
            tracing::debug!(path = %entry.path().display(), "an output directory whose process id is gone is still locked: kept");
            continue;
        };
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                removed += 1;
                tracing::debug!(path = %entry.path().display(), "removed an abandoned output directory");
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::debug!(path = %entry.path().display(), %err, "cannot remove an abandoned output directory");
            }
        }
    }
    removed
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
            "{PREFIX}{}-{:08x}",
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

/// Removes a file that may not exist; a failure is only logged.
pub(crate) fn remove_if_there(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot remove a subagent's file");
        }
    }
}

/// A run's stdout file, just created, and where its subagent may write its
/// variables.
pub(crate) struct OutputFile {
    pub(crate) path: PathBuf,
    pub(crate) file: std::fs::File,
    pub(crate) vars: PathBuf,
}

/// Removes a file (the questions FIFO) when the run ends, however it ends.
pub(crate) struct RemoveOnDrop(pub(crate) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        remove_if_there(&self.0);
    }
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
            .unwrap_or_default()
            .to_owned();
        assert!(
            name.starts_with(&format!("asynctask-{}-", std::process::id())),
            "{name}"
        );
        assert_eq!(owner_pid(&name), Some(std::process::id()));
        // Its lock is held while it lives.
        assert!(path.join(LOCK).is_file());
        assert!(take_abandoned(&path).is_none(), "not locked");
        std::fs::write(path.join("x.out"), "x").expect("write");
        drop(temp);
        // Renamed before the removal starts: the name is gone at once.
        assert!(!path.exists());
        let mut removing = path.into_os_string();
        removing.push(REMOVING);
        eventually("the renamed directory is removed", || {
            !Path::new(&removing).exists()
        });
    }

    /// Waits until `check` holds; fails the test after 10 s.
    fn eventually(what: &str, check: impl Fn() -> bool) {
        asynctask_test_support::eventually(what, Duration::from_secs(10), check);
    }

    #[test]
    fn only_well_formed_names_carry_a_pid() {
        assert_eq!(owner_pid("asynctask-42-0000abcd"), Some(42));
        assert_eq!(owner_pid("asynctask-42-0000ABCD.removing"), Some(42));
        for name in [
            "asynctask-42-0000abc",
            "asynctask-42-0000abcde",
            "asynctask-42-0000abcg",
            "asynctask--0000abcd",
            "asynctask-cli-42-broken",
            "asynctask-42-0000abcd.old",
            "asynctask-99999999999-0000abcd",
            "other-42-0000abcd",
        ] {
            assert_eq!(owner_pid(name), None, "{name}");
        }
    }

    /// The process id of a process that has exited.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true runs");
        let pid = child.id();
        child.wait().expect("true exits");
        pid
    }

    #[test]
    fn directories_of_processes_that_are_gone_are_swept_and_nothing_else() {
        let parent = tempfile::tempdir().expect("tempdir");
        let dead = dead_pid();
        let alive = std::os::unix::process::parent_id();
        let mk = |name: &str| {
            let dir = parent.path().join(name);
            std::fs::create_dir(&dir).expect("mkdir");
            std::fs::write(dir.join("task.out"), "output").expect("write");
            dir
        };
        let killed = mk(&format!("asynctask-{dead}-0000abcd"));
        let cut_short = mk(&format!("asynctask-{dead}-0000abce.removing"));
        // A lock nobody holds: its owner is gone.
        let unlocked = mk(&format!("asynctask-{dead}-0000abd1"));
        std::fs::write(unlocked.join(LOCK), "").expect("write");
        // A lock held (here, by this test): its owner lives, in a PID
        // namespace of its own where the process id means another process.
        let locked = mk(&format!("asynctask-{dead}-0000abd2"));
        let held = lock_new(&locked).expect("locked");
        let locked_removing = mk(&format!("asynctask-{dead}-0000abd3.removing"));
        let held_too = lock_new(&locked_removing).expect("locked");
        let running = mk(&format!("asynctask-{alive}-0000abcd"));
        let ours = mk(&format!("asynctask-{}-0000abcd", std::process::id()));
        let other_name = mk(&format!("asynctask-cli-{dead}-broken"));
        let a_file = parent.path().join(format!("asynctask-{dead}-0000abcf"));
        std::fs::write(&a_file, "not a directory").expect("write");
        let target = mk("elsewhere");
        let a_link = parent.path().join(format!("asynctask-{dead}-0000abd0"));
        std::os::unix::fs::symlink(&target, &a_link).expect("symlink");
        let owner = std::fs::metadata(parent.path()).expect("metadata").uid();

        assert_eq!(
            sweep_abandoned(parent.path(), owner.wrapping_add(1)),
            0,
            "another user's"
        );
        assert_eq!(sweep_abandoned(parent.path(), owner), 3);
        assert!(!killed.exists() && !cut_short.exists() && !unlocked.exists());
        for kept in [
            &running,
            &ours,
            &other_name,
            &a_file,
            &target,
            &a_link,
            &locked,
            &locked_removing,
        ] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        // Once its owner lets go, it is abandoned.
        drop((held, held_too));
        assert_eq!(sweep_abandoned(parent.path(), owner), 2);
        assert!(!locked.exists() && !locked_removing.exists());
        assert!(target.join("task.out").exists(), "the link was followed");
        assert_eq!(sweep_abandoned(&parent.path().join("missing"), owner), 0);
    }

    #[test]
    fn making_a_temporary_directory_sweeps_the_abandoned_ones_beside_it() {
        let parent = tempfile::tempdir().expect("tempdir");
        let abandoned = parent
            .path()
            .join(format!("asynctask-{}-0000abcd", dead_pid()));
        std::fs::create_dir(&abandoned).expect("mkdir");
        let temp = TempOutputDir::under(parent.path().to_owned());
        let made = temp.get_or_create().expect("created");
        eventually("the abandoned directory is swept", || !abandoned.exists());
        assert!(made.is_dir());
        drop(temp);
        eventually("the parent is empty", || {
            std::fs::read_dir(parent.path())
                .expect("read")
                .next()
                .is_none()
        });
    }
}
