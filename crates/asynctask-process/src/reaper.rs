//! The reaper: a tiny supervisor process between the runner and a subagent's
//! command, so that no process of the subagent outlives its task — not even
//! when the host is killed with `SIGKILL`, nor when a descendant left the
//! process group with `setsid`.
//!
//! Run as `REAPER [--parent PID] [--grace-ms MS] -- PROGRAM [ARGS...]`, it:
//!
//! 1. blocks the signals it handles (they are taken with `sigwait`, so no
//!    handler and no unsafe code is needed; the command is started with
//!    `posix_spawn` and an empty mask, since `std::process::Command` would
//!    pass the blocked mask on);
//! 2. on Linux, marks itself a *child subreaper* (orphaned descendants,
//!    including ones that called `setsid` or double-forked, are reparented to
//!    it instead of init) and asks for `SIGUSR1` when its parent dies, then
//!    checks that its parent is still `PID` (the parent may have died before
//!    the request was made);
//! 3. starts `PROGRAM` in a process group of its own, its stdio inherited (so
//!    the runner's pipes reach it), and waits;
//! 4. when the command exits: `SIGKILL`s every remaining descendant, reaps
//!    them, and exits as the command did — with its status, or killed by the
//!    same signal (re-raised on itself);
//! 5. on `SIGTERM`, `SIGINT` or `SIGHUP` (a cancel): forwards `SIGTERM` to
//!    every descendant, gives them the grace (default 2 s), `SIGKILL`s what is
//!    left, reaps, and exits as the command did;
//! 6. on `SIGUSR1` ("kill everything now": a host that must exit at once, or
//!    its parent's death): `SIGKILL`s every descendant at once, reaps, and
//!    exits. A host that died gives no grace: whatever ignores `SIGTERM`
//!    would otherwise outlive it by the whole grace.
//!
//! As `REAPER [--parent PID] --warm` (started ahead of time), it does 1 and 2,
//! then reads its command (cwd, program, arguments, environment, grace) from
//! stdin, then 3 to 6; stdin ending before a command comes ends it at once.
//!
//! Descendants are found by walking the parent links of every process in
//! `/proc` from the reaper down, and, on every Unix, by signalling the
//! command's process group. On Unixes other than Linux there is no subreaper,
//! no parent-death signal and no `/proc` walk, so only the process group is
//! reliably ended (best effort): it is signalled even after the command
//! exited, and the grace lasts while any process is left in it.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::process::ExitCode;
use std::time::Duration;

use nix::errno::Errno;
use nix::spawn::{
    PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn, posix_spawnp,
};
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::warm::{Launch, WARM_ARG};

/// The exit status of a reaper that could not start its command (as a shell
/// reports a command it cannot run).
///
/// ```
/// assert_eq!(asynctask_process::reaper::CANNOT_START, 127);
/// ```
pub const CANNOT_START: u8 = 127;

/// The exit status of a reaper given arguments it does not understand.
///
/// ```
/// assert_eq!(asynctask_process::reaper::USAGE, 2);
/// ```
pub const USAGE: u8 = 2;

