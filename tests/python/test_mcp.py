"""`asynctask mcp` driven by the official Python MCP client.

Each test starts the built binary (`asynctask mcp --config tests/python/subagents.toml`)
over stdio with `mcp.Client(stdio_client(StdioServerParameters(...)), mode=...)` and
runs once per protocol era:

* ``mode="legacy"``: the ``initialize`` handshake (protocol revisions up to 2025-11-25,
  session-scoped negotiation);
* ``mode="auto"``: the SDK first probes ``server/discover`` at the newest modern revision
  (2026-07-28: no handshake, per-request ``_meta``) and only falls back to ``initialize``
  when the server gives no evidence of speaking it. ``test_protocol_era`` checks that
  "auto" really lands in the modern era against this server, so the two parametrizations
  cover two eras and not the same one twice.

In mcp 2.3.0 ``mode`` is an option of ``mcp.Client`` (the SDK's high-level client, which
builds and drives a ``ClientSession`` over the transport it is given); ``ClientSession``
itself has no such option. ``Client.session`` is that ``ClientSession``.

Reminders ("---\\nSystem Note: Async Task Status ... ---") ride as the last text block of
whichever tool result comes next, so the tests collect every text block of every result
(``Transcript``) and count them across calls, never assuming which call carries one.

The binary is ``$ASYNCTASK_BIN`` (``cargo xtask ci`` sets it) or ``target/debug/asynctask``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CONFIG = HERE / "subagents.toml"

REMINDER_HEADER = "---\nSystem Note: Async Task Status"
LAUNCH_PREFIX = "Async task launched: subagent 'quick'"
TOOLS = {"task", "check_async_tasks", "message_async_task", "wait_async_tasks", "end_async_task"}

# Time limits, all on the real clock. The `quick` subagent answers after 0.3 s; a test
# normally takes about a second (the progress test 6 s: the server reports every 5 s).
TEST_DEADLINE = 15.0  # hard limit per test, connect and shutdown included
CALL_TIMEOUT = 12.0  # client-side read timeout of any one request
WAIT_SECONDS = 8  # `timeout_seconds` of a wait_async_tasks call that must not time out

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    """The SDK's `Client(mode=...)`: the legacy initialize handshake, or discover-first."""
    return request.param


def binary() -> Path:
    path = Path(os.environ.get("ASYNCTASK_BIN") or REPO / "target" / "debug" / "asynctask")
    if not path.is_file():
        pytest.fail(f"no asynctask binary at {path}: run `cargo build -p asynctask-cli` or set ASYNCTASK_BIN")
    return path


