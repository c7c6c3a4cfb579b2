//! Bounded output: stdout streams into a file and the final message keeps its
//! head and tail within the inline budget; live output; the output directory.

use std::path::Path;

use asynctask_manager::{ProgressSnapshot, TaskProgress};
use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_test_support::eventually_async;
use asynctask_tools::{SubagentRequest, SubagentRunner, whole_output_line};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{
    RUN_DEADLINE, assert_all_gone, error, output, request, run, runner_in, temp_dir, wait_for_pids,
    within,
};

/// The peak resident memory of this process, in KiB (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The marker line for `omitted` characters of an output of `bytes` bytes kept
/// in `file`.
fn marker(omitted: usize, bytes: usize, file: &Path) -> String {
    format!(
        "[... {omitted} characters omitted; the whole output ({bytes} bytes) is in {} ...]",
        file.display()
    )
}

#[tokio::test]
async fn huge_stdout_goes_to_a_file_and_the_message_keeps_its_head_and_tail() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    // 500,000 lines of 100 bytes. (Lines, not bytes, are what the live
    // progress pays for: one allocation each.)
    let line = format!("{}\n", "y".repeat(99));
    let command = serde_json::json!([
        "sh",
        "-c",
        format!("yes '{}' | head -c 50000000", line.trim_end())
    ]);
    let runner = runner_in(dir.path(), "chatty", &command.to_string())
        .with_output_dir(out.path().to_owned());
    assert_eq!(runner.inline_budget(), ProcessRunner::DEFAULT_INLINE_BUDGET);
    let before = peak_rss_kib();
    let result = run(&runner, request("chatty", "x")).await;
    let file = out.path().join("task-0001.out");
    // Each line costs 101 of the budget once JSON-escaped (`\n` is two
    // characters there): each half holds 49 lines and 51 characters more.
    let head = format!("{}{}", line.repeat(49), "y".repeat(51));
    let tail = format!("{}\n{}", "y".repeat(49), line.repeat(49));
    let expected = format!(
        "{head}\n{}\n{}\n\n{}",
        marker(50_000_000 - 9_901, 50_000_000, &file),
        tail.trim_end(),
        whole_output_line(&file, 50_000_000)
    );
    assert_eq!(result, Ok(output(Some(&expected))));
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        // 50 MB went through; far less than that was ever held.
        assert!(
            after.saturating_sub(before) < 16 * 1024,
            "peak memory grew by {} KiB",
            after - before
        );
    }
    let mut whole = std::fs::File::open(&file).expect("the output file");
    assert_eq!(whole.metadata().expect("metadata").len(), 50_000_000);
    let mut start = vec![0_u8; line.len()];
    std::io::Read::read_exact(&mut whole, &mut start).expect("read");
    assert_eq!(start, line.as_bytes());
}

#[tokio::test]
async fn an_output_past_max_output_bytes_keeps_its_head_and_tail_and_says_where_it_was_cut() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    // A million bytes without a line break, then the line a result needs.
    let script = "head -c 1000000 /dev/zero | tr '\\0' y; echo; echo 'the last line'; exit $1";
    let toml = format!(
        "[subagents.chatty]\ncommand = {}\ncwd = \".\"\nmax_output_bytes = 65536\n",
        serde_json::json!(["sh", "-c", script, "sh", "0"])
    );
    let runner = crate::runner(&toml, dir.path()).with_output_dir(out.path().to_owned());
    let result = run(&runner, request("chatty", "x")).await;
    let file = out.path().join("task-0001.out");
    let bytes: u64 = 1_000_000 + 1 + 14;
    // The cap of 64 KiB keeps 48 KiB of head and 16 KiB of tail.
    let (head, tail) = (49_152_u64, 16_384_u64);
    let cut = bytes - head - tail;
    let marker =
        format!("[asynctask: {cut} bytes cut here: the output passed max_output_bytes (64 KiB)]");
    let whole = std::fs::read_to_string(&file).expect("the output file");
    assert_eq!(
        whole,
        format!(
            "{}\n{marker}\n{}\nthe last line\n",
            "y".repeat(49_152),
            "y".repeat(16_384 - 15)
        )
    );
    assert!(whole.len() as u64 <= 65_536 + marker.len() as u64 + 2);
    // The message keeps the output's head and tail (the budget's halves),
    // and says the file was cut, and where.
    let pointer = format!(
        "[whole output: {} ({bytes} bytes, cut to the first {head} and the last {tail}: the \
         output passed max_output_bytes (64 KiB))]",
        file.display()
    );
    let expected = format!(
        "{}\n[... 990017 characters omitted; the output ({bytes} bytes) is in {}, cut to its first \
         {head} and last {tail} bytes ...]\n{}\nthe last line\n\n{pointer}",
        "y".repeat(5_000),
        file.display(),
        "y".repeat(4_983),
    );
    assert_eq!(result, Ok(output(Some(&expected))));

    // A failure names the cut file the same way.
    let failing = SubagentRequest::new("task-0001", "chatty", "x");
    let runner = crate::runner(&toml.replace("\"0\"]", "\"3\"]"), dir.path())
        .with_output_dir(out.path().to_owned());
    assert_eq!(
        run(&runner, failing).await,
        error(&format!(
            "subagent 'chatty' exited with status 3\n\n{pointer}"
        ))
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("the output file"),
        whole
    );
}