/// The grace without `--grace-ms`.
const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// Runs the reaper with `args` (without the program name):
/// `[--parent PID] [--grace-ms MS] -- PROGRAM [ARGS...]`, or
/// `[--parent PID] --warm` to read the command from stdin (as a runner's
/// warm reaper is told it; see the [module](self)), and returns the exit
/// code to end with; when the command was killed by a signal, the reaper
/// re-raises it on itself and does not return.
///
/// It must run in a process of its own, before any other thread starts (it
/// blocks its signals and takes them with `sigwait`). A host's own binary can
/// be the reaper: it dispatches to this function first thing in `main`, on a
/// hidden argument it gives [`ProcessRunner::with_reaper`](crate::ProcessRunner::with_reaper).
///
/// # Examples
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let mut args = std::env::args_os().skip(1).peekable();
///     if args.peek().is_some_and(|arg| arg == "__asynctask-reaper") {
///         return asynctask_process::reaper::main(args.skip(1));
///     }
///     // ... the host itself, whose runner is
///     // ProcessRunner::new(config).with_reaper(current_exe, vec!["__asynctask-reaper".into()])
///     std::process::ExitCode::SUCCESS
/// }
/// ```
///
/// # Errors
///
/// One line on stderr, starting `asynctask-reaper:`, and exit status [`USAGE`]
/// for arguments it does not understand (refused before anything starts), 1
/// when its parent was already gone or a system call failed, or
/// [`CANNOT_START`]:
///
/// ```
/// # use std::process::ExitCode;
/// use asynctask_process::reaper;
/// assert_eq!(reaper::main(["--bogus"].map(Into::into)), ExitCode::from(reaper::USAGE));
/// assert_eq!(reaper::main(["--grace-ms", "soon", "--", "true"].map(Into::into)), ExitCode::from(reaper::USAGE));
/// ```
#[expect(
    clippy::print_stderr,
    reason = "the reaper's own process: its stderr is where its usage and failures go"
)]
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = match Args::parse(args) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("asynctask-reaper: {why}");
            eprintln!(
                "usage: asynctask-reaper [--parent PID] [--grace-ms MS] -- PROGRAM [ARGS...]"
            );
            eprintln!("   or: asynctask-reaper [--parent PID] --warm  (the command on stdin)");
            return ExitCode::from(USAGE);
        }
    };
    match supervise(&args) {
        Ok(code) => code,
        Err(Failure { status, message }) => {
            eprintln!("asynctask-reaper: {message}");
            ExitCode::from(status)
        }
    }
}

/// The reaper's arguments.
#[derive(Debug)]
struct Args {
    parent: Option<Pid>,
    grace: Duration,
    /// `--warm`: the command comes on stdin (`program` is empty).
    warm: bool,
    program: OsString,
    args: Vec<OsString>,
}

impl Args {
    fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, String> {
        let mut args = args.into_iter();
        let mut parent = None;
        let mut grace = DEFAULT_GRACE;
        let mut warm = false;
        loop {
            let Some(arg) = args.next() else {
                if warm {
                    return Ok(Args {
                        parent,
                        grace,
                        warm,
                        program: OsString::new(),
                        args: Vec::new(),
                    });
                }
                return Err("no command: give `-- PROGRAM [ARGS...]`".to_owned());
            };
            match arg.to_str() {
                Some("--") if warm => {
                    return Err("`--warm` takes its command from stdin".to_owned());
                }
                Some("--") => break,
                Some(WARM_ARG) => warm = true,
                Some("--parent") => {
                    let pid: i32 = number(args.next(), "--parent")?;
                    parent = Some(Pid::from_raw(pid));
                }
                Some("--grace-ms") => {
                    grace = Duration::from_millis(number(args.next(), "--grace-ms")?);
                }
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        let program = args
            .next()
            .ok_or("no program after `--`: give `-- PROGRAM [ARGS...]`")?;
        Ok(Args {
            parent,
            grace,
            warm,
            program,
            args: args.collect(),
        })
    }
}

fn number<T: std::str::FromStr>(value: Option<OsString>, flag: &str) -> Result<T, String> {
    value
        .as_deref()
        .and_then(|value| value.to_str())
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| format!("{flag} takes a number"))
}

/// Why the reaper gave up, and the status to exit with.
#[derive(Debug)]
struct Failure {
    status: u8,
    message: String,
}

impl Failure {
    fn sys(what: &str, err: Errno) -> Self {
        Failure {
            status: 1,
            message: format!("{what}: {err}"),
        }
    }
}

/// The signals the reaper takes with `sigwait`.
fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGALRM,
    ] {
        set.add(signal);
    }
    set
}

fn supervise(args: &Args) -> Result<ExitCode, Failure> {
    let signals = handled();
    // Before anything can send them: from here on they wait for `sigwait`.
    signals
        .thread_block()
        .map_err(|err| Failure::sys("cannot block signals", err))?;
    become_subreaper(args.parent)?;

    let launch = if args.warm {
        match read_launch()? {
            Some(launch) => launch,
            // The runner let this warm reaper go unused.
            None => return Ok(ExitCode::SUCCESS),
        }
    } else {
        Launch {
            grace: args.grace,
            cwd: None,
            program: args.program.clone(),
            args: args.args.clone(),
            env: std::env::vars_os().collect(),
        }
    };
    let mut tree = Tree {
        child: spawn(&launch, args.warm, &signals)?,
        status: None,
    };
    release_stdin();

    loop {
        let signal = signals
            .wait()
            .map_err(|err| Failure::sys("cannot wait for a signal", err))?;
        match signal {
            Signal::SIGCHLD => {
                tree.reap_exited();
                if tree.status.is_some() {
                    tree.kill_all();
                    break;
                }
            }
            Signal::SIGUSR1 => {
                tree.kill_all();
                break;
            }
            Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP => {
                tree.terminate(launch.grace, &signals)?;
                break;
            }
            // A stray alarm (none is set yet): nothing to do.
            _ => {}
        }
    }
    Ok(exit_as(tree.status))
}