@asynccontextmanager
async def connect(mode: str, tmp_path: Path, *extra_args: str) -> AsyncIterator[Client]:
    """A connected client of a fresh server; the server's stderr is printed afterwards
    (pytest shows it when the test fails). On a clean exit it also checks that the
    server ended by itself once its stdin closed (on EOF it cancels everything, waits
    for the processes and exits), without a panic."""
    params = StdioServerParameters(
        command=str(binary()),
        args=["mcp", "--config", str(CONFIG), *extra_args],
        env={"ASYNCTASK_TEST_DIR": str(tmp_path)},  # where `slow` leaves its pid
        cwd=str(REPO),
    )
    log = tmp_path / "server-stderr.log"
    with log.open("w") as errlog:
        try:
            with anyio.fail_after(TEST_DEADLINE):
                transport = stdio_client(params, errlog=errlog)
                async with Client(transport, mode=mode, read_timeout_seconds=CALL_TIMEOUT) as client:
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
    pid_file = tmp_path / f"slow-{task_id}.pid"
    deadline = time.monotonic() + 5
    while not (pid_file.is_file() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, f"`slow` never wrote {pid_file}"
        time.sleep(0.02)
    return int(pid_file.read_text())


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


async def assert_group_ends(pgid: int, within: float = 4.0) -> None:
    """The subagent's whole process group ends (SIGTERM, SIGKILL after a 2 s grace)."""
    deadline = time.monotonic() + within
    while group_alive(pgid):
        assert time.monotonic() < deadline, f"process group {pgid} of the subagent still runs after {within} s"
        await anyio.sleep(0.05)


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


def test_binary_exists() -> None:
    assert binary().is_file()



def progress_recorder():
    """A list of progress notifications, and the callback that fills it."""
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    return progress, on_progress

async def test_protocol_era(mode: str, tmp_path: Path) -> None:
    """"legacy" speaks the initialize handshake; "auto" reaches the modern era (server/discover)."""
    async with connect(mode, tmp_path) as client:
        if mode == "legacy":
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            assert client.session.initialize_result is not None
        else:
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS, (
                f"mode='auto' fell back to the handshake era ({client.protocol_version}): "
                "the server does not answer server/discover"
            )
        # The instructions point the model at wait_async_tasks.
        assert "wait_async_tasks" in (client.instructions or ""), client.instructions


async def test_list_tools(mode: str, tmp_path: Path) -> None:
    """The four tools, with closed object schemas and their annotations."""
    async with connect(mode, tmp_path) as client:
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert set(tools) == TOOLS, f"tools listed: {sorted(tools)} (todo_pause must not be exposed)"
        for name, tool in tools.items():
            assert tool.input_schema.get("type") == "object", (name, tool.input_schema)
            assert tool.input_schema.get("additionalProperties") is False, (name, tool.input_schema)
            assert tool.annotations is not None, f"{name} has no annotations"
        assert tools["check_async_tasks"].annotations.read_only_hint is True
        assert tools["wait_async_tasks"].annotations.read_only_hint is True
        assert tools["task"].annotations.destructive_hint is True
        assert tools["end_async_task"].annotations.destructive_hint is True
        assert tools["end_async_task"].annotations.idempotent_hint is True
        assert {"subagent_name", "goal_prompt", "async"} <= set(tools["task"].input_schema.get("properties", {}))
        assert {"task_id_prefixes", "timeout_seconds"} <= set(
            tools["wait_async_tasks"].input_schema.get("properties", {})
        )
        assert "task_id" in tools["end_async_task"].input_schema.get("properties", {})
        assert set(tools["end_async_task"].input_schema.get("required", [])) == {"task_id"}


async def test_async_task_then_wait_delivers_the_reminder_once(mode: str, tmp_path: Path) -> None:
    """An async launch returns at once; wait_async_tasks (with a progress token) returns
    when it finishes; its completion reaches the client exactly once."""
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        started = time.monotonic()
        launch = await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "hi", "async": True})
        assert time.monotonic() - started < 2.0, "the async launch did not return promptly"
        assert not launch.is_error
        assert texts(launch)[0].startswith(LAUNCH_PREFIX), texts(launch)
        task_id = launched_id(launch)

        progress, on_progress = progress_recorder()

        started = time.monotonic()
        waited = await transcript.call(
            "wait_async_tasks", {"timeout_seconds": WAIT_SECONDS}, progress_callback=on_progress
        )
        elapsed = time.monotonic() - started
        assert not waited.is_error
        assert elapsed < WAIT_SECONDS - 1, f"wait_async_tasks ran out its timeout ({elapsed:.1f} s) instead of returning"
        # The wait ends before the first progress interval, so `progress` is
        # usually empty here: the callback only shows that a request carrying a
        # progress token is served. test_wait_reports_progress_and_times_out
        # checks the notifications themselves.
        print(f"progress notifications: {progress}")

        # One more call: a reminder may ride on any later result, and none may repeat.
        await transcript.call("check_async_tasks", {})
        assert transcript.reminder_count() == 1, transcript.dump()
        (reminder,) = transcript.reminders()
        assert task_id in reminder, reminder
        assert "quick done" in reminder, reminder


async def test_abandoned_wait_loses_no_reminder(mode: str, tmp_path: Path) -> None:
    """A wait the client abandons after 50 ms (notifications/cancelled) while the task
    runs neither cancels the task nor consumes its reminder: the next call carries it,
    exactly once."""
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launch = await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "hi", "async": True})
        assert texts(launch)[0].startswith(LAUNCH_PREFIX), texts(launch)
        task_id = launched_id(launch)

        # Leaving the scope cancels the request: the SDK sends notifications/cancelled.
        with anyio.move_on_after(0.05) as abandoned:
            early = await client.call_tool("wait_async_tasks", {"timeout_seconds": WAIT_SECONDS})
            transcript.record("wait_async_tasks", {"timeout_seconds": WAIT_SECONDS}, early)
        assert abandoned.cancelled_caught, "wait_async_tasks returned within 50 ms while the task was running"

        # Let the task finish while nobody is waiting (a server that ignored the cancel
        # would now answer the abandoned call, which the client drops).
        await anyio.sleep(1.0)
        nxt = await transcript.call("wait_async_tasks", {"task_id_prefixes": [task_id], "timeout_seconds": WAIT_SECONDS})
        assert not nxt.is_error
        assert any(REMINDER_HEADER in block for block in texts(nxt)), (
            f"the call after the abandoned wait carries no reminder:\n{transcript.dump()}"
        )
        await transcript.call("check_async_tasks", {})
        assert transcript.reminder_count() == 1, transcript.dump()
        (reminder,) = transcript.reminders()
        assert task_id in reminder, reminder
        assert "quick done" in reminder, f"cancelling the wait must not cancel the task: {reminder}"

        peek = await transcript.call("check_async_tasks", {"task_id": task_id})
        assert peek_status(peek, task_id) == "completed"


async def test_bad_parameter_is_a_tool_error(mode: str, tmp_path: Path) -> None:
    """A wrong type is a tool result with isError, naming the field (not a protocol error)."""
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        result = await transcript.call("task", {"subagent_name": 5, "goal_prompt": "x"})
        assert result.is_error is True
        assert "subagent_name" in texts(result)[0], texts(result)

        unknown = await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "x", "bogus": 1})
        assert unknown.is_error is True
        assert "bogus" in texts(unknown)[0], texts(unknown)
        assert transcript.reminder_count() == 0, transcript.dump()


