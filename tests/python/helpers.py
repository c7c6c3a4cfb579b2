"""What every Python test of `asynctask` shares: the binary, a connected client of a
fresh server, the texts of results, a transcript that counts reminders across calls,
and checks on processes (by pid, never by name).

The binary is ``$ASYNCTASK_BIN`` (``cargo xtask ci`` sets it) or
``target/debug/asynctask``.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CONFIG = HERE / "subagents.toml"

REMINDER_HEADER = "---\nSystem Note: Async Task Status"
LAUNCH_PREFIX = "Async task launched: subagent 'quick'"
TOOLS = {"task", "check_async_tasks", "message_async_task", "answer_async_task", "wait_async_tasks", "end_async_task"}

# Time limits, all on the real clock. The `quick` subagent answers after 0.3 s; a test
# normally takes about a second (the progress test 6 s: the server reports every 5 s).
TEST_DEADLINE = 15.0  # hard limit per test, connect and shutdown included
CALL_TIMEOUT = 12.0  # client-side read timeout of any one request
WAIT_SECONDS = 8  # `timeout_seconds` of a wait_async_tasks call that must not time out


def binary() -> Path:
    path = Path(os.environ.get("ASYNCTASK_BIN") or REPO / "target" / "debug" / "asynctask")
    if not path.is_file():
        pytest.fail(f"no asynctask binary at {path}: run `cargo build -p asynctask-cli` or set ASYNCTASK_BIN")
    return path


@asynccontextmanager
async def connect(
    mode: str,
    tmp_path: Path,
    *extra_args: str,
    list_roots_callback: Any = None,
    elicitation_callback: Any = None,
    cwd: Path | None = None,
    config: Path = CONFIG,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """A connected client of a fresh server; the server's stderr is printed afterwards
    (pytest shows it when the test fails). On a clean exit it also checks that the
    server ended by itself once its stdin closed (on EOF it cancels everything, waits
    for the processes and exits), without a panic.

    The server runs in `cwd` (default: `tmp_path/project`, made here), which is its
    project unless the client names one of its roots (`list_roots_callback`)."""
    project = cwd or tmp_path / "project"
    project.mkdir(exist_ok=True)
    params = StdioServerParameters(
        command=str(binary()),
        args=["mcp", "--config", str(config), *extra_args],
        env={"ASYNCTASK_TEST_DIR": str(tmp_path), **(env or {})},  # where `slow` leaves its pid
        cwd=str(project),
    )
    log = tmp_path / "server-stderr.log"
    with log.open("w") as errlog:
        try:
            with anyio.fail_after(TEST_DEADLINE):
                transport = stdio_client(params, errlog=errlog)
                async with Client(
                    transport,
                    mode=mode,
                    read_timeout_seconds=CALL_TIMEOUT,
                    list_roots_callback=list_roots_callback,
                    elicitation_callback=elicitation_callback,
                ) as client:
                    print(f"mode={mode}: negotiated protocol {client.protocol_version}")
                    yield client
                    closing = time.monotonic()
                # The SDK closes the server's stdin, waits up to PROCESS_TERMINATION_TIMEOUT
                # (2 s) for it to exit, and only then signals its process group.
                closed_after = time.monotonic() - closing
        finally:
            errlog.flush()
            print(f"--- server stderr ({' '.join(params.args)}) ---\n{log.read_text()}")
    assert "panicked" not in log.read_text(), f"the server panicked:\n{log.read_text()}"
    assert closed_after < 1.9, f"the server did not exit on EOF by itself (closing took {closed_after:.1f} s)"


def slow_group(tmp_path: Path, task_id: str) -> int:
    """The process group of task `task_id` of the `slow` subagent (its shell's pid)."""
    return int(wait_for_file(tmp_path / f"slow-{task_id}.pid"))


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: a killed
    subagent's grandchild is reparented to PID 1, which may reap it only later."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        state, _ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


async def assert_group_ends(pgid: int) -> None:
    """The subagent's whole process group ends (SIGTERM, SIGKILL after a 2 s grace)."""
    await wait_until_async(lambda: not group_alive(pgid), f"the end of the subagent's process group {pgid}")


def texts(result: CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, TextContent)]


def launched_id(result: CallToolResult) -> str:
    """The task id in `Async task launched: subagent '<name>' (ID: <id>). ...`."""
    first = texts(result)[0]
    found = re.search(r"\(ID: ([^)\s]+)\)", first)
    assert found, f"no task id in the launch text: {first!r}"
    return found.group(1)


def peek_status(result: CallToolResult, task_id: str) -> str:
    """The `status` of a `check_async_tasks` peek (`task_id` given): the pretty JSON
    of the task's details, as the first text block (a reminder may follow it)."""
    assert not result.is_error, texts(result)
    details = json.loads(texts(result)[0])
    assert details["id"] == task_id, details
    return details["status"]