/// A warm reaper's command, read from stdin without reading past it (the
/// rest is the command's), through a copy of the descriptor that is closed
/// after.
fn read_launch() -> Result<Option<Launch>, Failure> {
    use std::os::fd::AsFd as _;
    let usage = |message: String| Failure {
        status: USAGE,
        message,
    };
    let stdin = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|err| usage(format!("cannot read the command: {err}")))?;
    Launch::read(&mut std::fs::File::from(stdin)).map_err(usage)
}

/// Starts the command in a process group of its own, with an empty signal
/// mask and the default action for the signals we take and for `SIGPIPE`
/// (which the Rust runtime ignores). `std::process::Command` would pass on
/// our blocked mask, so the command could not be stopped by `SIGTERM`.
///
/// A warm reaper first moves to the command's working directory (a cold one
/// was started in it), and looks the program up in the command's `PATH` when
/// it is not its own (`posix_spawnp` looks in the caller's).
fn spawn(launch: &Launch, warm: bool, handled: &SigSet) -> Result<Pid, Failure> {
    let program = launch.program.as_os_str();
    let cannot_start = |why: String| Failure {
        status: CANNOT_START,
        message: format!("cannot start '{}': {why}", program.to_string_lossy()),
    };
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| cannot_start("an argument holds a NUL byte".to_owned()))
    };
    if let Some(cwd) = &launch.cwd {
        nix::unistd::chdir(cwd.as_path()).map_err(|err| {
            cannot_start(format!(
                "cannot enter {}: {}",
                cwd.display(),
                std::io::Error::from(err)
            ))
        })?;
    }
    let path = c_string(program.as_bytes())?;
    let mut argv = vec![path.clone()];
    for arg in &launch.args {
        argv.push(c_string(arg.as_bytes())?);
    }
    let command_path = launch
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_os_str());
    let own_lookup = warm && command_path != std::env::var_os("PATH").as_deref();
    let envp: Vec<CString> = launch
        .env
        .iter()
        .cloned()
        .filter_map(|(name, value)| {
            let mut entry = name.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            CString::new(entry).ok()
        })
        .collect();
    let setup = |err: Errno| Failure::sys("cannot prepare to start the command", err);
    let mut attr = PosixSpawnAttr::init().map_err(setup)?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )
    .map_err(setup)?;
    attr.set_pgroup(Pid::from_raw(0)).map_err(setup)?;
    attr.set_sigmask(&SigSet::empty()).map_err(setup)?;
    let mut defaults = *handled;
    defaults.add(Signal::SIGPIPE);
    attr.set_sigdefault(&defaults).map_err(setup)?;
    let actions = PosixSpawnFileActions::init().map_err(setup)?;
    let spawned = if own_lookup {
        look_up(program, command_path)
            .and_then(|found| posix_spawn(found.as_os_str(), &actions, &attr, &argv, &envp))
    } else {
        posix_spawnp(&path, &actions, &attr, &argv, &envp)
    };
    spawned.map_err(|err| cannot_start(std::io::Error::from(err).to_string()))
}

/// Where `program` is, as `execvp` finds it in `path` (the C library's default
/// when there is none): a name with a `/` is itself; else the first directory
/// of `path` holding an executable file by that name. Not found: `EACCES`
/// when one was there but not executable, else `ENOENT`.
fn look_up(program: &OsStr, path: Option<&OsStr>) -> Result<OsString, Errno> {
    use nix::unistd::{AccessFlags, access};
    if program.as_bytes().contains(&b'/') {
        return Ok(program.to_os_string());
    }
    let mut denied = false;
    let path = path.unwrap_or(OsStr::new("/bin:/usr/bin"));
    for dir in path.as_bytes().split(|&byte| byte == b':') {
        let dir = if dir.is_empty() { b".".as_slice() } else { dir };
        let candidate = std::path::Path::new(OsStr::from_bytes(dir)).join(program);
        if !candidate.is_file() {
            continue;
        }
        match access(&candidate, AccessFlags::X_OK) {
            Ok(()) => return Ok(candidate.into_os_string()),
            Err(_) => denied = true,
        }
    }
    Err(if denied { Errno::EACCES } else { Errno::ENOENT })
}

