//! Process groups and signals: the group a subagent leads, how it is ended
//! (directly, or through the reaper), the set of every live subagent of a
//! runner, and how a child's exit is described.

use std::collections::BTreeMap;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

/// The live subagents of a runner and all its clones, so that
/// [`terminate_all`](Self::terminate_all) can end them at once.
#[derive(Debug, Default)]
pub(crate) struct LiveSubagents {
    live: Mutex<BTreeMap<u64, Leader>>,
    next: AtomicU64,
}

impl LiveSubagents {
    /// Ends every live subagent at once (see [`Leader::kill_now`]) and says
    /// how many there were. It only sends signals: it never waits.
    pub(crate) fn terminate_all(&self) -> usize {
        // Copied out so that no signal is sent under the lock.
        let live: Vec<Leader> = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .copied()
            .collect();
        for leader in &live {
            leader.kill_now();
        }
        live.len()
    }

    fn insert(&self, leader: Leader) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, leader);
        key
    }

    fn remove(&self, key: u64) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }
}

/// The process a run started: it leads its own process group (pgid = pid),
/// and is either the subagent's command itself or the reaper running it.
///
/// # Signals after the leader is reaped
///
/// A run reaps its leader (`Child::wait`) before it takes it off the live
/// list, so a signal can reach a leader's id after it was reaped: from the
/// run itself (the group kill that ends what the command left behind) or
/// from [`LiveSubagents::terminate_all`] in the moment between. Every signal is
/// therefore sent to the *group* (`killpg`), never to the pid alone — the
/// reaper, too, leads a group of its own, whose only member it is (its
/// command gets another):
///
/// - while any process of the group lives, its id stays reserved (POSIX does
///   not reuse a process id while a process group of that id exists; Linux
///   keeps the number while a member refers to it), so the signal reaches
///   exactly what is left of the subagent;
/// - once the group is empty, the id may be reused, but `killpg` reaches a
///   new process only if it also leads a process group of that very id: the
///   id must have wrapped around and been taken by a new group leader in the
///   microseconds between the reap and the signal. That race is accepted;
///   closing it would take a pidfd per subagent.
#[derive(Debug, Clone, Copy)]
struct Leader {
    pid: Pid,
    via_reaper: bool,
}

impl Leader {
    /// Asks the subagent to end: `SIGTERM` to the reaper, which forwards it
    /// to every descendant and ends them after its grace; or, without one,
    /// to the whole group.
    fn terminate(self) {
        // Through the reaper, its group holds the reaper alone.
        signal_group(self.pid, Signal::SIGTERM);
    }

    /// Ends the subagent now: the reaper's "kill everything now" (`SIGUSR1`:
    /// it `SIGKILL`s every descendant, reaps them and exits), or, without
    /// one, `SIGKILL` to the group. A reaper is never sent `SIGKILL`: it
    /// would leave the descendants it adopted to init.
    fn kill_now(self) {
        // Through the reaper, its group holds the reaper alone.
        let signal = if self.via_reaper {
            Signal::SIGUSR1
        } else {
            Signal::SIGKILL
        };
        signal_group(self.pid, signal);
    }
}

/// A run's live subagent, registered with its runner while the run lasts.
/// Dropped while armed — the run's future dropped mid-run — it ends the
/// subagent at once ([`Leader::kill_now`]).
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    leader: Leader,
    armed: bool,
    live: Arc<LiveSubagents>,
    key: u64,
}

impl ProcessGroup {
    /// Registers `child` (the leader of its own group) as live.
    pub(crate) fn register(
        child: &Child,
        via_reaper: bool,
        live: Arc<LiveSubagents>,
    ) -> Option<Self> {
        let pid = Pid::from_raw(i32::try_from(child.id()?).ok()?);
        let leader = Leader { pid, via_reaper };
        let key = live.insert(leader);
        Some(ProcessGroup {
            leader,
            armed: true,
            live,
            key,
        })
    }

    pub(crate) fn pgid(&self) -> Pid {
        self.leader.pid
    }

    pub(crate) fn via_reaper(&self) -> bool {
        self.leader.via_reaper
    }

    /// See [`Leader::terminate`].
    pub(crate) fn terminate(&self) {
        self.leader.terminate();
    }

    /// See [`Leader::kill_now`].
    pub(crate) fn kill_now(&self) {
        self.leader.kill_now();
    }

    /// `SIGKILL`s the group (after its leader has exited and was reaped:
    /// whatever it left behind; see [`Leader`] on why a group id is safe to
    /// signal then), and takes it off the live list; nothing is left to do on
    /// drop.
    pub(crate) fn kill(&mut self) {
        signal_group(self.leader.pid, Signal::SIGKILL);
        self.disarm();
    }

    fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            self.live.remove(self.key);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.leader.kill_now();
            self.disarm();
        }
    }
}

/// Signals every process in group `pgid`; an empty group is not an error.
fn signal_group(pgid: Pid, signal: Signal) {
    match killpg(pgid, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(err) => {
            tracing::warn!(%pgid, %signal, %err, "cannot signal subagent process group");
        }
    }
}

/// How a child that did not succeed ended, after `subagent 'x' `.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(number) = status.signal() {
        match Signal::try_from(number) {
            Ok(signal) => format!("was killed by signal {number} ({})", signal.as_str()),
            Err(_) => format!("was killed by signal {number}"),
        }
    } else {
        format!("ended with {status}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exits_are_described_by_code_or_signal() {
        assert_eq!(
            describe_exit(ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(
            describe_exit(ExitStatus::from_raw(9)),
            "was killed by signal 9 (SIGKILL)"
        );
    }

    #[test]
    fn an_empty_registry_terminates_nothing() {
        assert_eq!(LiveSubagents::default().terminate_all(), 0);
    }
}
