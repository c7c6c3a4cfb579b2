"""Caps beyond concurrency, through a real client: a session's launch budget, and
the nesting depth a server inside a subagent inherits from `$ASYNCTASK_DEPTH` —
plain and durable (where the front tells the supervisor its depth)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from helpers import CONFIG, Transcript, binary, connect, texts

pytestmark = pytest.mark.anyio

LAUNCH = {"subagent_name": "quick", "goal_prompt": "x"}


async def test_a_session_past_its_launch_cap_is_refused(mode: str, tmp_path: Path) -> None:
    async with connect(mode, tmp_path, "--max-launches-per-session", "2") as client:
        transcript = Transcript(client)
        first = await transcript.call("task", {**LAUNCH, "async": True})
        second = await transcript.call("task", LAUNCH)  # synchronous runs count too
        assert not first.is_error and not second.is_error, transcript.dump()
        refused = await transcript.call("task", {**LAUNCH, "async": True})
        assert refused.is_error
        assert texts(refused)[0] == (
            "Launch limit reached: this session has launched 2 subagents, the most one session may. "
            "Work with the results you have, or ask the user to start a new session or raise the limit."
        ), texts(refused)


async def test_subagents_run_one_deeper_and_no_deeper_than_the_cap(mode: str, tmp_path: Path) -> None:
    # This server runs as if inside a subagent at depth 1: its subagents run at 2.
    async with connect(mode, tmp_path, "--max-depth", "2", env={"ASYNCTASK_DEPTH": "1"}) as client:
        result = await Transcript(client).call("task", {"subagent_name": "depth", "goal_prompt": "x"})
        assert not result.is_error, texts(result)
        assert "depth=2" in texts(result)[0], texts(result)
    async with connect(mode, tmp_path, "--max-depth", "2", env={"ASYNCTASK_DEPTH": "2"}) as client:
        refused = await Transcript(client).call("task", {"subagent_name": "depth", "goal_prompt": "x"})
        assert refused.is_error
        assert texts(refused)[0].startswith(
            "Nesting limit reached: this session runs inside a subagent at depth 2, and subagents may "
            "nest at most 2 deep."
        ), texts(refused)


async def test_a_durable_session_brings_its_depth_and_its_own_launch_budget(tmp_path: Path) -> None:
    state = tmp_path / "state"
    durable = ["--durable", "--state-dir", str(state), "--max-depth", "2", "--max-launches-per-session", "1"]
    try:
        # The first front starts the supervisor at depth 0; the second comes from
        # inside a subagent at depth 2 and is refused, whatever the supervisor's own.
        async with connect("legacy", tmp_path, *durable) as client:
            result = await Transcript(client).call("task", {"subagent_name": "depth", "goal_prompt": "x"})
            assert "depth=1" in texts(result)[0], texts(result)
            again = await Transcript(client).call("task", {"subagent_name": "depth", "goal_prompt": "x"})
            assert texts(again)[0].startswith("Launch limit reached"), texts(again)
        async with connect("legacy", tmp_path, *durable, env={"ASYNCTASK_DEPTH": "2"}) as client:
            refused = await Transcript(client).call("task", {"subagent_name": "depth", "goal_prompt": "x"})
            assert refused.is_error
            assert re.match(r"Nesting limit reached: .* at depth 2,", texts(refused)[0]), texts(refused)
    finally:
        subprocess.run(
            [str(binary()), "supervisor", "stop", "--config", str(CONFIG), "--state-dir", str(state)],
            capture_output=True,
            timeout=30,
            check=False,
        )