/// Lets go of the reaper's own copy of stdin, now that the command has its own:
/// the runner's pipe must close when the *command* stops reading, so that a
/// runner forwarding messages sees it (a write fails) instead of filling a pipe
/// nobody reads. Best effort: without `/dev/null` the copy stays.
fn release_stdin() {
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
    }
}

/// Linux: adopt orphaned descendants, and get `SIGUSR1` ("kill everything
/// now") when the parent dies; then make sure the parent did not die before
/// that was asked.
#[cfg(target_os = "linux")]
fn become_subreaper(parent: Option<Pid>) -> Result<(), Failure> {
    use nix::sys::prctl;
    prctl::set_child_subreaper(true)
        .map_err(|err| Failure::sys("cannot become a child subreaper", err))?;
    prctl::set_pdeathsig(Signal::SIGUSR1)
        .map_err(|err| Failure::sys("cannot ask for a parent-death signal", err))?;
    if let Some(parent) = parent
        && nix::unistd::getppid() != parent
    {
        return Err(Failure {
            status: 1,
            message: format!("its parent (pid {parent}) is already gone"),
        });
    }
    Ok(())
}

/// Other Unixes have neither: the process group is all there is.
#[cfg(not(target_os = "linux"))]
fn become_subreaper(_parent: Option<Pid>) -> Result<(), Failure> {
    Ok(())
}

/// The command (which leads its own process group) and how it ended.
struct Tree {
    child: Pid,
    status: Option<WaitStatus>,
}

impl Tree {
    /// Reaps every child that has exited, keeping the command's status.
    fn reap_exited(&mut self) {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(status) => self.record(status),
                Err(Errno::EINTR) => {}
                Err(_) => return,
            }
        }
    }

    fn record(&mut self, status: WaitStatus) {
        if status.pid() == Some(self.child)
            && matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
        {
            self.status = Some(status);
        }
    }

    /// Sends `signal` to every descendant and to the command's group, and
    /// says how many descendants were found.
    fn signal_all(&self, signal: Signal) -> usize {
        // The group first. Once the command is reaped its pid may in
        // principle be reused, but not as a process group id while any
        // process of its group is alive (POSIX keeps a group's id reserved
        // while the group has members): signalling an empty group fails with
        // `ESRCH`, and one still populated is still ours. On Linux the walk
        // below finds every member anyway (they are all our descendants), so
        // the group is signalled only while the command lives; elsewhere the
        // group is all there is, so it is signalled always.
        if self.status.is_none() || !cfg!(target_os = "linux") {
            let _ = killpg(self.child, signal);
        }
        let descendants = descendants();
        for &pid in &descendants {
            let _ = kill(pid, signal);
        }
        descendants.len()
    }

    /// Whether anything of the command is left: a descendant (Linux), or a
    /// process in its group (elsewhere, where no descendant can be found).
    fn anything_left(&self) -> bool {
        if cfg!(target_os = "linux") {
            !descendants().is_empty()
        } else {
            killpg(self.child, None).is_ok()
        }
    }

    /// `SIGKILL`s every descendant until none is left, reaping them.
    fn kill_all(&mut self) {
        loop {
            if self.signal_all(Signal::SIGKILL) == 0 {
                self.reap_exited();
                return;
            }
            // Something is left: wait for one of our children to go. A killed
            // process's children are reparented to us, so every round brings
            // the tree closer to empty.
            match waitpid(None, None) {
                Ok(status) => self.record(status),
                Err(Errno::EINTR) => {}
                // No child of ours left, though the walk saw descendants: they
                // were zombies being reaped by their own parents.
                Err(_) => return,
            }
        }
    }

    /// `SIGTERM` to every descendant, up to `grace` for them to exit, then
    /// [`kill_all`](Self::kill_all). `SIGUSR1` during the grace cuts it short.
    fn terminate(&mut self, grace: Duration, signals: &SigSet) -> Result<(), Failure> {
        self.signal_all(Signal::SIGTERM);
        // The alarm that ends the grace comes as a signal, so one `sigwait`
        // takes whichever happens first: a child's exit, the alarm, or
        // "kill everything now".
        let reaper = Pid::this();
        std::thread::spawn(move || {
            std::thread::sleep(grace);
            let _ = kill(reaper, Signal::SIGALRM);
        });
        loop {
            self.reap_exited();
            if !self.anything_left() {
                break;
            }
            match signals
                .wait()
                .map_err(|err| Failure::sys("cannot wait for a signal", err))?
            {
                Signal::SIGALRM | Signal::SIGUSR1 => break,
                // A child exited (checked above), or a repeated request to end.
                _ => {}
            }
        }
        self.kill_all();
        Ok(())
    }
}

