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

MARK = "ASYNCTASK_VARS "


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
    if cli == "claude":
        args = ["claude", "-p", "--output-format", "text"]
        if behaviour:
            args += ["--append-system-prompt", behaviour]
        if tools:
            args += ["--tools", ",".join(tools)]
    elif cli == "codex":
        args = ["codex", "exec", "-"]  # `-`: the prompt comes from stdin
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
    lines = done.stdout.rstrip("\n").split("\n")
    if lines and lines[-1].startswith(MARK):
        try:
            found = json.loads(lines.pop()[len(MARK):])
            variables = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        except ValueError:
            variables = {}
        with open(os.environ["ASYNCTASK_VARS_FILE"], "w") as out:
            json.dump(variables, out)
    print("\n".join(lines))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
