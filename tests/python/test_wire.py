"""The wire, as a careless or hostile client writes it: every request gets exactly one
answer whatever the line, the session goes on after it, and nothing piles up for a
client that writes without reading — plain and durable (through the front and its
supervisor).

Each test drives `asynctask mcp` over raw pipes, line by line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import REMINDER_HEADER, LineServer, process_gone, wait_until


def rss_kib(pid: int) -> int:
    """The resident memory of process `pid`, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture(params=[False, True], ids=["plain", "durable"])
def server(request: pytest.FixtureRequest, tmp_path: Path):
    server = LineServer(tmp_path, request.param)
    yield server
    if server.process.poll() is None:
        server.close()
    log = tmp_path / "server-stderr.log"
    print(f"--- server stderr ---\n{log.read_text()}")
    assert "panicked" not in log.read_text()


def call(id: int, name: str, arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: A line, and the error code and id its answer carries (None: served, not refused).
CASES: list[tuple[str, bytes, int | None, Any]] = [
    ("not JSON", b"this is not json", -32700, None),
    ("a trailing comma, its id readable", b'{"jsonrpc":"2.0","id":7,"method":"tools/list",}', -32700, 7),
    (
        "nesting of 127 levels",
        b'{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{"name":"check_async_tasks","arguments":{"x":'
        + nested(127).encode()
        + b"}}}",
        -32700,
        "deep",
    ),
    ("not a request, its id readable", b'{"id":3,"method":"ping"}', -32600, 3),
    ("a batch", b'[{"jsonrpc":"2.0","id":4,"method":"ping"}]', -32600, None),
    (
        "arguments that are not an object",
        json.dumps(call(5, "check_async_tasks", [1, 2])).encode(),
        -32602,
        5,
    ),
    (
        "a truncated emoji (a lone surrogate escape)",
        b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"check_async_tasks","arguments":{"task_id":"x\\ud83d"}}}',
        None,
        6,
    ),
    (
        "bytes that are not UTF-8",
        b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"check_async_tasks","arguments":{"task_id":"caf\xe9"}}}',
        None,
        8,
    ),
]


@pytest.mark.parametrize("name,line,code,id", CASES, ids=[case[0] for case in CASES])
def test_every_request_gets_one_answer_and_the_session_goes_on(
    server: LineServer, name: str, line: bytes, code: int | None, id: Any
) -> None:
    server.initialize()
    server.write(line + b"\n")
    answer = server.answer(id)
    print(f"{name}: {answer}")
    # JSON-RPC 2.0: an answer always has an id member, `null` when the
    # request's id could not be read.
    assert "id" in answer, answer
    if code is None:
        assert "result" in answer, answer
    else:
        assert answer["error"]["code"] == code, answer
    server.ping(100)
    server.close()


def test_a_line_past_the_bound_is_answered_and_skipped(server: LineServer) -> None:
    """A request of 17 MiB is answered with its id, never read whole; the session goes on."""
    server.initialize()
    head = b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"check_async_tasks","arguments":{"x":"'
    server.write(head + b"x" * (17 << 20) + b'"}}}\n')
    answer = server.answer(12)
    assert answer["error"]["code"] == -32600, answer
    assert "more than the 16777216 bytes" in answer["error"]["message"], answer
    server.ping(13)
    server.close()


@pytest.mark.parametrize(
    "first",
    [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "id": 99, "result": {}},
    ],
    ids=["initialized", "cancelled", "a response"],
)
def test_a_notification_or_response_before_initialize_does_not_end_the_session(
    server: LineServer, first: dict[str, Any]
) -> None:
    server.send(first)
    server.initialize()
    server.ping(1)
    server.close()


def test_a_request_whose_id_is_in_use_is_refused(server: LineServer) -> None:
    """A second `wait_async_tasks` with the id of one in progress is refused at once
    with that id; the first goes on and is answered."""
    server.initialize()
    # A task that runs: the wait waits (with nothing running it answers at once).
    server.send(call(20, "task", {"subagent_name": "chatty", "goal_prompt": "x", "async": True}))
    assert "result" in server.answer(20)
    waiting = call(21, "wait_async_tasks", {"timeout_seconds": 2})
    server.send(waiting)
    server.send(waiting)
    refused = server.answer(21)
    assert refused["error"]["code"] == -32600 and "already in use" in refused["error"]["message"], refused
    answered = server.answer(21)
    assert "result" in answered, answered
    server.close()


def test_a_duplicate_id_leaves_the_request_in_progress_answered_when_the_supervisor_dies(
    tmp_path: Path,
) -> None:
    """Durable: the supervisor refuses a request whose id is in use; the request in
    progress with that id still waits, and when the supervisor is killed the front
    answers it (the refusal must not make the front forget it)."""
    server = LineServer(tmp_path, durable=True)
    try:
        server.initialize()
        server.send(call(20, "task", {"subagent_name": "chatty", "goal_prompt": "x", "async": True}))
        assert "result" in server.answer(20)
        waiting = call(21, "wait_async_tasks", {"timeout_seconds": 30})
        server.send(waiting)
        server.send(waiting)
        refused = server.answer(21)
        assert refused["error"]["code"] == -32600 and "already in use" in refused["error"]["message"], refused
        os.kill(server.supervisor_pid(), signal.SIGKILL)
        answered = server.answer(21)
        assert answered["result"]["isError"] is True, answered
        assert "supervisor ended while this call ran" in answered["result"]["content"][0]["text"], answered
        server.ping(22)
    finally:
        server.close()
    assert "panicked" not in (tmp_path / "server-stderr.log").read_text()


