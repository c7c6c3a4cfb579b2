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

With `stdin = "jsonl"` in its config, the claude subagent routes Claude Code's
permission prompts to whoever answers asynctask's questions (the user, through an
elicitation form, or the model, with answer_async_task) instead of denying them: Claude
Code is given `--permission-prompt-tool` naming a small MCP server (this script, run
with `--permission-server`), which hands each prompt to this process over a Unix
socket; this process asks it as a question on `$ASYNCTASK_QUESTIONS` (choices `allow`,
`deny`) and reads the answer on stdin. Anything but `allow` denies.

Usage in asynctask.toml: command = ["python3", "/path/agent_subagent.py", "claude"]
(or "codex", "gemini"). Nothing here is run by a shell; the model's values reach the
CLI as single arguments, and a tool name that is not a plain word is dropped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

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


PERMISSION_TOOL = "mcp__asynctask_permissions__ask"


def permission_server(socket_path: str) -> int:
    """A minimal MCP server on stdio with one tool, `ask`, for Claude Code's
    `--permission-prompt-tool`: each call goes to the adapter on `socket_path`, whose
    answer is the tool's result ({"behavior": "allow", "updatedInput": ...} or
    {"behavior": "deny", "message": ...})."""
    tool = {
        "name": "ask",
        "description": "Asks whoever launched this subagent whether a tool may run.",
        "inputSchema": {"type": "object", "properties": {"tool_name": {"type": "string"}, "input": {"type": "object"}}},
    }
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "id" not in message:
            continue  # notifications and responses need no answer
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "asynctask-permissions", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [tool]}
        elif method == "tools/call":
            arguments = params.get("arguments") or {}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(socket_path)
                conn.sendall((json.dumps(arguments) + "\n").encode())
                decision = conn.makefile().readline()
            result = {"content": [{"type": "text", "text": decision.strip()}]}
        elif method == "ping":
            result = {}
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"no method {method}"}}
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
    return 0


class Permissions:
    """Claude Code's permission prompts, asked as asynctask questions: a Unix socket
    the permission server connects to, and the answers read from stdin."""

    def __init__(self, questions: str, directory: str) -> None:
        self.questions = questions
        self.socket_path = os.path.join(directory, "permissions.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        self.listener.listen()
        self.lock = threading.Lock()
        self.next_id = 0
        self.waiting: dict[int, tuple[threading.Event, list]] = {}
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self.decide, args=(conn,), daemon=True).start()

    def decide(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = json.loads(conn.makefile().readline() or "{}")
            except ValueError:
                request = {}
            tool = str(request.get("tool_name", "a tool"))
            tool_input = request.get("input") if isinstance(request.get("input"), dict) else {}
            shown = json.dumps(tool_input)[:500]
            answer = self.ask(f"Claude Code asks to use {tool} with {shown}. Allow it?")
            if answer.get("status") == "answered" and answer.get("text") == "allow":
                decision = {"behavior": "allow", "updatedInput": tool_input}
            else:
                why = answer.get("text") or answer.get("status", "no answer")
                decision = {"behavior": "deny", "message": f"The user did not allow it ({why})."}
            conn.sendall((json.dumps(decision) + "\n").encode())

    def ask(self, text: str) -> dict:
        with self.lock:
            self.next_id += 1
            number = self.next_id
            done, box = threading.Event(), []
            self.waiting[number] = (done, box)
        with open(self.questions, "w") as fifo:  # one line, written whole
            fifo.write(json.dumps({"type": "question", "id": number, "text": text, "choices": ["allow", "deny"]}) + "\n")
        done.wait()
        return box[0]

    def answered(self, line: dict) -> None:
        with self.lock:
            waiting = self.waiting.pop(line.get("id"), None)
        if waiting:
            waiting[1].append(line)
            waiting[0].set()

    def read_answers(self, stdin) -> None:
        """Every line after the goal: answers go to their questions (messages are
        not passed on: claude -p takes no more input)."""
        for raw in stdin:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("type") == "answer":
                self.answered(line)


def env_json(name: str, default):
    try:
        return json.loads(os.environ[name])
    except (KeyError, ValueError):
        return default


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--permission-server":
        return permission_server(sys.argv[2])
    cli = sys.argv[1] if len(sys.argv) > 1 else "claude"
    questions = os.environ.get("ASYNCTASK_QUESTIONS")
    permissions = None
    if questions:
        # stdin = "jsonl": the goal is the first line; answers follow.
        first = json.loads(sys.stdin.readline() or "{}")
        goal = str(first.get("text", "")) if isinstance(first, dict) else ""
    else:
        goal = sys.stdin.read()
    behaviour = os.environ.get("ASYNCTASK_BEHAVIOUR", "").strip()
    whitelist = env_json("ASYNCTASK_TOOLS", None)
    tools = [t for t in whitelist or [] if isinstance(t, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", t)]
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
        if isinstance(whitelist, list):
            # Names that are not plain words are dropped; none left means no
            # built-in tool at all (`--tools ""`), never all of them.
            args += ["--tools", ",".join(tools)]
        if questions:
            scratch = tempfile.mkdtemp(prefix="asynctask-permissions-")
            permissions = Permissions(questions, scratch)
            server = {"command": sys.executable, "args": [os.path.abspath(__file__), "--permission-server", permissions.socket_path]}
            args += [
                "--mcp-config", json.dumps({"mcpServers": {"asynctask_permissions": server}}),
                "--permission-prompt-tool", PERMISSION_TOOL,
            ]
            threading.Thread(target=permissions.read_answers, args=(sys.stdin,), daemon=True).start()
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
    if permissions:
        permissions.listener.close()
        shutil.rmtree(os.path.dirname(permissions.socket_path), ignore_errors=True)
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