class Transcript:
    """Every tool call of a test and its result, so reminders can be counted across calls."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls: list[tuple[str, dict[str, Any], CallToolResult]] = []

    async def call(self, tool: str, arguments: dict[str, Any], **kwargs: Any) -> CallToolResult:
        result = await self.client.call_tool(tool, arguments, **kwargs)
        self.record(tool, arguments, result)
        return result

    def record(self, tool: str, arguments: dict[str, Any], result: CallToolResult) -> None:
        print(f"{tool}({arguments}) -> isError={result.is_error} {texts(result)!r}")
        where = f"{tool}({arguments})"
        # Reminders ride on tool results as text only: no structuredContent.
        assert result.structured_content is None, f"{where} returned structuredContent"
        assert result.content, f"{where} returned no content"
        assert all(isinstance(block, TextContent) for block in result.content), f"{where}: non-text content"
        blocks = texts(result)
        for i, block in enumerate(blocks):
            if REMINDER_HEADER in block:
                assert i == len(blocks) - 1, f"{where}: the reminder is not the last text block: {blocks!r}"
                assert block.rstrip().endswith("---"), f"{where}: the reminder is not closed by ---: {block!r}"
        self.calls.append((tool, arguments, result))

    def reminders(self) -> list[str]:
        return [block for _, _, result in self.calls for block in texts(result) if REMINDER_HEADER in block]

    def reminder_count(self) -> int:
        return sum(block.count(REMINDER_HEADER) for block in self.reminders())

    def dump(self) -> str:
        return "\n".join(f"{tool}({args}) -> {texts(result)!r}" for tool, args, result in self.calls)



def progress_recorder():
    """A list of progress notifications, and the callback that fills it."""
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    return progress, on_progress



def process_gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie, not yet reaped by its new parent,
    has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


#: How long a wait for an event waits before it fails: a deadline that turns a hang
#: into a failure naming what never happened, never a bound on how fast it happens.
WAIT_DEADLINE = 20.0


def wait_until(condition: Callable[[], Any], what: str, within: float = WAIT_DEADLINE, every: float = 0.02) -> Any:
    """Calls `condition` every `every` seconds until it returns something true, and
    returns that; fails naming `what` when it has not after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: did not happen within {within} s"
        time.sleep(every)


async def wait_until_async(condition: Callable[[], Any], what: str, within: float = WAIT_DEADLINE) -> Any:
    """`wait_until` for async tests: sleeps on the event loop between looks, and
    awaits what `condition` returns when it is awaitable (a call to the server)."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: did not happen within {within} s"
        await anyio.sleep(0.02)


def wait_for_file(path: Path, within: float = WAIT_DEADLINE) -> str:
    """The content of `path` once it exists and is not empty (writers rename it into
    place when done)."""
    wait_until(lambda: path.is_file() and path.read_text().strip(), f"{path} appears", within)
    return path.read_text()


#: How long any one answer may take to arrive.
ANSWER_TIMEOUT = 20.0

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "wire", "version": "0"}},
}


class LineServer:
    """`asynctask mcp` (plain, or a durable front with its own state directory) on
    pipes the test writes raw bytes to and reads lines from."""

    def __init__(self, tmp_path: Path, durable: bool, log: str = "server-stderr.log") -> None:
        self.state = tmp_path / "state"
        self.durable = durable
        args = [str(binary()), "mcp", "--config", str(CONFIG), "--state-dir", str(self.state)]
        if durable:
            args.append("--durable")
        self.stderr = (tmp_path / log).open("w")
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env={**os.environ, "ASYNCTASK_TEST_DIR": str(tmp_path)},
        )
        self.pending = b""

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: Any) -> None:
        self.write(json.dumps(message).encode() + b"\n")

    def line(self, timeout: float = ANSWER_TIMEOUT) -> dict[str, Any]:
        """The next line from the server, as JSON."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            assert left > 0, f"no line within {timeout} s; got {self.pending[:200]!r}"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                assert chunk, "the server closed its stdout"
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def answer(self, id: Any) -> dict[str, Any]:
        """The answer to request `id` (notifications before it are skipped)."""
        while True:
            message = self.line()
            if "method" not in message:
                assert message.get("id") == id, f"an answer to {message.get('id')!r} before the one to {id!r}: {message}"
                return message

    def initialize(self) -> None:
        self.send(INITIALIZE)
        assert "result" in self.answer(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def ping(self, id: int) -> None:
        """The session goes on: a ping is answered."""
        self.send({"jsonrpc": "2.0", "id": id, "method": "ping"})
        assert self.answer(id) == {"jsonrpc": "2.0", "id": id, "result": {}}

    def supervisor_pid(self) -> int:
        done = subprocess.run(
            [str(binary()), "supervisor", "status", "--json", "--config", str(CONFIG), "--state-dir", str(self.state)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        pid = json.loads(done.stdout)["pid"]
        assert pid, "no supervisor runs"
        return pid

    def task(self, task_id: str) -> dict[str, Any]:
        """Task `task_id` as the durable workspace's `supervisor status --json` lists it
        (an empty dict when it lists no such task)."""
        done = subprocess.run(
            [str(binary()), "supervisor", "status", "--json", "--config", str(CONFIG), "--state-dir", str(self.state)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return next((task for task in json.loads(done.stdout)["tasks"] if task["id"] == task_id), {})

    def close(self, stop_supervisor: bool = True) -> None:
        """Closes stdin; the server (or front) exits by itself; a durable workspace's
        supervisor is stopped (unless `stop_supervisor` is false: a client that
        restarts its server)."""
        if self.process.stdin:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            status = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail("the server did not exit after its stdin closed")
        finally:
            if self.durable and stop_supervisor:
                stopped = subprocess.run(
                    [str(binary()), "supervisor", "stop", "--config", str(CONFIG), "--state-dir", str(self.state)],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                assert stopped.returncode == 0, stopped.stderr
            self.stderr.close()
        assert status == 0, f"exit status {status}"
