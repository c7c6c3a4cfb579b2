#!/usr/bin/env python3
"""A scripted fake model endpoint for the real-host tests (`run_hosts.py`).

Pure standard library. It listens on 127.0.0.1 only (port 0: the kernel picks one)
and prints `PORT <n>` as its first line of stdout once it accepts connections. It
speaks three wire protocols:

- the Anthropic Messages API (`POST /v1/messages`, streaming SSE or not, and
  `/v1/messages/count_tokens`), as Claude Code uses it with `ANTHROPIC_BASE_URL`;
- the OpenAI Responses API (`POST /v1/responses`, streaming SSE), as Codex uses it
  with a custom `model_provider` whose `wire_api = "responses"`;
- the Gemini API (`POST /v1beta/models/<model>:generateContent`,
  `:streamGenerateContent?alt=sse` and `:countTokens`), as Gemini CLI uses it with
  `GOOGLE_GEMINI_BASE_URL`: `functionCall` parts out, `functionResponse` parts back.

A request that offers the asynctask `task` tool is the agent's main loop; it gets
the next step of the script, worked out from the conversation the request carries
(so retries and side calls cannot shift it):

0. when the asynctask tools are only named, as deferred tools, and a `ToolSearch`
   tool is offered (Claude Code 2.1.331): call `ToolSearch` with
   `select:<the names of the tools the script calls>`, as a model does; when the
   request says the asynctask server is still connecting (a prompt typed right
   after interactive Claude Code started), call `ToolSearch` with the query
   `asynctask`, as the client's reminder tells the model to (it waits for the
   server). A deferred tool (`defer_loading: true`) counts as offered only once a
   `tool_reference` to it came back, as in the real API;
1. call `task` with `async: true` for the subagent the user's last prompt names
   (`Run the <name> subagent in the background ...`), else the configured one;
2. after the `task` result: wait until the subagent has written its done file
   (`--done-file`, plus a short margin so the server has reaped it), then call
   `check_async_tasks`: its result should carry the finished task's result;
3. after that: call `wait_async_tasks` (nothing is left to wait for, so its result
   must not carry the result a second time);
4. after that: a final text answer, ending the session.

When the client ran the `task` call as an MCP Task instead (its result says it
`started server-side task ...`: interactive Claude Code), the model ends its turn
with a short text saying it waits; once a later user turn carries the client's
`<task-notification>`, it gives the final answer. A session of several prompts
follows the script over the calls of its last prompt's turn.

Any other request (a title, a quota probe, token counting, a model list) gets a
short sensible answer; one that asks for JSON by a schema (Gemini CLI's model
router) gets the smallest value the schema accepts. Requests through a proxy (`CONNECT host:port`, or an
absolute URL) are refused and recorded: the harness points the clients' proxy
variables here, so an attempt to reach any other address shows up in the log.

Every request is recorded, its body parsed, in the JSON log (`--log`), rewritten
after each request, so the harness can check what the client sent back to the
model. Times are `time.monotonic()` (CLOCK_MONOTONIC, shared with the harness).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The asynctask server's tools, by their MCP names.
ASYNCTASK_TOOLS = ("task", "check_async_tasks", "message_async_task", "wait_async_tasks", "end_async_task")

# After the done file appears: time for the subagent to exit and the server to
# reap it and record its result, before the model calls `check_async_tasks`.
REAP_MARGIN = 0.7
# The longest the script waits for the done file before calling the tool anyway.
DONE_FILE_LIMIT = 30.0
# A conversation that ran this many asynctask calls ends, whatever else happened.
MAX_CALLS = 6

FINAL_TEXT = "All done: the background subagent finished and its result arrived."
# What the model says when the client moved a `task` call to the background as an MCP
# Task (Claude Code in an interactive session): it ends its turn and waits for the
# client's `<task-notification>`.
WAITING_TEXT = "The subagent runs in the background; I will report its result when it arrives."
# What the client says in the `task` call's result when it made the call an MCP Task.
MCP_TASK_STARTED = "started server-side task"
# The client's new turn carrying a finished MCP Task's result.
TASK_NOTIFICATION = "<task-notification>"
# A user's prompt names the subagent to run; the script runs that one (the
# `--subagent` otherwise).
PROMPT_SUBAGENT = re.compile(r"Run the (\w+) subagent in the background")

# Claude Code's tool that loads deferred tools' definitions, and the asynctask tools
# the script calls (what it loads through it).
TOOL_SEARCH = "ToolSearch"
SCRIPT_TOOLS = ("task", "check_async_tasks", "wait_async_tasks")


# ---------------------------------------------------------------- the script


class Call:
    """One tool call the model made, with the output the client sent back."""

    def __init__(self, call_id: str, name: str, arguments: Any) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.output: str | None = None
        self.is_error = False

    @property
    def bare(self) -> str | None:
        """The asynctask tool this call is for, or None."""
        return bare_tool_name(self.name)


def bare_tool_name(name: str) -> str | None:
    """`task` for `task`, `mcp__asynctask__task`, `asynctask.task`, ...; None for
    any other tool. Longest names first, so `check_async_tasks` is not `task`."""
    for tool in sorted(ASYNCTASK_TOOLS, key=len, reverse=True):
        if name == tool:
            return tool
        for sep in ("__", ".", "/", ":", "_"):
            if name.endswith(sep + tool) and (tool != "task" or "asynctask" in name):
                return tool
    return None


def text_of(content: Any) -> str:
    """The text of a tool result's content, in either API's shapes."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(part) for part in content)
    if isinstance(content, dict):
        for key in ("text", "output", "content"):
            if key in content:
                return text_of(content[key])
        return json.dumps(content)
    return str(content)


