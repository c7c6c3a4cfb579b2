//! Usage lines: what a subagent prints to report its usage reaches the task's
//! progress, never its output; a bad line gives the result a note.

use asynctask_manager::TaskProgress;
use asynctask_model::TaskUsage;
use asynctask_process::ProcessRunner;
use pretty_assertions::assert_eq;

use crate::{error, output, request, run, runner_in, temp_dir};

/// A script printing `lines` with `printf '%s\n'`, then exiting with `status`.
fn script(lines: &[&str], status: u8) -> String {
    let quoted: Vec<String> = lines
        .iter()
        .map(|line| format!("'{}'", line.replace('\'', r"'\''")))
        .collect();
    let script = format!("printf '%s\\n' {}; exit {status}", quoted.join(" "));
    serde_json::to_string(&["sh", "-c", &script]).expect("a string array")
}

fn output_file(runner: &ProcessRunner) -> String {
    let path = runner
        .output_dir()
        .expect("the output directory")
        .join("task-0001.out");
    std::fs::read_to_string(path).expect("the output file")
}

#[tokio::test]
async fn usage_lines_reach_the_progress_and_leave_the_output() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "coder",
        &script(
            &[
                "reading the code",
                r#"::asynctask::usage {"input_tokens":1200,"model":"claude-sonnet-4-5"}"#,
                "fixed it",
                r#"::asynctask::usage {"input_tokens":48210,"output_tokens":3115,"cost_usd":0.18427,"cache_read_input_tokens":9}"#,
            ],
            0,
        ),
    );
    let progress = TaskProgress::new();
    let result = run(
        &runner,
        request("coder", "fix it").with_progress(progress.clone()),
    )
    .await;
    assert_eq!(result, Ok(output(Some("reading the code\nfixed it"))));
    assert_eq!(
        progress.usage(),
        Some(
            TaskUsage::new()
                .with_input_tokens(48_210)
                .with_output_tokens(3_115)
                .with_cost_usd(0.184_27)
                .with_model("claude-sonnet-4-5")
        )
    );
    assert_eq!(
        progress.snapshot().last_lines,
        ["reading the code", "fixed it"]
    );
    assert_eq!(output_file(&runner), "reading the code\nfixed it\n");
}

#[tokio::test]
async fn a_bad_usage_line_is_a_note_on_the_result_success_or_failure() {
    let dir = temp_dir("process");
    let lines = [
        "done",
        r#"::asynctask::usage {"input_tokens":-5}"#,
        r#"::asynctask::usage {"output_tokens":12}"#,
    ];
    let progress = TaskProgress::new();
    let runner = runner_in(dir.path(), "coder", &script(&lines, 0));
    let result = run(
        &runner,
        request("coder", "x").with_progress(progress.clone()),
    )
    .await;
    assert_eq!(
        result,
        Ok(output(Some(
            "done\n\n[a usage line could not be read: not a usage object: invalid value: \
             integer `-5`, expected u64 at line 1 column 18]"
        )))
    );
    assert_eq!(
        progress.usage(),
        Some(TaskUsage::new().with_output_tokens(12)),
        "the good line counts"
    );

    let failing = runner_in(dir.path(), "coder", &script(&lines, 3));
    let path = failing
        .output_dir()
        .expect("the output directory")
        .join("task-0001.out");
    assert_eq!(
        run(&failing, request("coder", "x")).await,
        error(&format!(
            "subagent 'coder' exited with status 3\n\n[a usage line could not be read: not a \
             usage object: invalid value: integer `-5`, expected u64 at line 1 column 18]\n\n{}",
            asynctask_tools::whole_output_line(&path, 5)
        ))
    );
}
