"""What each task costs, through a real client: a subagent that prints
`::asynctask::usage` lines reports its usage; the lines never reach the output the
model reads; `check_async_tasks` (list and peek), the completion notification and a
synchronous result show it — plain and durable, where `supervisor status` shows it too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import REMINDER_HEADER, Transcript, binary, connect, launched_id, process_gone, texts
from test_durable import Workspace

pytestmark = pytest.mark.anyio

CONFIG = """
[subagents.coder]
description = "Reports usage while it works and at its end"
command = ["sh", "-c", '''
echo 'reading the code'
echo '::asynctask::usage {"input_tokens":1000,"model":"claude-sonnet-4-5"}'
sleep 0.3
echo 'fixed it'
echo '::asynctask::usage {"input_tokens":1500,"output_tokens":42,"cost_usd":0.0123}'
''']

[subagents.garbled]
description = "Prints a usage line that is not one"
command = ["sh", "-c", "echo done; echo '::asynctask::usage {\\"input_tokens\\": \\"lots\\"}'"]
"""

USAGE = {"input_tokens": 1500, "output_tokens": 42, "cost_usd": 0.0123, "model": "claude-sonnet-4-5"}


def config(tmp_path: Path) -> Path:
    path = tmp_path / "usage.toml"
    path.write_text(CONFIG)
    return path


def notification(reminder: str, task_id: str) -> dict:
    """The completion JSON of `task_id` in a reminder."""
    decoder = json.JSONDecoder()
    at = reminder.index("{")
    while True:
        value, end = decoder.raw_decode(reminder, at)
        if value.get("agent_id") == task_id:
            return value
        at = reminder.index("{", end)


async def test_usage_shows_in_the_listing_the_peek_and_the_notification(mode: str, tmp_path: Path) -> None:
    async with connect(mode, tmp_path, config=config(tmp_path)) as client:
        transcript = Transcript(client)
        task_id = launched_id(await transcript.call("task", {"subagent_name": "coder", "goal_prompt": "fix it", "async": True}))
        waited = await transcript.call("wait_async_tasks", {"task_id_prefixes": [task_id]})
        reminder = texts(waited)[-1]
        assert REMINDER_HEADER in reminder, transcript.dump()
        done = notification(reminder, task_id)
        assert done["final_message"] == "reading the code\nfixed it", done
        assert done["usage"] == USAGE, done
        assert done["elapsed"].endswith("s"), done

        listed = texts(await transcript.call("check_async_tasks", {}))[0]
        assert "- Usage: 1,500 in / 42 out tokens, $0.0123 (1 of 1 tasks reported usage)" in listed, listed
        assert f"[{task_id[:8]}] coder - completed (" in listed, listed
        assert "s, 1,500 in / 42 out tokens, $0.0123)" in listed, listed

        peek = json.loads(texts(await transcript.call("check_async_tasks", {"task_id": task_id}))[0])
        assert peek["usage"] == USAGE, peek
        assert "::asynctask::usage" not in json.dumps(peek), peek


async def test_a_synchronous_result_and_a_bad_usage_line(tmp_path: Path) -> None:
    async with connect("legacy", tmp_path, config=config(tmp_path)) as client:
        transcript = Transcript(client)
        result = await transcript.call("task", {"subagent_name": "coder", "goal_prompt": "fix it"})
        done = json.loads(texts(result)[0])
        assert done["usage"] == USAGE, done
        garbled = json.loads(texts(await transcript.call("task", {"subagent_name": "garbled", "goal_prompt": "x"}))[0])
        assert "usage" not in garbled, garbled
        assert garbled["final_message"].startswith(
            "done\n\n[a usage line could not be read: not a usage object: invalid type: string"
        ), garbled


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    workspace = Workspace(tmp_path / "state")
    yield workspace
    pid = workspace.pid() if workspace.state.is_dir() else None
    stopped = workspace.command("stop")
    assert stopped.returncode == 0, stopped.stderr
    if pid and not process_gone(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"supervisor {pid} still ran after `supervisor stop` (killed now)")


async def test_supervisor_status_shows_usage_and_elapsed_time(tmp_path: Path, workspace: Workspace) -> None:
    async with connect("legacy", tmp_path, *workspace.args(), config=config(tmp_path)) as client:
        transcript = Transcript(client)
        task_id = launched_id(await transcript.call("task", {"subagent_name": "coder", "goal_prompt": "fix it", "async": True}))
        waited = await transcript.call("wait_async_tasks", {"task_id_prefixes": [task_id]})
        assert notification(texts(waited)[-1], task_id)["usage"] == USAGE, transcript.dump()
    status = workspace.status()
    task = next(task for task in status["tasks"] if task["id"] == task_id)
    assert task["usage"] == USAGE, task
    assert task["elapsed_ms"] >= 300, task
    text = subprocess_text(workspace)
    assert "usage:      1,500 in / 42 out tokens, $0.0123 (1 of 1 tasks)" in text, text
    line = next(line for line in text.splitlines() if line.strip().startswith(task_id[:8]))
    assert line.endswith("1,500 in / 42 out tokens, $0.0123, claude-sonnet-4-5"), text


def subprocess_text(workspace: Workspace) -> str:
    """`asynctask supervisor status` as a person reads it (no `--json`)."""
    done = subprocess.run(
        [str(binary()), "supervisor", "status", "--state-dir", str(workspace.state)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