class Script:
    """The scripted conversation; `next_step` is a pure function of the calls so far."""

    def __init__(self, subagent: str, goal: str, done_file: Path | None) -> None:
        self.subagent = subagent
        self.goal = goal
        self.done_file = done_file

    def next_step(self, calls: list[Call], subagent: str | None = None,
                  notified: bool = False) -> tuple[str, dict[str, Any] | str]:
        """("call", {"tool": bare name, "arguments": ...}) or ("text", answer).
        `subagent`: the one the user's prompt names (else `--subagent`);
        `notified`: a `<task-notification>` came after the last call."""
        ours = [call for call in calls if call.bare is not None]
        if len(ours) >= MAX_CALLS:
            return "text", f"Stopping: {len(ours)} asynctask calls already."
        if not ours:
            return "call", {
                "tool": "task",
                "arguments": {"subagent_name": subagent or self.subagent, "goal_prompt": self.goal, "async": True},
            }
        last = ours[-1]
        if last.bare == "task" and MCP_TASK_STARTED in (last.output or "") and not last.is_error:
            # The client runs the call as an MCP Task and brings the result itself.
            return "text", FINAL_TEXT if notified else WAITING_TEXT
        if last.bare == "task":
            if last.is_error or "Async task launched" not in (last.output or ""):
                return "text", f"The task tool failed: {(last.output or '')[:500]}"
            self.wait_for_done_file()
            return "call", {"tool": "check_async_tasks", "arguments": {}}
        if last.bare == "check_async_tasks":
            return "call", {"tool": "wait_async_tasks", "arguments": {"timeout_seconds": 5}}
        return "text", FINAL_TEXT

    def wait_for_done_file(self) -> None:
        if self.done_file is None:
            time.sleep(2.0)
            return
        deadline = time.monotonic() + DONE_FILE_LIMIT
        while not self.done_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(REAP_MARGIN)


# ------------------------------------------------------------- the two APIs


def offered_tools(tools: Any, prefix: str = "") -> list[str]:
    """Every tool name a request offers (namespaced tools as `namespace.name`)."""
    names: list[str] = []
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if isinstance(tool.get("functionDeclarations"), list):  # Gemini: one entry holds them all
            names.extend(offered_tools(tool["functionDeclarations"], prefix))
        elif isinstance(tool.get("tools"), list):
            names.extend(offered_tools(tool["tools"], f"{prefix}{name}." if name else prefix))
        elif name:
            names.append(prefix + name)
    return names


def anthropic_offered(body: dict[str, Any]) -> list[str]:
    """The tools an Anthropic request lets the model call. As the API does, a tool
    with `defer_loading: true` counts only once a `tool_reference` to it came back
    in a tool result (what `ToolSearch` returns); until then the model sees only
    its name, if the client lists it."""
    referenced: set[str] = set()
    for message in body.get("messages") or []:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                referenced.update(part.get("tool_name", "") for part in block["content"]
                                  if isinstance(part, dict) and part.get("type") == "tool_reference")
    tools = [tool for tool in body.get("tools") or []
             if not (isinstance(tool, dict) and tool.get("defer_loading") and tool.get("name") not in referenced)]
    return offered_tools(tools)