#[tokio::test]
async fn the_inline_budget_is_configurable_and_counts_characters() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let file = out.path().join("task-0001.out");
    let runner = runner_in(
        dir.path(),
        "letters",
        r#"["printf", "abcdefghijklmnopqrstuvwxyz"]"#,
    )
    .with_output_dir(out.path().to_owned())
    .with_inline_budget(10);
    assert_eq!(
        run(&runner, request("letters", "x")).await,
        Ok(output(Some(&format!(
            "abcde\n{}\nvwxyz\n\n{}",
            marker(16, 26, &file),
            whole_output_line(&file, 26)
        ))))
    );

    // "é" is two bytes but one character.
    let runner = runner_in(dir.path(), "accents", r#"["printf", "aaaééééébbb"]"#)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(8);
    assert_eq!(
        run(&runner, request("accents", "x")).await,
        Ok(output(Some(&format!(
            "aaaé\n{}\nébbb\n\n{}",
            marker(3, 16, &file),
            whole_output_line(&file, 16)
        ))))
    );
    // Output that fits is the text alone: no marker, no path.
    let runner = runner_in(dir.path(), "accents", r#"["printf", "aaééébb"]"#)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(8);
    assert_eq!(
        run(&runner, request("accents", "x")).await,
        Ok(output(Some("aaééébb")))
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("the output file"),
        "aaééébb"
    );
}

#[test]
fn the_inline_budget_comes_from_the_config() {
    let config = ProcessRunnerConfig::from_toml_str(
        "inline_budget = 2500\n[subagents.a]\ncommand = [\"true\"]\n",
        Path::new("/"),
    )
    .expect("valid");
    assert_eq!(config.inline_budget, Some(2_500));
    assert_eq!(ProcessRunner::new(config).inline_budget(), 2_500);
    assert_eq!(
        ProcessRunner::new(ProcessRunnerConfig::new()).inline_budget(),
        ProcessRunner::DEFAULT_INLINE_BUDGET
    );
}

#[tokio::test]
async fn the_inline_budget_counts_what_the_text_costs_in_json() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    // Quotes, backslashes and ANSI escapes: each costs 2 or 6 in a JSON string.
    let script = r#"i=0; while [ $i -lt 2000 ]; do printf '"q" \\ \033[31mred\033[0m %s\n' $i; i=$((i+1)); done"#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "loud", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(1_000);
    let message = run(&runner, request("loud", "x"))
        .await
        .expect("succeeds")
        .final_message
        .expect("a message");
    let (body, pointer) = message.rsplit_once("\n\n").expect("a pointer line");
    let file = out.path().join("task-0001.out");
    let bytes = std::fs::metadata(&file).expect("the output file").len();
    assert_eq!(pointer, whole_output_line(&file, bytes));
    let marker_at = body.find("\n[... ").expect("a marker");
    let marker_end = body[marker_at + 1..].find('\n').expect("the marker's end") + marker_at + 1;
    let kept = format!("{}{}", &body[..marker_at], &body[marker_end + 1..]);
    let escaped = serde_json::to_string(&kept).expect("a string").len() - 2;
    assert!(
        (900..=1_000).contains(&escaped),
        "the kept text is {escaped} characters once escaped"
    );
}

