"""What a model sees of subprocess subagents through `asynctask mcp`: the catalog of
subagents, bounded results with the whole output in a file, a running task's latest
output, variables a subagent emits, and messages sent to a running task.

These tests use one protocol era (the initialize handshake): what they check does
not depend on it (test_mcp.py runs the protocol-level tests in both).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import anyio
import pytest

from helpers import (
    REMINDER_HEADER,
    WAIT_SECONDS,
    Transcript,
    connect,
    launched_id,
    progress_recorder,
    texts,
    wait_until_async,
)

pytestmark = pytest.mark.anyio

MODE = "legacy"

# The subagents of tests/python/subagents.toml, sorted by name.
SUBAGENTS = [
    "asker",
    "badvars",
    "big",
    "chatty",
    "depth",
    "fails",
    "impatient",
    "listener",
    "orphans",
    "quick",
    "slow",
    "stamp",
    "stubborn",
    "vars",
    "where",
]


def completion(text: str) -> dict:
    """The completion JSON a synchronous `task` answers with."""
    return json.loads(text)


async def test_the_task_tool_lists_the_subagents_and_refuses_others(tmp_path: Path) -> None:
    """The catalog: the description lists each subagent, `subagent_name` is an enum of
    their names, and an unknown name is refused before anything runs or is registered."""
    async with connect(MODE, tmp_path) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        task = listed["task"]
        assert task.input_schema["properties"]["subagent_name"]["enum"] == SUBAGENTS
        assert "Available subagents (subagent_name):" in task.description, task.description
        assert "- chatty: Prints a numbered line every 0.1 s for 20 s" in task.description
        assert "- listener: Reads its goal and two messages on stdin, then reports them (reads messages" in (
            task.description
        )

        transcript = Transcript(client)
        for run_async in (True, False):
            refused = await transcript.call(
                "task", {"subagent_name": "quik", "goal_prompt": "x", "async": run_async}
            )
            assert refused.is_error is True
            assert texts(refused)[0] == (
                "Invalid parameters for task: subagent_name: unknown subagent 'quik'; "
                f"the available subagents are: {', '.join(SUBAGENTS)}"
            )
        listing = await transcript.call("check_async_tasks", {})
        assert texts(listing) == ["No async tasks."], "a refused launch registers nothing"


async def test_a_long_output_is_cut_and_kept_whole_in_a_file(tmp_path: Path) -> None:
    """Result hygiene: at most the inline budget (10,000 characters) of stdout goes in the
    result, as head and tail around a marker naming the file with the whole output."""
    state = tmp_path / "state"
    async with connect(MODE, tmp_path, "--state-dir", str(state)) as client:
        transcript = Transcript(client)
        result = await transcript.call("task", {"subagent_name": "big", "goal_prompt": "x"})
        assert not result.is_error, texts(result)
        message = completion(texts(result)[0])["final_message"]
        marker = re.search(
            r"\[\.\.\. (\d+) characters omitted; the whole output \((\d+) bytes\) is in (\S+) \.\.\.\]",
            message,
        )
        assert marker, message[:300]
        omitted, size, path = int(marker.group(1)), int(marker.group(2)), Path(marker.group(3))
        assert path.is_absolute() and path.parent == state / "outputs", path
        whole = path.read_text()
        assert len(whole.encode()) == size == 66_008
        assert whole.endswith("the end\n")
        # The message ends with a line that names the file again.
        body, pointer = message.split("\n\n[whole output: ")
        assert pointer == f"{path} (66008 bytes)]", pointer
        head, tail = body.split(f"\n{marker.group(0)}\n")
        assert head.startswith("0123456789\n0123456789") and tail.endswith("the end")
        # The head and the tail (with the last newline, which the result trims) cost at
        # most 10,000 characters as the model reads them, JSON-escaped (a line break
        # costs 2); every other character is omitted.
        kept = head + tail + "\n"
        escaped = len(json.dumps(kept)) - 2
        assert 9_900 < escaped <= 10_000, escaped
        assert omitted == 66_008 - len(kept)


async def test_the_inline_budget_option_sets_how_much_a_result_holds(tmp_path: Path) -> None:
    """`--inline-budget 2000`: 2,000 characters of stdout in the result, the rest in the
    file its last line names."""
    async with connect(MODE, tmp_path, "--inline-budget", "2000") as client:
        transcript = Transcript(client)
        result = await transcript.call("task", {"subagent_name": "big", "goal_prompt": "x"})
        assert not result.is_error, texts(result)
        message = completion(texts(result)[0])["final_message"]
        marker = re.search(r"\[\.\.\. (\d+) characters omitted; the whole output \(66008 bytes\) is in (\S+) \.\.\.\]", message)
        assert marker, message[:300]
        # The head and the tail cost at most 2,000 characters as the model reads them
        # (JSON-escaped: a line break costs 2); the marker's own two line breaks come
        # on top.
        kept = message.replace(marker.group(0), "").split("\n\n[whole output: ")[0]
        escaped = len(json.dumps(kept)) - 2
        assert 1_900 < escaped <= 2_000 + 4, escaped
        assert int(marker.group(1)) > 66_008 - 2_000
        assert message.endswith(f"[whole output: {marker.group(2)} (66008 bytes)]"), message[-200:]


async def test_a_running_task_shows_its_latest_output(tmp_path: Path) -> None:
    """Live output: a peek at a running task shows its elapsed time, the last lines of
    its output and the file; progress notifications on a long wait carry the latest line."""
    async with connect(MODE, tmp_path) as client:
        transcript = Transcript(client)
        task_id = launched_id(
            await transcript.call("task", {"subagent_name": "chatty", "goal_prompt": "x", "async": True})
        )
        # Peeks until the subagent has printed (a peek at a running task
        # delivers nothing, so looking again changes nothing).
        async def printed() -> dict | None:
            peek = await transcript.call("check_async_tasks", {"task_id": task_id})
            details = json.loads(texts(peek)[0])
            return details if details.get("recentOutput") else None

        details = await wait_until_async(printed, "the subagent's output in a peek")
        assert details["status"] == "running"
        assert re.fullmatch(r"\d+s", details["duration"]), details
        lines = details["recentOutput"]
        assert 1 <= len(lines) <= 10 and all(re.fullmatch(r"line \d+", line) for line in lines), lines
        assert Path(details["outputFile"]).is_file(), details
        assert details["outputBytes"] > 0

        progress, on_progress = progress_recorder()
        await transcript.call(
            "wait_async_tasks", {"task_id_prefixes": [task_id], "timeout_seconds": 6}, progress_callback=on_progress
        )
        print(f"progress notifications: {progress}")
        messages = [message for _, _, message in progress if message]
        assert messages, "no progress notification during a 6 s wait"
        assert re.fullmatch(rf"{task_id[:8]}: line \d+", messages[-1]), messages

        ended = await transcript.call("end_async_task", {"task_id": task_id})
        assert not ended.is_error, texts(ended)


async def test_a_subagent_gets_its_output_spec_and_tools_and_emits_variables(tmp_path: Path) -> None:
    """Structured outputs: $ASYNCTASK_OUTPUT_SPEC and $ASYNCTASK_TOOLS carry what the model
    gave; a JSON object written to $ASYNCTASK_VARS_FILE becomes emitted_vars; a bad file
    fails the task with a clear text."""
    async with connect(MODE, tmp_path) as client:
        transcript = Transcript(client)
        result = await transcript.call(
            "task",
            {
                "subagent_name": "vars",
                "goal_prompt": "x",
                "output_spec": [{"name": "answer", "description": "the answer"}],
                "tool_whitelist": ["grep", "read_file"],
            },
        )
        assert not result.is_error, texts(result)
        done = completion(texts(result)[0])
        assert done["emitted_vars"] == {"answer": "42", "city": "Zürich"}
        spec, tools = done["final_message"].split("\n")
        assert json.loads(spec.removeprefix("spec=")) == [{"name": "answer", "description": "the answer"}]
        assert json.loads(tools.removeprefix("tools=")) == ["grep", "read_file"]

        bad = await transcript.call("task", {"subagent_name": "badvars", "goal_prompt": "x"})
        assert bad.is_error is True
        error = completion(texts(bad)[0])["error"]
        assert re.fullmatch(
            r"subagent 'badvars' wrote a bad variables file /\S+\.vars\.json: not a JSON object", error
        ), error


async def test_a_running_task_takes_messages_in_order(tmp_path: Path) -> None:
    """Steering: a `jsonl` subagent reads its goal, then each message, as JSON lines, and
    reports the two it received in its result."""
    async with connect(MODE, tmp_path) as client:
        transcript = Transcript(client)
        task_id = launched_id(
            await transcript.call("task", {"subagent_name": "listener", "goal_prompt": "count", "async": True})
        )
        for text in ("only the io tests", "stop after the first failure"):
            sent = await transcript.call("message_async_task", {"task_id": task_id[:8], "message": text})
            assert not sent.is_error, texts(sent)
            assert texts(sent)[0].startswith(f"Message queued for async task {task_id}"), texts(sent)
        await transcript.call("wait_async_tasks", {"task_id_prefixes": [task_id], "timeout_seconds": WAIT_SECONDS})
        (reminder,) = transcript.reminders()
        heard = re.search(r'"final_message": "heard: (.*)"', reminder)
        assert heard, reminder
        first, second = (json.loads(part.replace('\\"', '"')) for part in heard.group(1).split(" | "))
        assert first == {"type": "message", "text": "only the io tests"}
        assert second == {"type": "message", "text": "stop after the first failure"}


async def test_messages_that_cannot_be_delivered_are_clear_errors(tmp_path: Path) -> None:
    """A message to a finished task, to an unknown id, or to a subagent whose stdin takes
    only its goal is a tool error that says why and what to do instead."""
    async with connect(MODE, tmp_path) as client:
        transcript = Transcript(client)
        quick = launched_id(
            await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "x", "async": True})
        )
        await transcript.call("wait_async_tasks", {"task_id_prefixes": [quick], "timeout_seconds": WAIT_SECONDS})
        finished = await transcript.call("message_async_task", {"task_id": quick, "message": "hello"})
        assert finished.is_error is True
        assert texts(finished)[0] == (
            f"Async task {quick} (subagent 'quick') is already completed: its subagent reads no more "
            "messages. To act on what you wanted to say, launch a new task and give it this task's "
            "result as context."
        )

        unknown = await transcript.call("message_async_task", {"task_id": "ffffffff", "message": "hello"})
        assert unknown.is_error is True
        assert texts(unknown)[0] == "No async task found with ID or prefix 'ffffffff'."

        slow = launched_id(
            await transcript.call("task", {"subagent_name": "slow", "goal_prompt": "x", "async": True})
        )
        deaf = await transcript.call("message_async_task", {"task_id": slow, "message": "hello"})
        assert deaf.is_error is True
        assert texts(deaf)[0].startswith(
            f"Subagent 'slow' (async task {slow}) does not take messages while it runs."
        ), texts(deaf)
        await transcript.call("end_async_task", {"task_id": slow})
