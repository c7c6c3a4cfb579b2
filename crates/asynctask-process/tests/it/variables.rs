//! The variables file: emitted variables, bad files, and the inline budget's
//! bound on them.

use std::collections::BTreeMap;
use std::time::Duration;

use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::SubagentRunner;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{error, output, request, run, runner_in, temp_dir, within};

#[tokio::test]
async fn variables_written_to_the_vars_file_are_emitted() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "answer",
        r#"["sh", "-c", "printf '{\"answer\":\"42\",\"file\":\"src/a.rs\"}' > \"$ASYNCTASK_VARS_FILE\"; echo done"]"#,
    );
    let expected = OutputObject::new(TerminateReason::Goal)
        .with_var("answer", "42")
        .with_var("file", "src/a.rs")
        .with_final_message("done");
    assert_eq!(run(&runner, request("answer", "x")).await, Ok(expected));

    // A later run of the same id that writes nothing emits nothing: the old
    // file is not taken for its own.
    let quiet = runner_in(dir.path(), "answer", r#"["echo", "done"]"#)
        .with_output_dir(runner.output_dir().expect("the output directory"));
    assert_eq!(
        run(&quiet, request("answer", "x")).await,
        Ok(output(Some("done")))
    );
}

#[tokio::test]
async fn a_bad_vars_file_fails_the_task_with_one_clear_line() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let file = out.path().join("task-0001.vars.json");
    let cases = [
        (
            r#"printf 'not json' > "$ASYNCTASK_VARS_FILE""#,
            "not JSON: expected ident at line 1 column 2",
        ),
        (
            r#"printf '["a"]' > "$ASYNCTASK_VARS_FILE""#,
            "not a JSON object",
        ),
        (
            r#"printf '{"a":"1","count":3}' > "$ASYNCTASK_VARS_FILE""#,
            r#"the value of "count" is not a string"#,
        ),
        (
            r#"head -c 1048577 /dev/zero | tr '\0' ' ' > "$ASYNCTASK_VARS_FILE""#,
            "it is larger than 1048576 bytes",
        ),
    ];
    for (script, what) in cases {
        let command = serde_json::json!(["sh", "-c", script]).to_string();
        let runner = runner_in(dir.path(), "vars", &command).with_output_dir(out.path().to_owned());
        assert_eq!(
            run(&runner, request("vars", "x")).await,
            error(&format!(
                "subagent 'vars' wrote a bad variables file {}: {what}",
                file.display()
            )),
            "{script}"
        );
    }
}

#[tokio::test]
async fn a_bad_vars_file_names_the_file_that_holds_stdout() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "vars",
        r#"["sh", "-c", "echo 'found 3 callers'; printf '[1]' > \"$ASYNCTASK_VARS_FILE\""]"#,
    )
    .with_output_dir(out.path().to_owned());
    let (stdout, vars) = (
        out.path().join("task-0001.out"),
        out.path().join("task-0001.vars.json"),
    );
    assert_eq!(
        run(&runner, request("vars", "x")).await,
        error(&format!(
            "subagent 'vars' wrote a bad variables file {}: not a JSON object\n\n[whole output: {} (16 bytes)]",
            vars.display(),
            stdout.display()
        ))
    );
    assert_eq!(
        std::fs::read_to_string(&stdout).expect("kept"),
        "found 3 callers\n"
    );
    // The failure names the file: it is there to read (forget removes it).
    assert_eq!(std::fs::read_to_string(&vars).expect("kept"), "[1]");
    runner.forget("task-0001");
    assert!(!vars.exists() && !stdout.exists());
}