def deferred_tools(body: dict[str, Any]) -> list[str]:
    """The tools an Anthropic request names but does not define. Claude Code 2.1.331
    in `-p` mode lists MCP tools by name only, in a reminder telling the model to
    load them with `ToolSearch` (query `select:<name>[,<name>...]`) first."""
    texts: list[str] = []
    system = body.get("system")
    texts.append(system if isinstance(system, str) else text_of(system))
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            texts.append(text_of(message.get("content")))
    defined = set(anthropic_offered(body))
    names: list[str] = []
    for text in texts:
        for block in text.split("<system-reminder>")[1:]:
            head, _, rest = block.lstrip().partition("\n")
            if TOOL_SEARCH not in head or "deferred tools" not in head:
                continue
            for line in rest.split("</system-reminder>")[0].splitlines():
                name = line.strip()
                if name and " " not in name and name not in defined and name not in names:
                    names.append(name)
    return names


def connecting_servers(body: dict[str, Any]) -> list[str]:
    """The MCP servers an Anthropic request says are still connecting. Interactive
    Claude Code 2.1.331 sends a prompt typed right after its start before it has
    the servers' tool lists: the reminder names those servers instead ("The
    following MCP servers are still connecting ...") and tells the model to call
    `ToolSearch` with a keyword, which waits for them."""
    names: list[str] = []
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        for block in text_of(message.get("content")).split("<system-reminder>")[1:]:
            _, found, rest = block.partition("MCP servers are still connecting")
            if found:
                # "... will appear shortly:\n<server>\n<server>\n\n<advice>"
                paragraph = rest.split("</system-reminder>")[0].split("\n\n")[0]
                names += [line.strip() for line in paragraph.splitlines()[1:] if line.strip()]
    return names


def resolve(tool: str, offered: list[str]) -> str | None:
    """The offered name of asynctask's `tool`."""
    matches = [name for name in offered if bare_tool_name(name) == tool]
    return min(matches, key=len) if matches else None


def prompt_turn(messages: list[Any]) -> tuple[int, str | None]:
    """Where the user's last prompt that names a subagent (`Run the <name> subagent
    in the background`) starts, and that name; (0, None) without one."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            found = PROMPT_SUBAGENT.search(text_of(message.get("content")))
            if found and TASK_NOTIFICATION not in text_of(message.get("content")):
                return index, found[1]
    return 0, None


def notified_after_last_call(messages: list[Any]) -> bool:
    """Whether a user message after the model's last tool call carries a
    `<task-notification>` (a client's new turn with a finished MCP Task)."""
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list) and any(
                isinstance(block, dict) and block.get("type") == "tool_use" for block in content):
            return False
        if message.get("role") == "user" and TASK_NOTIFICATION in text_of(content):
            return True
    return False


def anthropic_calls(body: dict[str, Any]) -> list[Call]:
    calls: dict[str, Call] = {}
    order: list[Call] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                call = Call(block.get("id", ""), block.get("name", ""), block.get("input"))
                calls[call.call_id] = call
                order.append(call)
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                call = calls[block["tool_use_id"]]
                call.output = text_of(block.get("content"))
                call.is_error = bool(block.get("is_error"))
    return order


def responses_calls(body: dict[str, Any]) -> list[Call]:
    calls: dict[str, Call] = {}
    order: list[Call] = []
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            name = item.get("name", "")
            if item.get("namespace"):
                name = f"{item['namespace']}.{name}"
            raw = item.get("arguments", item.get("input"))
            try:
                arguments = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                arguments = raw
            call = Call(item.get("call_id", ""), name, arguments)
            calls[call.call_id] = call
            order.append(call)
        elif kind in ("function_call_output", "custom_tool_call_output") and item.get("call_id") in calls:
            call = calls[item["call_id"]]
            output = item.get("output")
            call.output = text_of(output)
            if isinstance(output, dict) and output.get("success") is False:
                call.is_error = True
    return order


