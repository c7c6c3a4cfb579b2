"""A queue behind the running limit, through a real client: launches past the
limit wait in order, start as slots free, and every result is delivered once."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from helpers import WAIT_SECONDS, Transcript, binary, connect, launched_id, texts

pytestmark = pytest.mark.anyio

QUEUED_PREFIX = "Async task queued: subagent 'quick'"


async def test_a_queue_of_20_behind_a_limit_of_2_starts_in_order_and_delivers_every_result_once(
    mode: str, tmp_path: Path
) -> None:
    await queue_of_20_behind_2(mode, tmp_path, [], tmp_path / "server-stderr.log")


async def test_a_durable_queue_of_20_behind_a_limit_of_2_starts_in_order_and_delivers_every_result_once(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    try:
        await queue_of_20_behind_2("legacy", tmp_path, ["--durable", "--state-dir", str(state)], state / "supervisor.log")
    finally:
        stopped = subprocess.run(
            [str(binary()), "supervisor", "stop", "--state-dir", str(state)], capture_output=True, text=True, timeout=30
        )
        assert stopped.returncode == 0, stopped.stderr


async def queue_of_20_behind_2(mode: str, tmp_path: Path, extra: list[str], log_file: Path) -> None:
    async with connect(mode, tmp_path, "--max-async-tasks", "2", "--max-queued-tasks", "20", *extra) as client:
        transcript = Transcript(client)
        launched: list[str] = []
        for n in range(22):
            result = await transcript.call("task", {"subagent_name": "quick", "goal_prompt": f"job {n}", "async": True})
            assert not result.is_error, texts(result)
            launched.append(launched_id(result))
            if n >= 2:
                # Every launch past the limit waits, the queue's position said.
                first = texts(result)[0]
                assert first.startswith(QUEUED_PREFIX), first
                assert re.search(r"waits in the queue \(position \d+\)", first), first

        refused = await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "one too many", "async": True})
        assert refused.is_error
        assert texts(refused)[0].startswith(
            "Max async tasks (2) reached, and the queue of 20 waiting tasks is full."
        ), texts(refused)

        def delivered() -> Counter[str]:
            return Counter(
                agent for block in transcript.reminders() for agent in re.findall(r'"agent_id": "([^"]+)"', block)
            )

        for _ in range(40):
            if set(delivered()) >= set(launched):
                break
            waited = await transcript.call("wait_async_tasks", {"timeout_seconds": WAIT_SECONDS})
            assert not waited.is_error, texts(waited)
        # One more call: a result delivered twice would ride on it.
        await transcript.call("check_async_tasks", {})
        every = delivered()
        assert set(every) == set(launched), f"missing: {set(launched) - set(every)}\n{transcript.dump()}"
        assert all(count == 1 for count in every.values()), f"delivered twice: {every}"

        # They started in the order they were launched (the server logs each
        # start from the queue; delivered tasks leave the history, so peeking
        # them all is not an option).
        log = log_file.read_text()
        starts = re.findall(r"task (\w{8}) \(quick\) started from the queue", log)
        assert starts == [task_id[:8] for task_id in launched[2:]], log
