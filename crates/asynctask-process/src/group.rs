//! Process groups and signals: the group a subagent leads, how it is ended, and
//! how a child's exit is described.

use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

/// The child's process group (the child leads it: pgid = pid). Dropped while
/// armed — the run's future dropped mid-run — it sends `SIGKILL` to the group.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: Pid,
    armed: bool,
}

impl ProcessGroup {
    pub(crate) fn of(child: &Child) -> Option<Self> {
        let pid = i32::try_from(child.id()?).ok()?;
        Some(ProcessGroup {
            pgid: Pid::from_raw(pid),
            armed: true,
        })
    }

    pub(crate) fn pgid(&self) -> Pid {
        self.pgid
    }

    /// Signals every process in the group; an empty group is not an error.
    pub(crate) fn signal(&self, signal: Signal) {
        signal_group(self.pgid, signal);
    }

    /// `SIGKILL`s the group; nothing is left to do on drop.
    pub(crate) fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.armed = false;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// Signals every process in group `pgid`; an empty group is not an error.
pub(crate) fn signal_group(pgid: Pid, signal: Signal) {
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
}
