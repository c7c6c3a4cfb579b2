//! Running a subagent: stdout becomes the final message, the goal arrives on
//! stdin and in the environment, which is an allowlist; working directories.

use std::collections::BTreeMap;

use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_tools::{ContextVar, OutputVarSpec};
use pretty_assertions::assert_eq;

use crate::{error, output, request, run, runner, runner_in, temp_dir};

#[tokio::test]
async fn stdout_becomes_the_final_message_and_the_goal_arrives_on_stdin_and_in_env() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "echo",
        r#"["sh", "-c", "printf 'stdin=%s\n' \"$(cat)\"; printf 'env=%s\n\n' \"$ASYNCTASK_GOAL\""]"#,
    );
    let result = run(&runner, request("echo", "find the bug")).await;
    assert_eq!(
        result,
        Ok(output(Some("stdin=find the bug\nenv=find the bug")))
    );
}

#[tokio::test]
async fn empty_stdout_is_no_final_message() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "quiet", r#"["sh", "-c", "echo; echo '  '"]"#);
    assert_eq!(run(&runner, request("quiet", "x")).await, Ok(output(None)));
}

#[tokio::test]
async fn the_goal_is_passed_literally_and_never_run_by_a_shell() {
    let dir = temp_dir("process");
    let goal = "$(touch pwned-1); echo hi `touch pwned-2` && touch pwned-3 \"'\n";
    let runner = runner_in(
        dir.path(),
        "literal",
        r#"["sh", "-c", "cat; printf '|%s' \"$ASYNCTASK_GOAL\""]"#,
    );
    let result = run(&runner, request("literal", goal)).await;
    assert_eq!(
        result,
        Ok(output(Some(format!("{goal}|{goal}").trim_end())))
    );
    let created: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert_eq!(created, Vec::<std::ffi::OsString>::new(), "nothing was run");
}

