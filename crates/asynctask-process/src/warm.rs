//! The warm reaper: a [reaper](crate::reaper) started ahead of time, so that
//! starting a subagent does not wait for the reaper's own start (a host's whole
//! binary, loaded and initialized: milliseconds).
//!
//! A runner with a reaper keeps one warm reaper: started with
//! `--parent <host pid> --warm` and fresh pipes for all three streams, it
//! blocks its signals, becomes a subreaper, asks for its parent-death signal,
//! and then waits for its command on stdin. A run takes it, writes its
//! [`Launch`] (program, arguments, working directory, the whole environment,
//! the grace) on its stdin, and uses it from then on as a reaper it had just
//! started: the run's stdin, stdout and stderr are that reaper's pipes, and it
//! is the runner's child, as a reaper started cold is. The run then starts the
//! next warm reaper. A runner dropped with an unused warm reaper closes that
//! reaper's stdin: seeing the end of it with no command, it exits, and so does
//! one whose host died (the pipe closes with it).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, Command};

/// The reaper's argument that makes it wait for its command on stdin.
pub(crate) const WARM_ARG: &str = "--warm";

/// The longest launch a warm reaper accepts, in bytes (the environment's
/// values are bounded well below it).
const MAX_LAUNCH: usize = 16 << 20;

/// What a warm reaper is told to run, as it reads it from stdin: a 4-byte
/// big-endian length, then NUL-terminated fields (the grace in milliseconds,
/// the working directory or nothing, the program, the number of arguments,
/// the arguments, then `NAME=VALUE` for each environment variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) grace: Duration,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
}

impl Launch {
    /// The bytes to write on a warm reaper's stdin; `None` when a field holds
    /// a NUL byte, or an environment name a `=`, and cannot be sent (a reaper
    /// started cold then reports it).
    pub(crate) fn encode(&self) -> Option<Vec<u8>> {
        let mut fields: Vec<Vec<u8>> = vec![
            self.grace.as_millis().to_string().into_bytes(),
            self.cwd
                .as_ref()
                .map(|cwd| cwd.as_os_str().as_bytes().to_vec())
                .unwrap_or_default(),
            self.program.as_bytes().to_vec(),
            self.args.len().to_string().into_bytes(),
        ];
        fields.extend(self.args.iter().map(|arg| arg.as_bytes().to_vec()));
        for (name, value) in &self.env {
            if name.as_bytes().contains(&b'=') {
                return None;
            }
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            fields.push(entry);
        }
        let mut body = Vec::new();
        for field in fields {
            if field.contains(&0) {
                return None;
            }
            body.extend(field);
            body.push(0);
        }
        let len = u32::try_from(body.len())
            .ok()
            .filter(|&len| len as usize <= MAX_LAUNCH)?;
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend(body);
        Some(bytes)
    }

    /// Reads a launch from `input` without reading past it (what follows is
    /// the command's stdin); `Ok(None)` when `input` ends before it starts.
    pub(crate) fn read(input: &mut impl Read) -> Result<Option<Self>, String> {
        let mut header = [0_u8; 4];
        let mut got = 0;
        while got < header.len() {
            match input.read(&mut header[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err("the command's description was cut short".to_owned()),
                Ok(n) => got += n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(format!("cannot read the command: {err}")),
            }
        }
        let len = u32::from_be_bytes(header) as usize;
        if len > MAX_LAUNCH {
            return Err(format!("a command description of {len} bytes is too long"));
        }
        let mut body = vec![0_u8; len];
        input
            .read_exact(&mut body)
            .map_err(|err| format!("cannot read the command: {err}"))?;
        Self::decode(&body).map(Some)
    }

    fn decode(body: &[u8]) -> Result<Self, String> {
        let bad = |what: &str| format!("a bad command description: {what}");
        let Some(body) = body.strip_suffix(&[0]) else {
            return Err(bad("not NUL-terminated"));
        };
        let mut fields = body.split(|&byte| byte == 0);
        let mut next = |what: &str| fields.next().ok_or_else(|| bad(what));
        let number = |field: &[u8], what: &str| {
            std::str::from_utf8(field)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(|| bad(what))
        };
        let grace = Duration::from_millis(number(next("no grace")?, "the grace")?);
        let cwd = next("no working directory")?;
        let cwd = (!cwd.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(cwd)));
        let program = OsStr::from_bytes(next("no program")?).to_os_string();
        let count = number(next("no argument count")?, "the argument count")?;
        let mut args = Vec::new();
        for _ in 0..count {
            args.push(OsStr::from_bytes(next("an argument is missing")?).to_os_string());
        }
        let mut env = Vec::new();
        for entry in fields {
            let at = entry
                .iter()
                .position(|&byte| byte == b'=')
                .ok_or_else(|| bad("an environment entry without `=`"))?;
            env.push((
                OsString::from_vec(entry[..at].to_vec()),
                OsString::from_vec(entry[at + 1..].to_vec()),
            ));
        }
        Ok(Launch {
            grace,
            cwd,
            program,
            args,
            env,
        })
    }
}