/// Ends the reaper as the command ended: with its exit status, or killed by
/// the same signal.
fn exit_as(status: Option<WaitStatus>) -> ExitCode {
    match status {
        Some(WaitStatus::Exited(_, code)) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Some(WaitStatus::Signaled(_, signal, _)) => {
            // Blocked signals stay pending: raise it, then let it through.
            let _ = nix::sys::signal::raise(signal);
            let mut only = SigSet::empty();
            only.add(signal);
            let _ = only.thread_unblock();
            // Still here: a signal whose default is to be ignored.
            ExitCode::from(128_u8.saturating_add(u8::try_from(signal as i32).unwrap_or(0)))
        }
        _ => ExitCode::FAILURE,
    }
}

/// Every process below this one, found from the parent links in `/proc`
/// (zombies included: they are still in the tree until reaped).
#[cfg(target_os = "linux")]
fn descendants() -> Vec<Pid> {
    use std::collections::BTreeMap;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // A process that is gone by now has no stat: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(ppid) = parent_of(&stat) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![std::process::id().cast_signed()];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            found.push(Pid::from_raw(child));
            queue.push(child);
        }
    }
    found
}

/// Without `/proc`, the process group is all that can be found.
#[cfg(not(target_os = "linux"))]
fn descendants() -> Vec<Pid> {
    Vec::new()
}

/// The parent pid in a `/proc/<pid>/stat` line: `pid (comm) state ppid ...`,
/// where `comm` may hold spaces and parentheses (so the last `)` ends it).
#[cfg(any(target_os = "linux", test))]
fn parent_of(stat: &str) -> Option<i32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        Args::parse(list.iter().map(OsString::from))
    }

    #[test]
    fn arguments_are_parsed() {
        let parsed =
            args(&["--parent", "42", "--grace-ms", "500", "--", "sh", "-c", "x"]).expect("valid");
        assert_eq!(parsed.parent, Some(Pid::from_raw(42)));
        assert_eq!(parsed.grace, Duration::from_millis(500));
        assert_eq!(parsed.program, "sh");
        assert_eq!(parsed.args, ["-c", "x"]);
        let plain = args(&["--", "true"]).expect("valid");
        assert_eq!((plain.parent, plain.grace), (None, DEFAULT_GRACE));
    }

    #[test]
    fn bad_arguments_are_named() {
        assert_eq!(
            args(&["true"]).map(|_| ()),
            Err("unknown argument \"true\"".to_owned())
        );
        assert_eq!(
            args(&["--parent", "x", "--", "true"]).map(|_| ()),
            Err("--parent takes a number".to_owned())
        );
        assert_eq!(
            args(&["--"]).map(|_| ()),
            Err("no program after `--`: give `-- PROGRAM [ARGS...]`".to_owned())
        );
        assert_eq!(
            args(&[]).map(|_| ()),
            Err("no command: give `-- PROGRAM [ARGS...]`".to_owned())
        );
    }

    #[test]
    fn the_parent_is_read_from_a_stat_line() {
        assert_eq!(parent_of("12 (sleep) S 7 12 12 0"), Some(7));
        assert_eq!(parent_of("12 (a) b) c) R 9 1"), Some(9));
        assert_eq!(parent_of("garbage"), None);
    }
}
