//! The child's environment: the allowlist passed through from the host, and
//! the `ASYNCTASK_*` variables that carry the request.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use asynctask_tools::SubagentRequest;
use tokio::process::Command;

use crate::config::SubagentCommand;
use crate::values::EnvName;

/// Variables always passed through from the host's environment, when set.
const BASE_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER"];

/// The longest value an `ASYNCTASK_*` variable carries; a longer one is left
/// out (Linux refuses to start a program with a single environment string over
/// 128 KiB). stdin always carries the whole goal.
const ENV_VALUE_MAX_BYTES: usize = 64 * 1024;

/// Gives `command` the child's whole environment ([`child_env`]), nothing
/// else of the host's.
pub(crate) fn set_env(command: &mut Command, env: &[(OsString, OsString)]) {
    command.env_clear();
    command.envs(env.iter().map(|(name, value)| (name, value)));
}

/// The child's whole environment, each name once: the allowlisted variables
/// the host has ([`BASE_ENV`] and the subagent's `inherit_env`), then the
/// subagent's `env`, then the request's `ASYNCTASK_*` variables and
/// `ASYNCTASK_VARS_FILE`, each overriding the ones before.
pub(crate) fn child_env(
    spec: &SubagentCommand,
    request: &SubagentRequest,
    vars_file: &Path,
) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for name in BASE_ENV
        .iter()
        .copied()
        .chain(spec.inherit_env.iter().map(EnvName::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            env.insert(name.into(), value);
        }
    }
    for (name, value) in &spec.env {
        env.insert(name.as_str().into(), value.as_str().into());
    }
    for (name, value) in request_env(request) {
        env.insert(name.into(), value.into());
    }
    env.insert("ASYNCTASK_VARS_FILE".into(), vars_file.into());
    env.into_iter().collect()
}

/// The `ASYNCTASK_*` variables of a request; values too long for the
/// environment, or holding NUL, are left out.
fn request_env(request: &SubagentRequest) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("ASYNCTASK_TASK_ID", request.task_id.clone()),
        ("ASYNCTASK_SUBAGENT", request.subagent_name.clone()),
        ("ASYNCTASK_GOAL", request.goal_prompt.clone()),
        (asynctask_tools::DEPTH_ENV, request.depth.to_string()),
    ];
    if !request.context.is_empty() {
        let context: serde_json::Map<String, serde_json::Value> = request
            .context
            .iter()
            .map(|var| {
                (
                    var.name.clone(),
                    serde_json::Value::from(var.value.as_str()),
                )
            })
            .collect();
        vars.push((
            "ASYNCTASK_CONTEXT",
            serde_json::Value::Object(context).to_string(),
        ));
    }
    if !request.behaviour_prompts.is_empty() {
        vars.push(("ASYNCTASK_BEHAVIOUR", request.behaviour_prompts.join("\n")));
    }
    if !request.output_spec.is_empty() {
        let spec: Vec<serde_json::Value> = request
            .output_spec
            .iter()
            .map(|var| serde_json::json!({"name": var.name, "description": var.description}))
            .collect();
        vars.push((
            "ASYNCTASK_OUTPUT_SPEC",
            serde_json::Value::from(spec).to_string(),
        ));
    }
    if let Some(tools) = &request.tool_whitelist {
        vars.push((
            "ASYNCTASK_TOOLS",
            serde_json::Value::from(tools.clone()).to_string(),
        ));
    }
    vars.retain(|(name, value)| {
        let fits = value.len() <= ENV_VALUE_MAX_BYTES && !value.contains('\0');
        if !fits {
            tracing::warn!(
                variable = name,
                bytes = value.len(),
                "left out of the subagent's environment: too long or holds NUL"
            );
        }
        fits
    });
    vars
}
