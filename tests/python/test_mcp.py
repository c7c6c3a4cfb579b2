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
import re
import time
from pathlib import Path

import anyio
import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from helpers import (
    LAUNCH_PREFIX,
    REMINDER_HEADER,
    TOOLS,
    WAIT_SECONDS,
    Transcript,
    assert_group_ends,
    binary,
    connect,
    group_alive,
    launched_id,
    peek_status,
    progress_recorder,
    slow_group,
    texts,
)

pytestmark = pytest.mark.anyio


def test_binary_exists() -> None:
    assert binary().is_file()



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
    """The served tools, with closed object schemas and their annotations."""
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
