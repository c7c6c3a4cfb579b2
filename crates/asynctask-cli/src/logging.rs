//! The command's log: what the libraries say through `tracing`, on stderr
//! (MCP clients keep a server's stderr in their logs), or in a file once a
//! supervisor has one.

use std::io::Write;
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The log file, once [`log_to_file`] set one: everything goes there instead
/// of stderr.
static LOG_FILE: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// The level a count of `-v` and `-q` asks for: `info` by default, each `-v`
/// one step more (`debug`, `trace`), each `-q` one step less (`warn`,
/// `error`, `off`).
///
/// ```
/// use asynctask_cli::logging::level;
/// assert_eq!(level(0, 0), "info");
/// assert_eq!(level(2, 0), "trace");
/// assert_eq!(level(0, 1), "warn");
/// assert_eq!(level(0, 9), "off");
/// ```
#[must_use]
pub fn level(verbose: u8, quiet: u8) -> &'static str {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let at = (3 + i32::from(verbose) - i32::from(quiet)).clamp(0, 5);
    LEVELS[usize::try_from(at).unwrap_or(3)]
}

/// The filter without `RUST_LOG`: [`level`] for asynctask, and warnings and
/// errors only from the MCP SDK (rmcp), whose `info` is a line per message,
/// unless `-vv` asks for everything.
fn default_filter(verbose: u8, quiet: u8) -> String {
    let level = level(verbose, quiet);
    if verbose >= 2 || matches!(level, "error" | "off") {
        level.to_owned()
    } else {
        format!("{level},rmcp=warn")
    }
}

/// Installs the log: `RUST_LOG` when it is set (its syntax, e.g.
/// `asynctask_supervisor=debug`), else [`level`]`(verbose, quiet)` (the MCP
/// SDK's own `info` and `debug` only with `-vv`); one line
/// per event, with its time (UTC) and level, to stderr (colours only on a
/// terminal) or the file given to [`log_to_file`]. Called once, first thing.
pub fn install(verbose: u8, quiet: u8) {
    use std::io::IsTerminal as _;
    let mut unreadable = None;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|value| !value.trim().is_empty())
        .and_then(|value| {
            EnvFilter::try_new(&value)
                .map_err(|err| unreadable = Some(format!("{value:?}: {err}")))
                .ok()
        })
        .unwrap_or_else(|| EnvFilter::new(default_filter(verbose, quiet)));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbose > 0)
        .try_init();
    if let Some(why) = unreadable {
        tracing::warn!("RUST_LOG is not a log filter ({why}); logging as -v/-q say");
    }
}

/// Sends the log to `file` from now on (a supervisor's `supervisor.log`:
/// nobody reads its stderr once it serves). Colours are not written there
/// only if the log was installed without them: a supervisor started in the
/// background has no terminal.
///
/// # Errors
///
/// The file was set already.
pub fn log_to_file(file: std::fs::File) -> Result<(), std::fs::File> {
    LOG_FILE
        .set(Mutex::new(file))
        .map_err(|mutex| mutex.into_inner().unwrap_or_else(PoisonError::into_inner))
}

/// Writes one line of the log where it goes now.
#[derive(Debug, Clone, Copy)]
struct LogWriter;

/// The writer of one event.
enum Target {
    File(&'static Mutex<std::fs::File>),
    Stderr(std::io::Stderr),
}

impl Write for Target {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Target::File(file) => file
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .write(buf),
            Target::Stderr(stderr) => stderr.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // One event is one write: lines of two threads never interleave.
        match self {
            Target::File(file) => file
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .write_all(buf),
            Target::Stderr(stderr) => stderr.lock().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Target::File(file) => file.lock().unwrap_or_else(PoisonError::into_inner).flush(),
            Target::Stderr(stderr) => stderr.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Target;

    fn make_writer(&'a self) -> Target {
        match LOG_FILE.get() {
            Some(file) => Target::File(file),
            None => Target::Stderr(std::io::stderr()),
        }
    }
}