/// A runner's warm reaper, when it has one (shared by its clones), and the
/// thread that started it.
///
/// Linux sends a child its parent-death signal when the *thread* that started
/// it ends: a warm reaper whose thread ended (a runtime that was shut down)
/// has had its signal, and would kill its command at once. Such a one is
/// never handed a command (it is dropped, and ends when its stdin closes).
#[derive(Debug, Default)]
pub(crate) struct WarmSlot(Mutex<Option<(Child, Starter)>>);

/// The thread that started a warm reaper.
#[derive(Debug)]
struct Starter {
    #[cfg(target_os = "linux")]
    thread: nix::unistd::Pid,
}

impl Starter {
    fn this_thread() -> Self {
        Starter {
            #[cfg(target_os = "linux")]
            thread: nix::unistd::gettid(),
        }
    }

    /// Whether the thread still runs (elsewhere there is no parent-death
    /// signal: always).
    fn alive(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            Path::new("/proc/self/task")
                .join(self.thread.to_string())
                .exists()
        }
        #[cfg(not(target_os = "linux"))]
        true
    }
}

impl WarmSlot {
    /// Starts a warm reaper `program` (with `leading_args`) unless there is
    /// one. Best effort: a reaper that cannot start is logged, and the next run
    /// starts its own. It needs a tokio runtime; outside one it does nothing.
    pub(crate) fn fill(&self, program: &Path, leading_args: &[OsString]) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return;
        }
        let mut command = Command::new(program);
        command
            .args(leading_args)
            .arg("--parent")
            .arg(std::process::id().to_string())
            .arg(WARM_ARG)
            // The command gets its whole environment with its launch; `PATH`
            // lets the reaper look programs up as a cold one does when the
            // command's `PATH` is the host's.
            .env_clear()
            .envs(std::env::var_os("PATH").map(|path| ("PATH", path)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // Dropped unused, it ends by itself when its stdin closes; it
            // is never sent `SIGKILL` (see `ProcessGroup`).
            .kill_on_drop(false);
        match command.spawn() {
            Ok(child) => *slot = Some((child, Starter::this_thread())),
            Err(err) => {
                tracing::warn!(program = %program.display(), %err, "cannot start a warm reaper; the next subagent starts its own");
            }
        }
    }

    /// Hands `launch` to the warm reaper and returns it, now running the
    /// command; `None` when there is no live warm reaper or the hand-over
    /// failed (the run then starts a reaper cold).
    pub(crate) async fn launch(&self, launch: &Launch) -> Option<Child> {
        let bytes = launch.encode()?;
        let (mut child, starter) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        if !starter.alive() || !matches!(child.try_wait(), Ok(None)) {
            return None;
        }
        let stdin = child.stdin.as_mut()?;
        match stdin.write_all(&bytes).await {
            Ok(()) => Some(child),
            Err(err) => {
                tracing::debug!(%err, "the warm reaper did not take its command; starting one cold");
                None
            }
        }
    }

    /// The warm reaper's pid, when there is one.
    #[cfg(test)]
    fn pid(&self) -> Option<u32> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|(child, _)| child.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            grace: Duration::from_millis(1500),
            cwd: Some(PathBuf::from("/tmp/a dir")),
            program: "sh".into(),
            args: vec!["-c".into(), "echo a=b; cat".into(), String::new().into()],
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("EMPTY".into(), OsString::new()),
                ("EQ".into(), "x=y".into()),
            ],
        }
    }

    #[test]
    fn a_launch_reads_back_as_written_and_no_further() {
        let mut bytes = launch().encode().expect("encodable");
        bytes.extend(b"the goal on stdin");
        let mut input = std::io::Cursor::new(bytes);
        assert_eq!(Launch::read(&mut input), Ok(Some(launch())));
        let mut rest = String::new();
        input.read_to_string(&mut rest).expect("the rest");
        assert_eq!(rest, "the goal on stdin");

        let plain = Launch {
            cwd: None,
            args: Vec::new(),
            env: Vec::new(),
            ..launch()
        };
        let bytes = plain.encode().expect("encodable");
        assert_eq!(Launch::read(&mut bytes.as_slice()), Ok(Some(plain)));
    }

    #[test]
    fn an_empty_input_is_no_launch_and_a_cut_or_bad_one_is_an_error() {
        assert_eq!(Launch::read(&mut [].as_slice()), Ok(None));
        let bytes = launch().encode().expect("encodable");
        for cut in [2, 4, bytes.len() - 1] {
            assert!(Launch::read(&mut &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = 3_u32.to_be_bytes().to_vec();
        bad.extend(b"x\0\0");
        assert_eq!(
            Launch::read(&mut bad.as_slice()),
            Err("a bad command description: the grace".to_owned())
        );
    }

    #[test]
    fn what_cannot_be_sent_is_refused() {
        let nul = Launch {
            args: vec!["a\0b".into()],
            ..launch()
        };
        assert_eq!(nul.encode(), None);
        let eq = Launch {
            env: vec![("A=B".into(), "c".into())],
            ..launch()
        };
        assert_eq!(eq.encode(), None);
    }

    #[test]
    fn outside_a_runtime_no_warm_reaper_starts() {
        let slot = WarmSlot::default();
        slot.fill(Path::new("/bin/true"), &[]);
        assert_eq!(slot.pid(), None);
    }
}
