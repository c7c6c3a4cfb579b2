//! The crate's only unsafe code: what must run in a child between `fork` and
//! `exec`. Every `unsafe` block says why it is sound in a `// SAFETY:` comment
//! (tidy checks both that and that no other file of the workspace holds
//! unsafe code).
#![allow(
    unsafe_code,
    reason = "Command::pre_exec is unsafe; this module is the one place allowed to call it"
)]

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::Command;

/// Makes the child get `signal` when the thread that spawned it dies, and
/// refuse to start when `parent` is already gone by then (the host died
/// between `fork` and the request, so nothing would ever send the signal).
///
/// Linux sends the signal when the *thread* that forked the child ends, not
/// the process: spawn from a thread that lives as long as the host's work
/// (a tokio worker thread does; a `spawn_blocking` thread may end after a few
/// idle seconds).
#[cfg(target_os = "linux")]
pub(crate) fn set_parent_death_signal(command: &mut Command, signal: Signal, parent: Pid) {
    // SAFETY: the closure runs in the child after `fork`, where only
    // async-signal-safe work is allowed. It makes two system calls through
    // nix's thin wrappers (`prctl`, `getppid`), builds an `io::Error` from an
    // errno (no allocation), takes no lock, and reads nothing but the two
    // `Copy` values it owns.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal)?;
            if nix::unistd::getppid() != parent {
                return Err(Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

/// Other Unixes have no parent-death signal: nothing to set.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_parent_death_signal(_command: &mut Command, _signal: Signal, _parent: Pid) {}
