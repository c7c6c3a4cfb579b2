#!/usr/bin/env python3
"""An asynctask subagent that runs an agent CLI (Claude Code, Codex CLI or Gemini CLI)
on the goal, and passes on what the model asked for, as far as that CLI can take it:

  $ASYNCTASK_BEHAVIOUR   (behaviour_prompts)  claude: --append-system-prompt;
                                             codex, gemini: prepended to the prompt
  $ASYNCTASK_TOOLS       (tool_whitelist)     claude: --tools (enforced: the only
                                             built-in tools it has); codex, gemini:
                                             no such flag, so it is only told
  $ASYNCTASK_OUTPUT_SPEC (output_spec)        every CLI is asked to end with one line
                                             `ASYNCTASK_VARS {...}`; that object
                                             becomes the task's variables

It also reports what the run used, on one `::asynctask::usage {...}` line (asynctask
takes it out of the output and shows it with the task): claude from its
`--output-format json` result (`usage`, `total_cost_usd`, `modelUsage`), codex from the
`turn.completed` events of `exec --json` (its tokens; it reports no cost).

Usage in asynctask.toml: command = ["python3", "/path/agent_subagent.py", "claude"]
(or "codex", "gemini"). Nothing here is run by a shell; the model's values reach the
CLI as single arguments, and a tool name that is not a plain word is dropped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

MARK = "ASYNCTASK_VARS "
USAGE = "::asynctask::usage "


def claude_result(stdout: str) -> tuple[str, dict]:
    """The answer and the usage in `claude -p --output-format json`'s one object."""
    try:
        result = json.loads(stdout)
    except ValueError:
        return stdout, {}
    if not isinstance(result, dict):
        return stdout, {}
    tokens = result.get("usage") or {}
    usage = {
        # Every token the model read: fresh, written to the cache, read from it.
        "input_tokens": sum(int(tokens.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")),
        "output_tokens": int(tokens.get("output_tokens") or 0),
    }
    if isinstance(result.get("total_cost_usd"), (int, float)):
        usage["cost_usd"] = result["total_cost_usd"]
    models = list(result.get("modelUsage") or {})
    if models:
        usage["model"] = models[0]
    return str(result.get("result", "")), usage


def codex_usage(stdout: str) -> dict:
    """The tokens of every `turn.completed` event of `codex exec --json`, summed."""
    usage = {"input_tokens": 0, "output_tokens": 0}
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "turn.completed":
            tokens = event.get("usage") or {}
            usage["input_tokens"] += int(tokens.get("input_tokens") or 0)  # cached ones included
            usage["output_tokens"] += int(tokens.get("output_tokens") or 0)
    return usage


def env_json(name: str, default):
    try:
        return json.loads(os.environ[name])
    except (KeyError, ValueError):
        return default


def main() -> int:
    cli = sys.argv[1] if len(sys.argv) > 1 else "claude"
    goal = sys.stdin.read()
    behaviour = os.environ.get("ASYNCTASK_BEHAVIOUR", "").strip()
    tools = [t for t in env_json("ASYNCTASK_TOOLS", []) if isinstance(t, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", t)]
    spec = [v for v in env_json("ASYNCTASK_OUTPUT_SPEC", []) if isinstance(v, dict) and isinstance(v.get("name"), str)]

    prompt = goal
    if spec:
        wanted = ", ".join(f'"{v["name"]}": {v.get("description", "")}' for v in spec)
        prompt += (
            "\n\nWhen you are done, end your answer with one last line that starts with "
            f"`{MARK}` followed by a JSON object of strings with these keys: {wanted}"
        )
    last_message = None
    if cli == "claude":
        args = ["claude", "-p", "--output-format", "json"]
        if behaviour:
            args += ["--append-system-prompt", behaviour]
        if tools:
            args += ["--tools", ",".join(tools)]
    elif cli == "codex":
        # Events on stdout, the final answer in a file; `-`: the prompt from stdin.
        last_message = tempfile.NamedTemporaryFile(suffix=".txt", delete=False).name
        args = ["codex", "exec", "--json", "-o", last_message, "-"]
    elif cli == "gemini":
        args = ["gemini", "-p", ""]  # the prompt comes from stdin
    else:
        print(f"agent_subagent.py: unknown CLI {cli!r}: use claude, codex or gemini", file=sys.stderr)
        return 2
    if cli != "claude":
        if behaviour:
            prompt = f"{behaviour}\n\n{prompt}"
        if tools:
            print(f"agent_subagent.py: {cli} cannot be limited to tools {tools}; it was told only", file=sys.stderr)
            prompt += "\n\nUse only these tools: " + ", ".join(tools)

    done = subprocess.run(args, input=prompt, capture_output=True, text=True)
    sys.stderr.write(done.stderr)
    answer, usage = done.stdout, {}
    if cli == "claude":
        answer, usage = claude_result(done.stdout)
    elif last_message:
        usage = codex_usage(done.stdout)
        with open(last_message) as file:
            answer = file.read()
        os.unlink(last_message)
    lines = answer.rstrip("\n").split("\n")
    if lines and lines[-1].startswith(MARK):
        try:
            found = json.loads(lines.pop()[len(MARK):])
            variables = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        except ValueError:
            variables = {}
        with open(os.environ["ASYNCTASK_VARS_FILE"], "w") as out:
            json.dump(variables, out)
    print("\n".join(lines))
    if usage:
        print(USAGE + json.dumps(usage))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
