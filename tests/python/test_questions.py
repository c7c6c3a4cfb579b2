"""Questions from the background, through a real client without elicitation: a
`stdin = "jsonl"` subagent asks through `$ASYNCTASK_QUESTIONS`; the question rides
once in a System Note (and shows in `check_async_tasks`); `answer_async_task`
answers it, exactly once; the subagent reads the answer on its stdin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio

import pytest

from helpers import Transcript, binary, connect, launched_id, texts

pytestmark = pytest.mark.anyio

NOTICE = "asks, and waits for your answer:\nDeploy to production too?\nChoices: yes | no"


async def wait_for_question(transcript: Transcript) -> str:
    """Waits (wait_async_tasks, which wakes when a question is asked) until a
    System Note carries the question. A subagent that asks at once may have
    its question ride on the launch's own response: every response so far
    counts, not only the waits'. The loop's bound only turns a hang into a
    failure."""
    for _ in range(20):
        for block in transcript.reminders():
            if NOTICE in block:
                return block
        waited = await transcript.call("wait_async_tasks", {"timeout_seconds": 5})
        assert not waited.is_error, texts(waited)
    raise AssertionError(f"no question arrived\n{transcript.dump()}")


async def wait_for_result(transcript: Transcript, task_id: str) -> str:
    for _ in range(20):
        for block in transcript.reminders():
            if '"agent_id": "' + task_id in block:
                return block
        await transcript.call("wait_async_tasks", {"timeout_seconds": 5})
    raise AssertionError(f"no result for {task_id}\n{transcript.dump()}")


async def test_a_question_rides_once_and_its_answer_reaches_the_subagent(mode: str, tmp_path: Path) -> None:
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
        task_id = launched_id(launched)
        note = await wait_for_question(transcript)
        assert f"Async task `{task_id[:8]}` (asker) {NOTICE}" in note, note
        assert f'Answer with answer_async_task (task_id: "{task_id[:8]}"' in note, note

        # Shown once: the next response carries it no more, but the peek does.
        peek = await transcript.call("check_async_tasks", {"task_id": task_id})
        details = json.loads(texts(peek)[0])
        assert details["status"] == "running", details
        assert details["question"] == {"text": "Deploy to production too?", "choices": ["yes", "no"]}, details
        assert not any(NOTICE in block for block in texts(peek)), texts(peek)
        listing = await transcript.call("check_async_tasks", {})
        assert "waiting for an answer to its question" in texts(listing)[0], texts(listing)

        answered = await transcript.call("answer_async_task", {"task_id": task_id[:8], "answer": "no"})
        assert not answered.is_error, texts(answered)
        assert texts(answered)[0].startswith(f"Answer sent to async task {task_id}"), texts(answered)
        again = await transcript.call("answer_async_task", {"task_id": task_id, "answer": "yes"})
        assert again.is_error, texts(again)
        assert "is not waiting for an answer" in texts(again)[0] or "has already finished" in texts(again)[0]

        result = await wait_for_result(transcript, task_id)
        assert 'answer: {\\"type\\":\\"answer\\",\\"id\\":\\"q1\\",\\"status\\":\\"answered\\",\\"text\\":\\"no\\"}' in result, result
        assert sum(NOTICE in block for block in transcript.reminders()) == 1, transcript.dump()


async def test_a_declined_question_is_an_answer_and_a_bad_answer_is_refused(mode: str, tmp_path: Path) -> None:
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
        task_id = launched_id(launched)
        await wait_for_question(transcript)
        for bad in ({"task_id": task_id}, {"task_id": task_id, "answer": " "}, {"task_id": task_id, "answer": "x", "decline": True}):
            refused = await transcript.call("answer_async_task", bad)
            assert refused.is_error, texts(refused)
            assert texts(refused)[0].startswith("Invalid parameters for answer_async_task: "), texts(refused)
        declined = await transcript.call("answer_async_task", {"task_id": task_id, "decline": True})
        assert texts(declined)[0].startswith(f"Async task {task_id} (subagent 'asker') was told you declined"), texts(declined)
        result = await wait_for_result(transcript, task_id)
        assert '\\"status\\":\\"declined\\"' in result, result


async def test_a_question_whose_task_ends_is_withdrawn(mode: str, tmp_path: Path) -> None:
    async with connect(mode, tmp_path) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
        task_id = launched_id(launched)
        await wait_for_question(transcript)
        ended = await transcript.call("end_async_task", {"task_id": task_id})
        assert not ended.is_error, texts(ended)
        late = await transcript.call("answer_async_task", {"task_id": task_id, "answer": "yes"})
        assert late.is_error
        assert "has already finished (cancelled)" in texts(late)[0], texts(late)
        peek = await transcript.call("check_async_tasks", {"task_id": task_id})
        assert "question" not in json.loads(texts(peek)[0])


async def test_a_client_with_elicitation_answers_in_a_form(tmp_path: Path) -> None:
    """A client that declares elicitation (initialize handshake) is asked in a
    form with the choices; its choice reaches the subagent, and no System Note
    carries the question."""
    from mcp_types import ElicitRequestParams, ElicitResult

    asked: list[ElicitRequestParams] = []

    async def answer(_context: object, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"answer": "yes"})

    async with connect("legacy", tmp_path, elicitation_callback=answer) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
        task_id = launched_id(launched)
        result = await wait_for_result(transcript, task_id)
        assert '\\"status\\":\\"answered\\",\\"text\\":\\"yes\\"' in result, result
        assert len(asked) == 1, asked
        form = asked[0].model_dump(by_alias=True, exclude_none=True)
        assert form["message"] == f"Background task {task_id[:8]} (asker) asks:\nDeploy to production too?", form
        assert form["requestedSchema"]["properties"]["answer"]["enum"] == ["yes", "no"], form
        assert not any(NOTICE in block for block in transcript.reminders()), transcript.dump()


async def test_a_declined_form_is_a_declined_answer(tmp_path: Path) -> None:
    from mcp_types import ElicitRequestParams, ElicitResult

    async def decline(_context: object, _params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    async with connect("legacy", tmp_path, elicitation_callback=decline) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
        task_id = launched_id(launched)
        result = await wait_for_result(transcript, task_id)
        assert '\\"status\\":\\"declined\\"' in result, result


async def test_a_form_the_client_fails_sends_the_question_to_the_model(tmp_path: Path) -> None:
    from mcp_types import ErrorData, ElicitRequestParams

    async def fail(_context: object, _params: ElicitRequestParams) -> ErrorData:
        return ErrorData(code=-32603, message="no forms here after all")

    async with connect("legacy", tmp_path, elicitation_callback=fail) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
        task_id = launched_id(launched)
        await wait_for_question(transcript)
        answered = await transcript.call("answer_async_task", {"task_id": task_id, "answer": "no"})
        assert not answered.is_error, texts(answered)
        result = await wait_for_result(transcript, task_id)
        assert '\\"status\\":\\"answered\\",\\"text\\":\\"no\\"' in result, result


async def test_a_question_that_times_out_withdraws_its_form(tmp_path: Path) -> None:
    """The subagent waits 1 s: it reads `timed_out`, and the form the client still
    shows is cancelled. The form is never answered: it waits until the server
    cancels it (the test's deadlines only turn a hang into a failure)."""
    from mcp_types import ElicitRequestParams, ElicitResult

    cancelled = anyio.Event()

    async def slow(_context: object, _params: ElicitRequestParams) -> ElicitResult:
        try:
            await anyio.sleep(120)
        except BaseException:
            cancelled.set()
            raise
        return ElicitResult(action="accept", content={"answer": "yes"})

    async with connect("legacy", tmp_path, elicitation_callback=slow) as client:
        transcript = Transcript(client)
        launched = await transcript.call("task", {"subagent_name": "impatient", "goal_prompt": "go", "async": True})
        task_id = launched_id(launched)
        result = await wait_for_result(transcript, task_id)
        assert '\\"status\\":\\"timed_out\\"' in result, result
        with anyio.fail_after(60):
            await cancelled.wait()


async def test_a_durable_session_asks_in_a_form_and_by_a_system_note(tmp_path: Path) -> None:
    """Questions through the supervisor: a form to a client that takes them, a System
    Note to one that does not."""
    from mcp_types import ElicitRequestParams, ElicitResult

    async def allow(_context: object, _params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"answer": "yes"})

    state = tmp_path / "state"
    durable = ["--durable", "--state-dir", str(state)]
    try:
        async with connect("legacy", tmp_path, *durable, elicitation_callback=allow) as client:
            transcript = Transcript(client)
            launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
            result = await wait_for_result(transcript, launched_id(launched))
            assert '\\"status\\":\\"answered\\",\\"text\\":\\"yes\\"' in result, result
        async with connect("legacy", tmp_path, *durable) as client:
            transcript = Transcript(client)
            launched = await transcript.call("task", {"subagent_name": "asker", "goal_prompt": "ship it", "async": True})
            task_id = launched_id(launched)
            await wait_for_question(transcript)
            await transcript.call("answer_async_task", {"task_id": task_id, "decline": True})
            result = await wait_for_result(transcript, task_id)
            assert '\\"status\\":\\"declined\\"' in result, result
    finally:
        stopped = subprocess.run(
            [str(binary()), "supervisor", "stop", "--state-dir", str(state)], capture_output=True, text=True, timeout=30
        )
        assert stopped.returncode == 0, stopped.stderr