async def test_end_async_task_cancels_a_running_task(mode: str, tmp_path: Path) -> None:
    """end_async_task on a running task; the peek then shows it cancelled, and the
    model is told of the cancellation exactly once."""
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launch = await transcript.call("task", {"subagent_name": "slow", "goal_prompt": "x", "async": True})
        assert texts(launch)[0].startswith("Async task launched: subagent 'slow'"), texts(launch)
        task_id = launched_id(launch)

        running = await transcript.call("check_async_tasks", {"task_id": task_id})
        assert peek_status(running, task_id) == "running"
        group = slow_group(tmp_path, task_id)
        assert group_alive(group)

        ended = await transcript.call("end_async_task", {"task_id": task_id})
        assert not ended.is_error, texts(ended)
        assert f"Cancelled task: {task_id}" in texts(ended)[0], texts(ended)
        await assert_group_ends(group)

        peek = await transcript.call("check_async_tasks", {"task_id": task_id})
        assert peek_status(peek, task_id) == "cancelled"

        # A cancelled task is delivered like any other, once.
        await transcript.call("check_async_tasks", {})
        assert transcript.reminder_count() == 1, transcript.dump()
        (reminder,) = transcript.reminders()
        assert task_id in reminder and '"cancelled"' in reminder, reminder


async def test_failed_task_is_reported_with_its_stderr(mode: str, tmp_path: Path) -> None:
    """A subagent that exits 1: the reminder says failed and carries the end of its stderr."""
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launch = await transcript.call("task", {"subagent_name": "fails", "goal_prompt": "x", "async": True})
        task_id = launched_id(launch)
        waited = await transcript.call(
            "wait_async_tasks", {"task_id_prefixes": [task_id[:8]], "timeout_seconds": WAIT_SECONDS}
        )
        assert not waited.is_error
        await transcript.call("check_async_tasks", {})
        assert transcript.reminder_count() == 1, transcript.dump()
        (reminder,) = transcript.reminders()
        assert task_id in reminder and '"failed"' in reminder, reminder
        assert "the widget is broken" in reminder, reminder


async def test_long_synchronous_task_is_detached(mode: str, tmp_path: Path) -> None:
    """`--sync-detach-after 1`: a synchronous call still running after 1 s answers that
    the task goes on in the background, and the task keeps running."""
    async with connect(mode, tmp_path, "--sync-detach-after", "1") as client:
        transcript = Transcript(client)
        started = time.monotonic()
        result = await transcript.call("task", {"subagent_name": "slow", "goal_prompt": "x"})
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 6.0, f"the synchronous call answered after {elapsed:.1f} s"
        assert not result.is_error, texts(result)
        assert "running" in texts(result)[0].lower(), texts(result)

        listing = await transcript.call("check_async_tasks", {})
        assert "- Running: 1" in texts(listing)[0], texts(listing)
        task_id = re.search(r"[0-9a-f]{8}-[0-9a-f-]+", texts(result)[0])
        assert task_id, f"no task id in {texts(result)!r}"
        group = slow_group(tmp_path, task_id.group(0))
        assert group_alive(group)
    # Closing the client ends the server, which ends the still running subagent.
    await assert_group_ends(group)


async def test_wait_reports_progress_and_times_out(mode: str, tmp_path: Path) -> None:
    """A wait that outlasts the server's progress interval (5 s, the default
    `progress_interval` of `McpServerOptions`) gets notifications/progress for its
    token; when its timeout_seconds run out it says what still runs, and the task
    goes on."""
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launch = await transcript.call("task", {"subagent_name": "slow", "goal_prompt": "x", "async": True})
        task_id = launched_id(launch)

        progress, on_progress = progress_recorder()

        started = time.monotonic()
        waited = await transcript.call(
            "wait_async_tasks", {"task_id_prefixes": [task_id], "timeout_seconds": 6}, progress_callback=on_progress
        )
        elapsed = time.monotonic() - started
        print(f"progress notifications: {progress}")
        assert not waited.is_error, texts(waited)
        assert 5.5 <= elapsed < 9.0, f"a 6 s wait returned after {elapsed:.1f} s"
        assert "running" in texts(waited)[0].lower(), texts(waited)
        assert progress, "no notifications/progress during a 6 s wait"
        values = [value for value, _, _ in progress]
        assert values == sorted(set(values)), f"progress must increase: {values}"
        assert peek_status(await transcript.call("check_async_tasks", {"task_id": task_id}), task_id) == "running"
        assert transcript.reminder_count() == 0, transcript.dump()
        group = slow_group(tmp_path, task_id)
    # Closing the client ends the server, which ends the still running subagent.
    await assert_group_ends(group)
