//! The fuzz run: rounds of generated sessions (one bounded round by default,
//! fresh seeds for N minutes when asked), progress, and on a failure the
//! minimal session written out as a reproducer; or the replay of one.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use proptest::test_runner::{Config, RngAlgorithm, RngSeed, TestCaseError, TestError, TestRunner};

use super::drive::{self, Report};
use super::session::session;

/// Cases of the bounded run (`cargo test`, `cargo xtask ci`).
const CASES: u32 = 256;

/// Cases per round of a long run (progress is printed after each).
const ROUND_CASES: u32 = 64;

/// Where the bounded run's random generator starts: the same sessions on every run.
const SEED: u64 = 0x6173_796e_6374_6173;

/// The most steps a session's body has.
const BODY_STEPS: usize = 24;

/// How long one session may take on the real clock before the run is
/// stopped with its lines as the reproducer: a hang that paused time cannot
/// end (a busy loop, a blocked thread).
const REAL_TIME_LIMIT: Duration = Duration::from_secs(120);

/// What the environment asks of the run.
#[derive(Debug)]
struct Settings {
    /// `ASYNCTASK_FUZZ_CASES`: cases of the bounded run.
    cases: u32,
    /// `ASYNCTASK_FUZZ_SEED`: the bounded run's seed.
    seed: u64,
    /// `ASYNCTASK_FUZZ_MINUTES`: run rounds with fresh seeds this long.
    minutes: Option<f64>,
    /// `ASYNCTASK_FUZZ_REPLAY`: replay this file instead.
    replay: Option<PathBuf>,
    /// `ASYNCTASK_FUZZ_DIR`: where reproducers go (default `target/fuzz`).
    dir: PathBuf,
}

impl Settings {
    fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
        };
        let seed = var("ASYNCTASK_FUZZ_SEED").and_then(|seed| {
            let seed = seed.trim();
            match seed.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => seed.parse().ok(),
            }
        });
        Settings {
            cases: var("ASYNCTASK_FUZZ_CASES")
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(CASES),
            seed: seed.unwrap_or(SEED),
            minutes: var("ASYNCTASK_FUZZ_MINUTES").and_then(|n| n.trim().parse().ok()),
            replay: var("ASYNCTASK_FUZZ_REPLAY").map(PathBuf::from),
            dir: var("ASYNCTASK_FUZZ_DIR").map_or_else(default_dir, PathBuf::from),
        }
    }
}

/// `target/fuzz`, from where the test binary lies (`target/<profile>/deps`).
fn default_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("fuzz")))
        .unwrap_or_else(|| std::env::temp_dir().join("asynctask-fuzz"))
}

/// What a run did.
#[derive(Debug, Default, Clone)]
struct Totals {
    cases: u64,
    sessions: u64,
    lines: u64,
    bytes: u64,
    answers: u64,
    /// Calls that succeeded, by tool.
    succeeded: BTreeMap<String, u64>,
}

/// The test: a replay, the bounded run, or rounds for N minutes.
pub(super) fn main() {
    let settings = Settings::from_env();
    if let Some(file) = &settings.replay {
        return replay(file);
    }
    let started = Instant::now();
    let mut totals = Totals::default();
    let Some(minutes) = settings.minutes else {
        round(&settings, settings.seed, settings.cases, &mut totals);
        println!("fuzz: {}", summary(&totals, started));
        if settings.cases >= CASES {
            // Sessions whose every call is refused would prove little.
            for (tool, _) in drive::tools() {
                assert!(
                    totals.succeeded.get(tool).is_some_and(|n| *n > 0),
                    "no call of {tool} succeeded in {} cases: the generators miss it",
                    settings.cases
                );
            }
        }
        return;
    };
    let until = started + Duration::from_secs_f64(minutes.max(0.0) * 60.0);
    println!(
        "fuzz: fresh seeds for {minutes} minutes; reproducers go to {}",
        settings.dir.display()
    );
    let mut rounds = 0u64;
    while Instant::now() < until {
        let seed = RandomState::new().hash_one(rounds);
        round(&settings, seed, ROUND_CASES, &mut totals);
        rounds += 1;
        println!(
            "fuzz: round {rounds} (seed {seed:#018x}) passed; {}",
            summary(&totals, started)
        );
    }
    println!(
        "fuzz: done, no failure in {rounds} rounds: {}",
        summary(&totals, started)
    );
}

fn summary(totals: &Totals, started: Instant) -> String {
    let succeeded: Vec<String> = totals
        .succeeded
        .iter()
        .map(|(tool, n)| format!("{tool} {n}"))
        .collect();
    format!(
        "{} cases, {} sessions, {} lines ({:.1} MiB), {} answers in {:.0}s; calls that succeeded: {}",
        totals.cases,
        totals.sessions,
        totals.lines,
        totals.bytes as f64 / f64::from(1 << 20),
        totals.answers,
        started.elapsed().as_secs_f64(),
        succeeded.join(", ")
    )
}