#[tokio::test]
async fn a_cancelled_subagent_names_its_stdout() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "slow",
        r#"["sh", "-c", "echo started; echo $$ > pids; exec sleep 30"]"#,
    )
    .with_output_dir(out.path().to_owned());
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { runner.run(request("slow", "x"), cancel).await }
    });
    let pids = wait_for_pids(&dir.path().join("pids"), 1).await;
    let file = out.path().join("task-0001.out");
    eventually_async("8 bytes in the output file", RUN_DEADLINE, || {
        std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) >= 8
    })
    .await;
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(
        result,
        error(&format!(
            "subagent 'slow' was cancelled\n\n[whole output: {} (8 bytes)]",
            file.display()
        ))
    );
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn a_running_subagent_reports_its_latest_output_and_its_file() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "steps",
        r#"["sh", "-c", "echo one; printf 'two\nthr'; while [ ! -e go ]; do sleep 0.01; done; echo ee"]"#,
    )
    .with_output_dir(out.path().to_owned());
    let progress = TaskProgress::new();
    let run = tokio::spawn({
        let request = request("steps", "x").with_progress(progress.clone());
        async move { runner.run(request, CancellationToken::new()).await }
    });
    eventually_async(
        "the lines one, two, thr in the progress",
        RUN_DEADLINE,
        || progress.snapshot().last_lines == ["one", "two", "thr"],
    )
    .await;
    let file = out.path().join("task-0001.out");
    assert_eq!(
        progress.snapshot(),
        ProgressSnapshot {
            last_lines: vec!["one".into(), "two".into(), "thr".into()],
            output_bytes: 11,
            output_file: Some(file.clone()),
            usage: None,
        }
    );
    std::fs::write(dir.path().join("go"), "").expect("write");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, Ok(output(Some("one\ntwo\nthree"))));
    assert_eq!(progress.snapshot().last_lines, ["one", "two", "three"]);
}

#[tokio::test]
async fn the_default_output_directory_lives_as_long_as_the_runner() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "hello", r#"["echo", "hello"]"#);
    assert_eq!(
        run(&runner, request("hello", "x")).await,
        Ok(output(Some("hello")))
    );
    let out = runner.output_dir().expect("made on the first run");
    assert_eq!(out.parent(), Some(std::env::temp_dir().as_path()));
    let name = out
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        name.starts_with(&format!("asynctask-{}-", std::process::id())),
        "{name}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("task-0001.out")).expect("the output file"),
        "hello\n"
    );
    let clone = runner.clone();
    drop(runner);
    assert!(out.is_dir(), "a clone still holds it");
    drop(clone);
    assert!(!out.exists(), "removed with the last clone");
}

#[tokio::test]
async fn a_task_id_never_names_a_file_outside_the_output_directory() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let runner = runner_in(dir.path(), "hello", r#"["echo", "hello"]"#)
        .with_output_dir(out.path().join("runs"));
    let request = SubagentRequest::new("../../escaped", "hello", "x");
    assert_eq!(run(&runner, request).await, Ok(output(Some("hello"))));
    let files: Vec<String> = std::fs::read_dir(out.path().join("runs"))
        .expect("the output directory was made")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].starts_with("______escaped-") && files[0].ends_with(".out"),
        "{files:?}"
    );
    assert_eq!(
        std::fs::read_dir(out.path()).expect("read").count(),
        1,
        "nothing beside the output directory"
    );
}

#[tokio::test]
async fn a_chatty_stderr_does_not_deadlock() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "chatty",
        r#"["sh", "-c", "yes | head -c 5000000 >&2; echo finished"]"#,
    );
    assert_eq!(
        run(&runner, request("chatty", "x")).await,
        Ok(output(Some("finished")))
    );
}
