//! What asynctask's own tests share, so that no test writes it again: a
//! private temporary directory that goes away with the test, waiting for a
//! state with a deadline instead of sleeping and hoping, checking that the
//! processes a test started are gone, and (feature `postgres`) a fresh
//! database on a real PostgreSQL server ([`TestDatabase`]), certificates to
//! serve it over TLS ([`certificates`]), and several machines simulated by
//! network namespaces joined by links ([`Network`]).
//!
//! A dev-dependency only: no crate of the workspace depends on it for what it
//! ships (tidy checks), and it depends on no crate of the workspace.
//!
//! Waiting never asserts how fast something happened: the deadline only turns
//! a hang into a failure that says what never happened. A test that needs a
//! bound on time is a benchmark.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use asynctask_test_support::{eventually, temp_dir};
//!
//! let dir = temp_dir("example");
//! let file = dir.path().join("ready");
//! std::thread::spawn({
//!     let file = file.clone();
//!     move || std::fs::write(file, "done")
//! });
//! eventually("the file is written", Duration::from_secs(10), || file.exists());
//! ```

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

pub use tempfile::TempDir;

#[cfg(feature = "postgres")]
mod netns;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use crate::netns::{Host, Network};
#[cfg(feature = "postgres")]
pub use crate::postgres::{DATABASE_URL_VAR, ServerSetup, TestDatabase, certificates};

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(5);

/// A fresh directory under the system's temporary directory, named after
/// `prefix`, private to the user, removed with everything in it when dropped.
/// Its path is canonical (no symbolic link on the way), so it compares equal
/// to what a process started in it reports as its working directory.
///
/// # Panics
///
/// When the directory cannot be made: the test cannot run.
#[must_use]
pub fn temp_dir(prefix: &str) -> TempDir {
    let parent = std::env::temp_dir();
    let parent = parent.canonicalize().unwrap_or(parent);
    match tempfile::Builder::new()
        .prefix(&format!("asynctask-{prefix}-"))
        .tempdir_in(parent)
    {
        Ok(dir) => dir,
        Err(err) => panic!("cannot make a temporary directory for {prefix}: {err}"),
    }
}

/// Waits until `condition` holds, looking every 5 ms.
///
/// # Panics
///
/// When it still does not hold after `within`, naming `what` never happened.
pub fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "{what}: did not happen within {within:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// [`eventually`] for async tests: waits on tokio's clock, so under paused
/// time the deadline passes only as fast as the test lets time pass.
///
/// # Panics
///
/// As [`eventually`].
///
/// # Cancel safety
///
/// Cancel-safe: dropping it stops the wait.
pub async fn eventually_async(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: did not happen within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually_async`] for a condition that is itself a future (one that
/// asks a server, say).
///
/// # Panics
///
/// As [`eventually`].
pub async fn eventually_with<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut condition: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: did not happen within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually_async`] for a condition that finds something: waits until
/// `find` returns `Some`, and returns what it found.
///
/// # Panics
///
/// As [`eventually`].
pub async fn eventually_some<T>(
    what: &str,
    within: Duration,
    mut find: impl FnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = find() {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: did not happen within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually_some`] for a search that is itself a future (a call to a
/// server, say).
///
/// # Panics
///
/// As [`eventually`].
pub async fn eventually_some_with<T, F: Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut find: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = find().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: did not happen within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Whether process `pid` has ended: it is gone, or a zombie (it has ended;
/// only its parent has yet to reap it). Reads `/proc`, so on a system without
/// it every process counts as gone: the tests that check processes run on
/// Linux.
#[must_use]
pub fn process_gone(pid: u32) -> bool {
    let stat = match std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
    {
        Ok(stat) => stat,
        Err(_) => return true,
    };
    // `pid (comm) state ...`: the name may hold spaces and parentheses.
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.trim_start())
        .is_some_and(|rest| rest.starts_with(['Z', 'X']))
}

/// Waits until every process of `pids` has ended.
///
/// # Panics
///
/// When one still runs after `within`, naming them.
pub fn assert_gone(pids: &[u32], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|&pid| !process_gone(pid))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running after {within:?}: {alive:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// [`assert_gone`] for async tests.
///
/// # Panics
///
/// As [`assert_gone`].
pub async fn assert_gone_async(pids: &[u32], within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|&pid| !process_gone(pid))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running after {within:?}: {alive:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_child_is_gone_and_this_process_is_not() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true runs");
        let pid = child.id();
        // A zombie until reaped: it has ended all the same.
        assert_gone(&[pid], Duration::from_secs(10));
        child.wait().expect("reaped");
        assert!(process_gone(pid));
        assert!(!process_gone(std::process::id()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_search_returns_what_it_found_and_fails_naming_what_never_came() {
        let mut looks = 0;
        let found = eventually_some("the third look", Duration::from_secs(10), || {
            looks += 1;
            (looks == 3).then_some(looks)
        })
        .await;
        assert_eq!(found, 3);
        let found = eventually_some_with("a found value", Duration::from_secs(10), || async {
            Some("here")
        })
        .await;
        assert_eq!(found, "here");
        let never = tokio::spawn(eventually_some(
            "a value that never comes",
            Duration::from_secs(1),
            || None::<u8>,
        ));
        let failure = never.await.expect_err("the wait fails").into_panic();
        let message = failure
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(
            message.contains("a value that never comes: did not happen within 1s"),
            "{message}"
        );
    }

    #[test]
    fn a_temporary_directory_goes_away_with_its_handle() {
        let dir = temp_dir("support");
        let path = dir.path().to_owned();
        assert!(path.is_dir());
        std::fs::write(path.join("f"), "x").expect("written");
        drop(dir);
        assert!(!path.exists());
    }
}