/// One round of `cases` sessions from `seed`; on a failure, shrinks it,
/// writes the reproducer and fails the test with how to replay it.
fn round(settings: &Settings, seed: u64, cases: u32, totals: &mut Totals) {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 4_096,
        max_shrink_time: 300_000,
        ..Config::default()
    };
    let strategy = session(drive::tools(), BODY_STEPS);
    let counted = std::cell::RefCell::new(std::mem::take(totals));
    let outcome = TestRunner::new(config).run(&strategy, |session| {
        let lines = session.lines();
        let report = watched(settings, seed, &lines);
        let mut now = counted.borrow_mut();
        now.sessions += 1;
        now.lines += lines.len() as u64;
        now.bytes += lines.iter().map(|line| line.len() as u64 + 1).sum::<u64>();
        now.answers += report.answers as u64;
        for tool in report.succeeded {
            *now.succeeded.entry(tool).or_default() += 1;
        }
        drop(now);
        report.verdict.map_err(TestCaseError::fail)
    });
    *totals = counted.into_inner();
    totals.cases += u64::from(cases);
    match outcome {
        Ok(()) => {}
        Err(TestError::Abort(why)) => panic!("fuzz: the run stopped (seed {seed:#018x}): {why}"),
        Err(TestError::Fail(why, session)) => {
            let lines = session.lines();
            let file = settings.dir.join(format!("fuzz-{seed:016x}.jsonl"));
            let saved = save(&file, &lines);
            let report = drive::session(&lines);
            panic!(
                "fuzz: a session broke the protocol (seed {seed:#018x}): {why}\n\n{}\n\
                 the minimal session ({} lines) {saved}\n\nits transcript:\n{}",
                report
                    .verdict
                    .err()
                    .unwrap_or_else(|| "(it passed when run again: a race?)".to_owned()),
                lines.len(),
                drive::transcript(&lines, &report.transcript, 300),
            );
        }
    }
}

/// Where a reproducer went and how to replay it.
fn save(file: &Path, lines: &[Vec<u8>]) -> String {
    let mut bytes = Vec::new();
    for line in lines {
        bytes.extend_from_slice(line);
        bytes.push(b'\n');
    }
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(file, bytes));
    match written {
        Ok(()) => format!(
            "is in {file}; replay it with\n    cargo xtask fuzz --replay {file}\n\
             or send it to the real server: asynctask mcp --config FILE < {file}",
            file = file.display()
        ),
        Err(err) => format!("could not be written to {} ({err})", file.display()),
    }
}

/// Replays the lines of `file` (one message a line, as sent) as one session,
/// printing its transcript.
fn replay(file: &Path) {
    let bytes = std::fs::read(file)
        .unwrap_or_else(|err| panic!("fuzz: cannot read {}: {err}", file.display()));
    let lines = split_lines(&bytes);
    let report = drive::session(&lines);
    println!("{}", drive::transcript(&lines, &report.transcript, 2_000));
    match report.verdict {
        Ok(()) => println!(
            "fuzz: replayed {} lines of {}: every property held",
            lines.len(),
            file.display()
        ),
        Err(why) => panic!(
            "fuzz: replaying {} broke the protocol: {why}",
            file.display()
        ),
    }
}

/// The lines of a reproducer: split at line breaks, the last break ending
/// the last line.
pub(super) fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect()
}

/// The session running now, watched on the real clock by a thread of its own.
static CURRENT: Mutex<Option<Watched>> = Mutex::new(None);

/// A session under the watchdog.
struct Watched {
    since: Instant,
    seed: u64,
    lines: Arc<Vec<Vec<u8>>>,
    dir: PathBuf,
}

/// Runs one session under the watchdog: a session that takes longer than
/// [`REAL_TIME_LIMIT`] ends the process, its lines saved as a reproducer.
fn watched(settings: &Settings, seed: u64, lines: &[Vec<u8>]) -> Report {
    static WATCHDOG: Once = Once::new();
    WATCHDOG.call_once(|| {
        std::thread::spawn(|| {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let current = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(Watched {
                    since,
                    seed,
                    lines,
                    dir,
                }) = current.as_ref()
                else {
                    continue;
                };
                if since.elapsed() > REAL_TIME_LIMIT {
                    let file = dir.join(format!("fuzz-{seed:016x}-hang.jsonl"));
                    let saved = save(&file, lines);
                    eprintln!(
                        "fuzz: a session ran for more than {REAL_TIME_LIMIT:?} of real time \
                         (seed {seed:#018x}): the server hangs\nthe session ({} lines, not \
                         shrunk) {saved}",
                        lines.len()
                    );
                    std::process::exit(101);
                }
            }
        });
    });
    let entry = Watched {
        since: Instant::now(),
        seed,
        lines: Arc::new(lines.to_vec()),
        dir: settings.dir.clone(),
    };
    *CURRENT.lock().unwrap_or_else(PoisonError::into_inner) = Some(entry);
    let report = drive::session(lines);
    *CURRENT.lock().unwrap_or_else(PoisonError::into_inner) = None;
    report
}
