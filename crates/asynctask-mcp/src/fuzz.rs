//! Fuzzing the server's wire and tools: generated sessions of JSON-RPC lines,
//! sent to the real server in process, and the properties every session keeps.
//! Each case is one session over an in-memory pipe to our transport, under
//! paused tokio time (a 50 s wait costs nothing): lines before `initialize`,
//! the `initialize`, up to 24 steps, then a `ping`. A step is a wire line from
//! [`lines`] (any bytes, bent envelopes, ids of every JSON type, lone
//! surrogates, bytes that are not UTF-8, numbers out of range, nesting
//! hundreds deep, huge values, batches), a `tools/call` of a served tool from
//! [`calls`] (arguments drawn from the tool's schema, a third of them fitting
//! it, the rest bent), a background launch, a call naming one of the
//! session's tasks, a cancel, or a stall (the client reads nothing for a few
//! seconds). One session in thirty also holds a flood: hundreds of requests
//! in a row, past the transport's windows of unwritten answers and requests
//! in progress. Subagents finish within seconds. The properties, checked by
//! [`drive`] against [`oracle`]:
//!
//! - every request — a line with a readable id, or one that cannot be read —
//!   gets exactly one answer with that id (no id when unreadable) within 70 s
//!   of its line; notifications and responses get none;
//! - every line the server writes is a JSON-RPC message;
//! - a well-formed call of a served tool gets a tool result (`isError` when
//!   the tool refused), never a JSON-RPC error; a well-formed `ping`, `{}`;
//! - the `ping` at the end is answered: the session went on;
//! - nothing panics, even in a task whose panic tokio would swallow;
//! - at the end of its input the server ends, and the runtime shuts down.
//!
//! And every served tool must succeed somewhere in the run.
//!
//! `cargo test` runs 256 cases from a fixed seed (`ASYNCTASK_FUZZ_CASES`,
//! `ASYNCTASK_FUZZ_SEED` change them); `cargo xtask fuzz --minutes N`
//! (`ASYNCTASK_FUZZ_MINUTES`) runs rounds with fresh seeds. A failure is
//! shrunk to a minimal session, written under `target/fuzz/` as the lines to
//! send, one a line; `cargo xtask fuzz --replay FILE`
//! (`ASYNCTASK_FUZZ_REPLAY`) replays it with its transcript. In such a file
//! `@task:N` stands for the N-th latest task the session launched (its first
//! 8 characters): that line is sent once the lines before it are answered, as
//! a client learns an id from an answer; a `ping` with the id
//! `fuzz-stall-<n>-<seconds>s` is a stall. Sessions that once failed, in
//! `fuzz/regressions/`, are replayed by every `cargo test`.

mod calls;
mod drive;
mod lines;
mod oracle;
mod run;
mod session;

use std::path::Path;

/// The property run: bounded, or as the environment asks (see the module).
#[test]
fn sessions_keep_the_protocol() {
    run::main();
}

/// Every session that once broke a property still keeps them all.
#[test]
fn past_failures_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fuzz/regressions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the regressions directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no sessions in {}", dir.display());
    for file in files {
        let lines = run::split_lines(&std::fs::read(&file).expect("readable"));
        keeps_the_protocol(&file.display().to_string(), &lines);
    }
}

/// Found by the fuzzer: lines refused while long answers were being written
/// lost their refusals (rmcp dropped `receive` as it waited for the writer),
/// or worse. Built here rather than kept as a file: the answers must be long.
#[test]
fn refusals_while_long_answers_are_written_are_answered() {
    let mut lines = vec![
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}"#.to_vec(),
    ];
    for n in 0..3 {
        // Refused by the tool with the whole value quoted: a long answer.
        lines.push(
            format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"task","arguments":{{"subagent_name":"worker","goal_prompt":"g","tool_whitelist":"{}"}}}}}}"#,
                1_000 + n,
                "x".repeat(70_000)
            )
            .into_bytes(),
        );
        lines.push(b"not json".to_vec());
        lines.push(
            format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":[[[1]]"#)
                .into_bytes(),
        );
        lines.push(b"[1]".to_vec());
    }
    lines.push(br#"{"jsonrpc":"2.0","id":"fuzz-final-ping","method":"ping"}"#.to_vec());
    for _ in 0..8 {
        keeps_the_protocol("refusals amid long answers", &lines);
    }
}

fn keeps_the_protocol(name: &str, lines: &[Vec<u8>]) {
    let report = drive::session(lines);
    if let Err(why) = report.verdict {
        panic!(
            "{name}: {why}\n{}",
            drive::transcript(lines, &report.transcript, 300)
        );
    }
}
