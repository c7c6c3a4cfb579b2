//! The roles a re-executed test binary plays: `hold` (keep a store open until
//! told to stop, or killed) and `script` (run a seeded random sequence of
//! operations on a journaled manager, printing each one that returned, until
//! done or killed — or until it kills itself at a chosen journal write).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "this program reports to whoever runs it"
)]

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use asynctask_manager::{
    AsyncTaskManager, Journal, JournalEntry, JournalError, RegisterError, RegisterTaskInput,
};
use asynctask_model::{MaxAsyncTasks, SystemClock};
use asynctask_store::Store;

use crate::{LINE, error_of, output_of};

/// The store's path.
pub(crate) const STORE_ENV: &str = "ASYNCTASK_STORE_TEST_PATH";
/// `script`: the number its operations are drawn from (also the prefix of its
/// task ids).
pub(crate) const SEED_ENV: &str = "ASYNCTASK_STORE_TEST_SEED";
/// `script`: how many operations to try.
pub(crate) const STEPS_ENV: &str = "ASYNCTASK_STORE_TEST_STEPS";
/// `script`: `N:before` or `N:after` — SIGKILL itself at the Nth journal
/// write, before making it or after it committed.
pub(crate) const DIE_ENV: &str = "ASYNCTASK_STORE_TEST_DIE";
/// `hold`: also start a long-lived grandchild (`sleep`), as a host's subagent.
pub(crate) const GRANDCHILD_ENV: &str = "ASYNCTASK_STORE_TEST_GRANDCHILD";
/// The limit the scripted manager runs under (history 6).
pub(crate) const MAX: i64 = 3;

fn say(line: &str) {
    // stdout is line-buffered: each line reaches the parent as it is printed.
    println!("{LINE}{line}");
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for a child"))
}

pub(crate) fn run(role: &str) {
    match role {
        "hold" => hold(),
        "script" => script(),
        other => panic!("unknown child role {other}"),
    }
}

fn hold() {
    let (_store, _) = Store::open(PathBuf::from(var(STORE_ENV))).expect("the store opens");
    if std::env::var_os(GRANDCHILD_ENV).is_some() {
        #[expect(
            clippy::zombie_processes,
            reason = "the subagent outlives this process, which is killed"
        )]
        let sleeper = std::process::Command::new("sleep")
            .arg("120")
            .spawn()
            .expect("sleep starts");
        say(&format!("grandchild {}", sleeper.id()));
    }
    say(&format!("locked {}", std::process::id()));
    // Until the parent closes our stdin (or kills us).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// A journal that SIGKILLs its own process at its Nth write.
struct DieAt {
    store: Store,
    at: u64,
    after: bool,
    writes: AtomicU64,
}

impl Journal for DieAt {
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        let write = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        if write == self.at && !self.after {
            die();
        }
        let written = self.store.record(entries);
        if write == self.at {
            die();
        }
        written
    }
}

fn die() {
    #[cfg(unix)]
    {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    std::process::abort();
}

/// splitmix64: a small, well-mixed deterministic sequence.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut x = *state;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn pick<'a, T>(items: &'a [T], rng: &mut u64) -> Option<&'a T> {
    let len = u64::try_from(items.len()).ok()?;
    let index = usize::try_from(next(rng) % len.max(1)).ok()?;
    items.get(index)
}

fn script() {
    let seed: u64 = var(SEED_ENV).parse().expect("a numeric seed");
    let steps: u64 = var(STEPS_ENV).parse().expect("a numeric step count");
    let (store, stored) = Store::open(PathBuf::from(var(STORE_ENV))).expect("the store opens");
    let journal: Arc<dyn Journal> = match std::env::var(DIE_ENV) {
        Ok(spec) => {
            let (at, when) = spec.split_once(':').expect("N:before or N:after");
            Arc::new(DieAt {
                store,
                at: at.parse().expect("a numeric write"),
                after: when == "after",
                writes: AtomicU64::new(0),
            })
        }
        Err(_) => Arc::new(store),
    };
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(MAX).expect("a valid limit"),
        Arc::new(SystemClock),
        journal,
        stored,
    )
    .expect("the store holds a registry");
    say("open");
    let mut rng = seed;
    for step in 0..steps {
        let running: Vec<String> = manager
            .running_tasks()
            .into_iter()
            .map(|t| t.id().to_owned())
            .collect();
        let pending: Vec<String> = manager
            .pending_notifications()
            .into_iter()
            .map(|t| t.id().to_owned())
            .collect();
        match next(&mut rng) % 10 {
            0..=3 => {
                let id = format!("{seed}-{step}");
                match manager.register_task(RegisterTaskInput::new(&*id, "tester", "run")) {
                    Ok(_) => say(&format!("registered {id}")),
                    Err(RegisterError::LimitReached(_)) => {}
                    Err(other) => panic!("registration failed: {other}"),
                }
            }
            4..=6 if !running.is_empty() => {
                let Some(id) = pick(&running, &mut rng) else {
                    continue;
                };
                let (done, status) = match next(&mut rng) % 3 {
                    0 => (manager.complete_task(id, output_of(id)), "completed"),
                    1 => (manager.fail_task(id, error_of(id)), "failed"),
                    _ => (manager.cancel_task(id), "cancelled"),
                };
                if done {
                    say(&format!("finished {id} {status}"));
                }
            }
            _ => {
                let Some(id) = pick(&pending, &mut rng) else {
                    continue;
                };
                // Delivered to the model, then marked: a crash in between
                // delivers it again (at least once), never loses it.
                say(&format!("delivering {id}"));
                if manager.mark_notified(id) {
                    say(&format!("notified {id}"));
                }
            }
        }
    }
    say("done");
}