#[tokio::test]
async fn a_vars_file_that_is_no_regular_file_fails_at_once() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let file = out.path().join("task-0001.vars.json");
    let cases = [
        // A FIFO nobody writes to: a plain open would wait forever.
        (
            r#"mkfifo "$ASYNCTASK_VARS_FILE""#,
            "it is not a regular file",
        ),
        // A symbolic link, to a FIFO or to anything else.
        (
            r#"mkfifo fifo; ln -s "$PWD/fifo" "$ASYNCTASK_VARS_FILE""#,
            "it is a symbolic link, not a regular file",
        ),
        (
            r#"ln -s /dev/stdin "$ASYNCTASK_VARS_FILE""#,
            "it is a symbolic link, not a regular file",
        ),
        (
            r#"mkdir "$ASYNCTASK_VARS_FILE""#,
            "it is not a regular file",
        ),
    ];
    for (script, what) in cases {
        let _ = std::fs::remove_file(dir.path().join("fifo"));
        let _ = std::fs::remove_dir(&file);
        let command = serde_json::json!(["sh", "-c", script]).to_string();
        let runner = runner_in(dir.path(), "vars", &command).with_output_dir(out.path().to_owned());
        let result = within(
            Duration::from_secs(5),
            runner.run(request("vars", "x"), CancellationToken::new()),
        )
        .await;
        assert_eq!(
            result,
            error(&format!(
                "subagent 'vars' wrote a bad variables file {}: {what}",
                file.display()
            )),
            "{script}"
        );
    }
}

#[tokio::test]
async fn variables_are_bounded_by_the_inline_budget() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let file = out.path().join("task-0001.vars.json");
    // 9,000 variables: far more than the budget holds.
    let script = r#"{ printf '{'; i=0; while [ $i -lt 9000 ]; do printf '"v%04d":"value %d",' $i $i; i=$((i+1)); done; printf '"z":"end"}'; } > "$ASYNCTASK_VARS_FILE"; echo done"#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "many", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(2_000);
    let output = run(&runner, request("many", "x")).await.expect("succeeds");
    let cost: usize = output
        .emitted_vars
        .iter()
        .map(|(name, value)| {
            serde_json::to_string(name).expect("a string").len()
                + serde_json::to_string(value).expect("a string").len()
                - 4
        })
        .sum();
    assert!(cost <= 2_000, "{cost}");
    let kept = output.emitted_vars.len();
    assert!(kept > 50, "{kept}");
    assert_eq!(
        output.emitted_vars.get("v0000").map(String::as_str),
        Some("value 0")
    );
    assert_eq!(
        output.final_message.as_deref(),
        Some(
            format!(
                "done\n\n[{} of 9001 emitted variables were dropped to fit the inline budget; all of them are in {}]",
                9001 - kept,
                file.display()
            )
            .as_str()
        )
    );
    // The file the note names holds them all.
    let all: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("kept")).expect("JSON");
    assert_eq!(all.len(), 9001);

    // One long value among short ones: it is cut, the others are whole.
    let script = r#"printf '{"a":"1","b":"%s","c":"3"}' "$(head -c 5000 /dev/zero | tr '\0' x)" > "$ASYNCTASK_VARS_FILE""#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "long", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(1_000);
    let output = run(&runner, request("long", "x")).await.expect("succeeds");
    assert_eq!(output.emitted_vars["a"], "1");
    assert_eq!(output.emitted_vars["c"], "3");
    let b = &output.emitted_vars["b"];
    assert!(
        b.starts_with("xxx") && b.ends_with(" more characters cut]"),
        "{b}"
    );
    assert!(b.chars().count() <= 1_000 - 4, "{}", b.len());
    assert_eq!(
        output.final_message.as_deref(),
        Some(
            format!(
                "[of the emitted variables, 1 value was cut to fit the inline budget; all of them are in {}]",
                file.display()
            )
            .as_str()
        )
    );
    assert!(file.exists(), "kept: the result does not hold it all");
}

#[tokio::test]
async fn the_vars_file_is_removed_once_read_whole() {
    let dir = temp_dir("process");
    let out = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "answer",
        r#"["sh", "-c", "printf '{\"answer\":\"42\"}' > \"$ASYNCTASK_VARS_FILE\""]"#,
    )
    .with_output_dir(out.path().to_owned());
    let output = run(&runner, request("answer", "x"))
        .await
        .expect("succeeds");
    assert_eq!(output.emitted_vars.len(), 1);
    assert!(!out.path().join("task-0001.vars.json").exists());
    assert!(out.path().join("task-0001.out").exists());
}