#[tokio::test]
async fn the_environment_is_an_allowlist() {
    // Two variables of the test process that are not always passed: one is
    // inherited by name, the other must not be visible.
    let always = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER"];
    let mut others = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .map(|(name, _)| name)
        .filter(|name| !always.contains(&name.as_str()) && !name.starts_with("ASYNCTASK_"));
    let inherited = others.next().expect("the test process has some variable");
    let hidden = others.next().expect("the test process has two variables");

    let dir = temp_dir("process");
    let toml = format!(
        "[subagents.env]\ncommand = [\"env\", \"-0\"]\n\
         env = {{ GREETING = \"hello world\", HOME = \"/nowhere\" }}\n\
         inherit_env = [\"{inherited}\", \"ASYNCTASK_NOT_SET_ANYWHERE\"]\n"
    );
    let runner = runner(&toml, dir.path());
    let mut request = request("env", "list the environment");
    request.context = vec![
        ContextVar {
            name: "file".to_owned(),
            value: "src/main.rs".to_owned(),
        },
        ContextVar {
            name: "line".to_owned(),
            value: "42".to_owned(),
        },
    ];
    request.behaviour_prompts = vec!["be brief".to_owned(), "be kind".to_owned()];
    request.output_spec = vec![OutputVarSpec {
        name: "answer".to_owned(),
        description: "the \"answer\"".to_owned(),
    }];
    request.tool_whitelist = Some(vec!["read".to_owned(), "grep".to_owned()]);
    let result = run(&runner, request).await.expect("env runs");
    let vars_file = runner
        .output_dir()
        .expect("the output directory")
        .join("task-0001.vars.json");
    let message = result.final_message.expect("env printed");
    // Nothing filled the output spec: the result says so on its own line.
    let (env, note) = message
        .rsplit_once("\n\n")
        .expect("the environment, then a note");
    assert_eq!(
        note,
        "[the output spec asked for a variable the subagent did not emit: answer]"
    );
    let seen: BTreeMap<String, String> = env
        .split('\0')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (name, value) = entry.split_once('=').expect("NAME=value");
            (name.to_owned(), value.to_owned())
        })
        .collect();

    let mut expected: BTreeMap<String, String> = always
        .iter()
        .chain([&inherited.as_str()])
        .filter_map(|&name| Some((name.to_owned(), std::env::var(name).ok()?)))
        .collect();
    for (name, value) in [
        ("GREETING", "hello world"),
        ("HOME", "/nowhere"),
        ("ASYNCTASK_TASK_ID", "task-0001"),
        ("ASYNCTASK_SUBAGENT", "env"),
        ("ASYNCTASK_GOAL", "list the environment"),
        ("ASYNCTASK_DEPTH", "1"),
        ("ASYNCTASK_CONTEXT", r#"{"file":"src/main.rs","line":"42"}"#),
        ("ASYNCTASK_BEHAVIOUR", "be brief\nbe kind"),
        (
            "ASYNCTASK_OUTPUT_SPEC",
            r#"[{"name":"answer","description":"the \"answer\""}]"#,
        ),
        ("ASYNCTASK_TOOLS", r#"["read","grep"]"#),
        ("ASYNCTASK_VARS_FILE", vars_file.to_str().expect("UTF-8")),
    ] {
        expected.insert(name.to_owned(), value.to_owned());
    }
    assert_eq!(seen, expected);
    assert!(!seen.contains_key(&hidden));
}

#[tokio::test]
async fn a_relative_cwd_is_relative_to_the_config_directory() {
    let dir = temp_dir("process");
    std::fs::create_dir(dir.path().join("work")).expect("mkdir");
    let toml = "[subagents.where]\ncommand = [\"pwd\", \"-P\"]\ncwd = \"work\"\n";

    let from_str = runner(toml, dir.path());
    let expected = dir.path().join("work");
    assert_eq!(
        from_str.config().subagents["where"].cwd.as_deref(),
        Some(expected.as_path())
    );
    let result = run(&from_str, request("where", "x")).await;
    assert_eq!(result, Ok(output(expected.to_str())));

    let file = dir.path().join("subagents.toml");
    std::fs::write(&file, toml).expect("write config");
    let loaded = ProcessRunner::new(ProcessRunnerConfig::load(&file).expect("loads"));
    assert_eq!(loaded.config(), from_str.config());
}

#[tokio::test]
async fn a_config_loaded_for_a_project_runs_its_subagents_there() {
    let dir = temp_dir("process");
    let (configs, project) = (dir.path().join("user-config"), dir.path().join("project"));
    std::fs::create_dir_all(project.join("docs")).expect("mkdir");
    std::fs::create_dir_all(&configs).expect("mkdir");
    let file = configs.join("asynctask.toml");
    std::fs::write(
        &file,
        "[subagents.here]\ncommand = [\"pwd\", \"-P\"]\n\n\
         [subagents.docs]\ncommand = [\"pwd\", \"-P\"]\ncwd = \"docs\"\n",
    )
    .expect("write config");
    let project = project.canonicalize().expect("canonical");
    let (config, ()) = ProcessRunnerConfig::load_in::<()>(&file, &project).expect("loads");
    assert_eq!(
        config.roots,
        std::slice::from_ref(&project),
        "the project is the root"
    );
    let runner = ProcessRunner::new(config);
    let here = run(&runner, request("here", "x")).await;
    assert_eq!(here, Ok(output(project.to_str())));
    let docs = run(&runner, request("docs", "x")).await;
    assert_eq!(docs, Ok(output(project.join("docs").to_str())));

    // A working directory outside the project needs a root that holds it.
    std::fs::write(
        &file,
        "[subagents.out]\ncommand = [\"pwd\"]\ncwd = \"..\"\n",
    )
    .expect("write");
    let err = ProcessRunnerConfig::load_in::<()>(&file, &project).expect_err("outside");
    assert_eq!(
        err.to_string(),
        format!(
            "invalid config {}: subagent 'out': working directory {} is not under any of the \
             roots ({}); add a `roots` entry that holds it",
            file.display(),
            dir.path().canonicalize().expect("canonical").display(),
            project.display()
        )
    );
}

#[tokio::test]
async fn a_missing_cwd_is_a_clear_error() {
    let dir = temp_dir("process");
    let runner = runner(
        "[subagents.lost]\ncommand = [\"true\"]\ncwd = \"nowhere\"\n",
        dir.path(),
    );
    let result = run(&runner, request("lost", "x")).await;
    let message = format!(
        "subagent 'lost': working directory {} is not a directory",
        dir.path().join("nowhere").display()
    );
    assert_eq!(result, error(&message));
}

#[tokio::test]
async fn a_large_goal_reaches_stdin_even_when_too_large_for_the_environment() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "big",
        r#"["sh", "-c", "echo \"${ASYNCTASK_GOAL-unset}\"; wc -c"]"#,
    );
    let goal = "g".repeat(1_000_000);
    let result = run(&runner, request("big", &goal)).await;
    assert_eq!(result, Ok(output(Some("unset\n1000000"))));
}

#[tokio::test]
async fn a_child_that_never_reads_stdin_does_not_block_the_run() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "deaf", r#"["echo", "done"]"#);
    let goal = "g".repeat(1_000_000);
    assert_eq!(
        run(&runner, request("deaf", &goal)).await,
        Ok(output(Some("done")))
    );
}