def test_durable_checks_sharing_an_id_deliver_a_result_exactly_once(tmp_path: Path) -> None:
    """Durable, through the front and the supervisor, round after round: once a task has
    finished, two `check_async_tasks` calls sharing one id in one write get two answers,
    exactly one of which carries the result's System Note; the other is the JSON-RPC
    error (or, when the first was answered before the second was read, a plain
    listing); a later call does not carry the result again, and the supervisor records
    it delivered."""
    server = LineServer(tmp_path, durable=True)
    try:
        server.initialize()
        next_id = 1
        refusals = 0
        for round in range(20):
            server.send(call(next_id, "task", {"subagent_name": "quick", "goal_prompt": "x", "async": True}))
            launched = server.answer(next_id)
            task_id = re.search(r"\(ID: ([^)\s]+)\)", launched["result"]["content"][0]["text"]).group(1)
            wait_until(lambda: server.task(task_id).get("status") == "completed", f"round {round}: task {task_id}'s end")
            check = json.dumps(call(next_id + 1, "check_async_tasks", {})).encode() + b"\n"
            server.write(check + check)
            answers = [server.answer(next_id + 1), server.answer(next_id + 1)]
            refused = [answer for answer in answers if "error" in answer]
            assert all(answer["error"]["code"] == -32600 for answer in refused), (round, answers)
            assert len(refused) <= 1, (round, answers)
            refusals += len(refused)
            carried = [answer for answer in answers if carries(answer, task_id)]
            assert len(carried) == 1 and "result" in carried[0], (round, answers)
            server.send(call(next_id + 2, "check_async_tasks", {}))
            later = server.answer(next_id + 2)
            assert not carries(later, task_id), (round, later)
            assert server.task(task_id)["delivered"] is True, (round, server.task(task_id))
            next_id += 3
        assert refusals > 0, "no round had both requests in progress at once"
        supervisor = server.supervisor_pid()
    finally:
        server.close()
    wait_until(lambda: process_gone(supervisor), f"the end of supervisor {supervisor} after `supervisor stop`")
    assert "panicked" not in (tmp_path / "server-stderr.log").read_text()


def carries(answer: dict[str, Any], task_id: str) -> bool:
    """Whether `answer` carries a System Note with task `task_id`'s result."""
    blocks = answer.get("result", {}).get("content", [])
    return any(REMINDER_HEADER in block.get("text", "") and task_id in block["text"] for block in blocks)


def test_a_client_that_does_not_read_is_not_read(server: LineServer) -> None:
    """20,000 `tools/list` requests written without reading a byte: the server stops
    reading instead of queueing answers (its memory, and a durable supervisor's, stays
    flat), then answers every one once read."""
    server.initialize()
    count = 20_000
    request = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/list"}).encode() + b"\n" for i in range(count)
    )
    written = threading.Event()

    def write_all() -> None:
        try:
            server.write(request)
        finally:
            written.set()

    writer = threading.Thread(target=write_all, daemon=True)
    watched = server.supervisor_pid() if server.durable else server.process.pid
    before = rss_kib(watched)
    writer.start()
    # The writes stop making progress once the server stops reading: wait until
    # its memory holds still.
    last, still_since = rss_kib(watched), time.monotonic()
    deadline = time.monotonic() + 30
    while time.monotonic() - still_since < 1.0:
        assert time.monotonic() < deadline, "the server's memory never settled"
        time.sleep(0.1)
        now = rss_kib(watched)
        if abs(now - last) > 256:
            last, still_since = now, time.monotonic()
    blocked = rss_kib(watched)
    print(f"RSS before {before} KiB, with {count} requests unread {blocked} KiB")
    assert not written.is_set(), "every request was read: nothing stopped reading"
    assert blocked - before < 40_000, f"memory grew by {blocked - before} KiB"
    # Answered in any order (requests are served concurrently), each once.
    answered = []
    while len(answered) < count:
        answer = server.line()
        assert "tools" in answer["result"], answer
        answered.append(answer["id"])
    assert sorted(answered) == list(range(1000, 1000 + count))
    assert written.wait(10)
    server.ping(1)
    server.close()


def test_a_durable_front_holds_no_more_than_a_line_of_its_client(tmp_path: Path) -> None:
    """An unterminated 64 MiB line into a durable front: it holds at most one line's
    bound (16 MiB) of it, answers the request once its end comes, and goes on."""
    server = LineServer(tmp_path, durable=True)
    try:
        server.initialize()
        before = rss_kib(server.process.pid)
        server.write(b'{"jsonrpc":"2.0","id":31,"method":"ping","params":{"x":"' + b"y" * (64 << 20))
        during = rss_kib(server.process.pid)
        server.write(b'"}}\n')
        answer = server.answer(31)
        assert answer["error"]["code"] == -32600, answer
        print(f"front RSS {before} KiB before, {during} KiB with 64 MiB of one line written")
        assert during - before < 48_000, f"the front grew by {during - before} KiB"
        server.ping(32)
    finally:
        server.close()
        assert process_gone(server.process.pid)