def gemini_calls(body: dict[str, Any]) -> list[Call]:
    """The `functionCall` parts of the model's turns, each with the
    `functionResponse` part answering it: by `id` when both carry one, else the
    first unanswered call of that name (the Gemini API gives calls no id)."""
    order: list[Call] = []
    for content in body.get("contents") or []:
        for part in content.get("parts") or [] if isinstance(content, dict) else []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                order.append(Call(call.get("id") or f"gemini-call-{len(order)}", call.get("name", ""), call.get("args")))
            elif isinstance(part.get("functionResponse"), dict):
                response = part["functionResponse"]
                open_calls = [c for c in order if c.output is None and c.name == response.get("name")]
                by_id = [c for c in open_calls if response.get("id") and c.call_id == response["id"]]
                if not open_calls:
                    continue
                call = (by_id or open_calls)[0]
                result = response.get("response")
                call.output = text_of(result)
                call.is_error = isinstance(result, dict) and "error" in result and "output" not in result
    return order


API_CALLS = {"anthropic": lambda body: anthropic_calls(body), "responses": lambda body: responses_calls(body),
             "gemini": lambda body: gemini_calls(body)}


def tool_results(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool result a request carries: {"call_id", "name", "text", "is_error"}.
    The harness uses this to count what reached the model."""
    calls = API_CALLS[api](body)
    return [
        {"call_id": c.call_id, "name": c.name, "tool": c.bare, "text": c.output, "is_error": c.is_error}
        for c in calls
        if c.output is not None
    ]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


# ------------------------------------------------------------------- serving


class FakeModel(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, script: Script, log_path: Path | None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = script
        self.log_path = log_path
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            entry["seq"] = len(self.records)
            self.records.append(entry)
            if self.log_path is not None:
                tmp = self.log_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(self.records, indent=1))
                tmp.replace(self.log_path)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeModel

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        sys.stderr.write("fake_model: " + (format % args) + "\n")

    # -- plumbing

    def read_body(self) -> tuple[Any, str | None]:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self.read_chunked()
        else:
            raw = self.rfile.read(length) if length else b""
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        try:
            if encoding == "gzip":
                raw = gzip.decompress(raw)
            elif encoding == "deflate":
                raw = zlib.decompress(raw)
            elif encoding not in ("", "identity"):
                return None, f"cannot decode Content-Encoding {encoding!r}"
        except (OSError, zlib.error) as err:
            return None, f"bad {encoding} body: {err}"
        if not raw:
            return None, None
        try:
            return json.loads(raw), None
        except ValueError:
            return raw.decode("utf-8", "replace"), None

    def read_chunked(self) -> bytes:
        data = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, kind: str, message: str) -> None:
        self.send_json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def send_sse(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for name, data in events:
            chunk = (f"event: {name}\n" if name else "").encode() + f"data: {json.dumps(data)}\n\n".encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def entry(self, body: Any, error: str | None) -> dict[str, Any]:
        keep = ("user-agent", "content-type", "anthropic-version", "anthropic-beta", "originator", "x-app",
                "x-goog-api-client")
        return {
            "t": time.monotonic(),
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items() if k.lower() in keep},
            "body": body,
            "body_error": error,
        }

    # -- methods

    def do_CONNECT(self) -> None:  # noqa: N802 (the http.server name)
        self.refuse_proxy()

    def do_HEAD(self) -> None:  # noqa: N802
        entry = self.entry(None, None)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        entry["api"], entry["kind"], entry["t_end"] = "other", "head", time.monotonic()
        self.server.record(entry)

    def do_GET(self) -> None:  # noqa: N802
        if not self.path.startswith("/"):
            self.refuse_proxy()
            return
        entry = self.entry(None, None)
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/models"):
            model = {"id": "fake-model", "type": "model", "display_name": "Fake model",
                     "created_at": "2025-01-01T00:00:00Z"}
            self.send_json(200, {"object": "list", "data": [model], "has_more": False, "models": []})
            entry["api"], entry["kind"] = "other", "models"
        elif path in ("", "/v1"):
            self.send_json(200, {})
            entry["api"], entry["kind"] = "other", "root"
        else:
            self.send_error_json(404, "not_found_error", f"no {self.path}")
            entry["api"], entry["kind"] = "other", "unknown"
        entry["t_end"] = time.monotonic()
        self.server.record(entry)

    def do_POST(self) -> None:  # noqa: N802
        if not self.path.startswith("/"):
            self.refuse_proxy()
            return
        body, error = self.read_body()
        entry = self.entry(body, error)
        path = self.path.split("?")[0].rstrip("/")
        try:
            if not isinstance(body, dict):
                self.send_error_json(400, "invalid_request_error", error or "not JSON")
                entry["api"], entry["kind"] = "other", "bad"
            elif ":" in path.rsplit("/", 1)[-1]:  # Gemini: /v1beta/models/<model>:<method>
                entry["api"] = "gemini"
                self.serve_gemini(body, entry, path.rsplit(":", 1)[1])
            elif path.endswith("/messages/count_tokens"):
                self.send_json(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
                entry["api"], entry["kind"] = "anthropic", "count_tokens"
            elif path.endswith("/messages"):
                entry["api"] = "anthropic"
                self.serve_anthropic(body, entry)
            elif path.endswith("/responses"):
                entry["api"] = "responses"
                self.serve_responses(body, entry)
            else:
                self.send_error_json(404, "not_found_error", f"no {self.path}")
                entry["api"], entry["kind"] = "other", "unknown"
        finally:
            entry["t_end"] = time.monotonic()
            self.server.record(entry)

    def refuse_proxy(self) -> None:
        """A proxied request: somewhere other than this endpoint. Refused, recorded."""
        self.server.record(
            {"t": time.monotonic(), "t_end": time.monotonic(), "method": self.command, "path": self.path,
             "api": "proxy", "kind": "refused", "headers": {}, "body": None, "body_error": None}
        )
        self.send_response(403, "asynctask host tests: no traffic beyond 127.0.0.1")
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    # -- the script, per API

    def decide(self, offered: list[str], calls: list[Call], entry: dict[str, Any],
               deferred: list[str] | None = None, turn: tuple[str | None, bool] = (None, False),
               connecting: list[str] | None = None) -> tuple[str, Any]:
        """The main loop's next step, in the client's names; a side call's answer.
        `deferred`: the tools the request names but does not define (Claude Code's
        deferred tools, loaded through its `ToolSearch` tool); `turn`: the subagent
        the user's prompt names and whether a task notification came after the last
        call (`Script.next_step`); `connecting`: the MCP servers the client says are
        still connecting."""
        task_tool = resolve("task", offered)
        if task_tool is None:
            load = self.load_deferred(offered, calls, deferred or [], connecting or [])
            if load is not None:
                entry["kind"] = "main"
                entry["action"] = {"call": TOOL_SEARCH, "tool": TOOL_SEARCH, "arguments": load}
                return "call", {"name": TOOL_SEARCH, "arguments": load}
            if deferred and resolve("task", deferred) is not None:
                entry["kind"] = "main"
                entry["error"] = (f"the asynctask tools are deferred and could not be loaded "
                                  f"(offered: {offered}; ToolSearch calls so far: "
                                  f"{sum(c.name == TOOL_SEARCH for c in calls)})")
                return "text", f"ERROR: {entry['error']}"
            entry["kind"] = "side"
            return "text", "OK."
        entry["kind"] = "main"
        kind, step = self.server.script.next_step(calls, *turn)
        if kind == "call":
            name = resolve(step["tool"], offered)
            if name is None:
                entry["error"] = f"the client offers no {step['tool']} tool (offered: {offered})"
                return "text", f"ERROR: {entry['error']}"
            entry["action"] = {"call": name, "tool": step["tool"], "arguments": step["arguments"]}
            return "call", {"name": name, "arguments": step["arguments"]}
        entry["action"] = {"text": step}
        return "text", step

    @staticmethod
    def load_deferred(offered: list[str], calls: list[Call], deferred: list[str],
                      connecting: list[str]) -> dict[str, Any] | None:
        """What a model does when the asynctask tools are named but not defined and a
        `ToolSearch` tool is offered: load the ones the script calls, by name, once;
        when the asynctask server is still connecting (`connecting`), search for its
        tools by its name, as the client's reminder says."""
        if TOOL_SEARCH not in offered or any(call.name == TOOL_SEARCH for call in calls):
            return None
        names = [name for name in (resolve(tool, deferred) for tool in SCRIPT_TOOLS) if name is not None]
        if names:
            return {"query": "select:" + ",".join(names), "max_results": len(names)}
        if "asynctask" in connecting:
            return {"query": "asynctask", "max_results": 10}
        return None

    def serve_anthropic(self, body: dict[str, Any], entry: dict[str, Any]) -> None:
        deferred = deferred_tools(body)
        if deferred:
            entry["deferred"] = deferred
        # A session of several prompts (interactive Claude Code): the script runs
        # over the calls of the last prompt's turn, for the subagent it names.
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        start, subagent = prompt_turn(messages)
        turn_calls = anthropic_calls(dict(body, messages=messages[start:]))
        turn = (subagent, notified_after_last_call(messages))
        connecting = connecting_servers(body)
        if connecting:
            entry["connecting"] = connecting
        kind, step = self.decide(anthropic_offered(body), turn_calls, entry, deferred, turn, connecting)
        if kind == "text" and entry["kind"] == "side" and "isNewTopic" in json.dumps(body.get("system", "")):
            step = json.dumps({"isNewTopic": False, "title": None})
        model = body.get("model", "fake-model")
        message = {
            "id": new_id("msg"), "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0},
        }
        if kind == "call":
            block = {"type": "tool_use", "id": new_id("toolu"), "name": step["name"], "input": step["arguments"]}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": step}
            stop = "end_turn"
        if not body.get("stream"):
            message.update(content=[block], stop_reason=stop)
            message["usage"]["output_tokens"] = 20
            self.send_json(200, message)
            return
        if block["type"] == "tool_use":
            start = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        self.send_sse([
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            ("ping", {"type": "ping"}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 20}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    def serve_responses(self, body: dict[str, Any], entry: dict[str, Any]) -> None:
        kind, step = self.decide(offered_tools(body.get("tools")), responses_calls(body), entry)
        response_id = new_id("resp")
        if kind == "call":
            namespace, _, name = step["name"].rpartition(".")
            item: dict[str, Any] = {
                "type": "function_call", "id": new_id("fc"), "call_id": new_id("call"), "name": name,
                "arguments": json.dumps(step["arguments"]), "status": "completed",
            }
            if namespace:
                item["namespace"] = namespace
        else:
            item = {
                "type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": step, "annotations": []}],
            }
        base = {"id": response_id, "object": "response", "created_at": int(time.time()),
                "model": body.get("model", "fake-model"), "output": []}
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": dict(base, status="in_progress")}),
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                            "item": dict(item, status="in_progress")}),
        ]
        if item["type"] == "message":
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "delta": step}))
        events += [
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed",
                                    "response": dict(base, status="completed", output=[item], usage=usage)}),
        ]
        for number, (_, data) in enumerate(events):
            data["sequence_number"] = number
        self.send_sse(events)


    def serve_gemini(self, body: dict[str, Any], entry: dict[str, Any], method: str) -> None:
        if method == "countTokens":
            self.send_json(200, {"totalTokens": max(1, len(json.dumps(body)) // 4)})
            entry["kind"] = "count_tokens"
            return
        if method not in ("generateContent", "streamGenerateContent"):
            self.send_json(404, {"error": {"code": 404, "message": f"no method {method}", "status": "NOT_FOUND"}})
            entry["kind"] = "unknown"
            return
        kind, step = self.decide(offered_tools(body.get("tools")), gemini_calls(body), entry)
        if kind == "call":
            part: dict[str, Any] = {"functionCall": {"name": step["name"], "args": step["arguments"]}}
        elif entry["kind"] == "side" and (body.get("generationConfig") or {}).get("responseMimeType") == "application/json":
            part = {"text": json.dumps(json_answer(body["generationConfig"]))}
        else:
            part = {"text": step}
        answer = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
            "modelVersion": self.path.rsplit("/", 1)[-1].split(":")[0], "responseId": new_id("resp"),
        }
        if method == "generateContent":
            self.send_json(200, answer)
        else:
            self.send_sse([(None, answer)])


def json_answer(config: dict[str, Any]) -> Any:
    """A side request in JSON mode (Gemini CLI's routing and next-speaker checks):
    the smallest value its schema accepts, enums at their first value."""
    return schema_value(config.get("responseJsonSchema") or config.get("responseSchema") or {})


def schema_value(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = (kind[0] if isinstance(kind, list) and kind else kind or "object")
    kind = str(kind).lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_value(sub) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="the JSON log of every request")
    parser.add_argument("--subagent", default="hello", help="the subagent the script launches")
    parser.add_argument("--goal", default="Say hello from the background.", help="its goal")
    parser.add_argument("--done-file", type=Path, help="the file the subagent writes when it is done")
    args = parser.parse_args()
    server = FakeModel(Script(args.subagent, args.goal, args.done_file), args.log)
    if args.log is not None:
        server.record({"t": time.monotonic(), "t_end": time.monotonic(), "method": "START", "path": "",
                       "api": "other", "kind": "start", "headers": {}, "body": {"pid": os.getpid()},
                       "body_error": None})

    def stop(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
