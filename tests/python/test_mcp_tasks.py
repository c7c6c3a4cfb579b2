"""MCP Tasks (the `io.modelcontextprotocol/tasks` extension) as a client of the
2026-07-28 protocol speaks it, raw JSON-RPC lines to the binary: the handshake
advertises the extension; a `task` call that declares it is answered with a task;
`tasks/get` follows it to `completed` and the whole result; `tasks/cancel` ends the
subagent and is idempotent; unknown ids get the extension's error; a result a poll
takes never rides in a System Note on another tool result too; and, durable, the tasks
clients follow keep their results for the polls across a client's and a supervisor's
restart."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from helpers import REMINDER_HEADER, LineServer, group_alive, process_gone, slow_group, wait_until

TASKS = "io.modelcontextprotocol/tasks"
DAY_MS = 24 * 60 * 60 * 1000
POLL_MS = 5_000
ACK = {"resultType": "complete"}


def meta(tasks: bool) -> dict[str, Any]:
    """A request's `_meta` on the 2026-07-28 protocol, declaring the extension or not."""
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if tasks else {},
    }


class TasksClient:
    """A client of the 2026-07-28 protocol, one request at a time."""

    def __init__(self, server: LineServer) -> None:
        self.server = server
        self.next_id = 1

    def request(self, method: str, params: dict[str, Any] | None = None, tasks: bool = True) -> dict[str, Any]:
        request_id = self.next_id
        self.next_id += 1
        params = {**(params or {}), "_meta": meta(tasks)}
        self.server.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answer = self.server.answer(request_id)
        print(f"{method} {json.dumps(params)[:120]} -> {json.dumps(answer)[:400]}")
        return answer

    def call(self, name: str, arguments: dict[str, Any], tasks: bool = True) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments}, tasks)

    def get(self, task_id: str) -> dict[str, Any]:
        return self.request("tasks/get", {"taskId": task_id})

    def launch(self, subagent: str) -> str:
        """Launches `subagent` as a task; checks the task answer and returns its id."""
        created = self.call("task", {"subagent_name": subagent, "goal_prompt": "go"})
        result = created["result"]
        assert result["resultType"] == "task", created
        assert result["status"] == "working", created
        assert result["ttlMs"] == DAY_MS and result["pollIntervalMs"] == POLL_MS, created
        assert result["createdAt"] == result["lastUpdatedAt"], created
        return result["taskId"]

    def poll_until(self, task_id: str, status: str) -> tuple[dict[str, Any], list[str]]:
        """Polls `tasks/get` until the task is `status`: its last answer, and every
        status seen on the way."""
        seen = []

        def reached() -> dict[str, Any] | None:
            polled = self.get(task_id)["result"]
            assert polled["taskId"] == task_id and polled["resultType"] == "complete", polled
            seen.append(polled["status"])
            return polled if polled["status"] == status else None

        return wait_until(reached, f"task {task_id} becomes {status}", every=0.05), seen

    def listed_completed(self, task_id: str) -> None:
        """Lists the tasks with `check_async_tasks` until `task_id` is listed completed;
        no listing carries a System Note (a followed task's result rides on no other
        tool result)."""

        def completed() -> bool:
            listing = self.call("check_async_tasks", {})["result"]
            assert not any(REMINDER_HEADER in text for text in texts(listing)), listing
            return f"[{task_id[:8]}] quick - completed" in texts(listing)[0]

        wait_until(completed, f"task {task_id} is listed completed", every=0.05)


def texts(result: dict[str, Any]) -> list[str]:
    return [block["text"] for block in result["content"] if block.get("type") == "text"]


@pytest.fixture
def client(tmp_path: Path):
    server = LineServer(tmp_path, durable=False)
    yield TasksClient(server)
    if server.process.poll() is None:
        server.close()
    log = (tmp_path / "server-stderr.log").read_text()
    print(f"--- server stderr ---\n{log}")
    assert "panicked" not in log


def test_a_task_call_is_a_task_that_tasks_get_follows_to_its_result(client: TasksClient) -> None:
    found = client.request("server/discover")["result"]
    assert found["capabilities"]["extensions"][TASKS] == {}, found
    assert "System Note" not in found["instructions"], found
    assert "wait_async_tasks" not in {tool["name"] for tool in client.request("tools/list")["result"]["tools"]}

    task_id = client.launch("quick")
    done, seen = client.poll_until(task_id, "completed")
    assert set(seen[:-1]) <= {"working"}, seen
    result = done["result"]
    assert result["isError"] is False, done
    notification = json.loads(texts(result)[0])
    assert notification["agent_id"] == task_id, notification
    assert notification["terminate_reason"] == "GOAL", notification
    assert "quick done" in notification["final_message"], notification
    assert done["statusMessage"] == f"task {task_id} finished", done
    assert client.get(task_id)["result"] == done, "a poll again answers the same"
    client.server.close()


def test_a_result_is_delivered_once_through_tasks_get_never_in_a_system_note(client: TasksClient) -> None:
    client.request("server/discover")
    task_id = client.launch("quick")
    # Other tool calls while it runs and after it ended: none carries its result.
    client.listed_completed(task_id)
    peek = client.call("check_async_tasks", {"task_id": task_id})["result"]
    assert len(texts(peek)) == 1, peek
    done, _ = client.poll_until(task_id, "completed")
    assert json.loads(texts(done["result"])[0])["agent_id"] == task_id
    # Taken by the poll: still no System Note, and the poll answers the same.
    after = client.call("check_async_tasks", {})["result"]
    assert not any(REMINDER_HEADER in text for text in texts(after)), after
    assert client.get(task_id)["result"] == done
    client.server.close()


def test_tasks_cancel_ends_the_subagent_and_is_idempotent(client: TasksClient, tmp_path: Path) -> None:
    client.request("server/discover")
    task_id = client.launch("slow")
    group = slow_group(tmp_path, task_id)
    assert group_alive(group)
    for _ in range(2):
        assert client.request("tasks/cancel", {"taskId": task_id})["result"] == ACK
    cancelled, _ = client.poll_until(task_id, "cancelled")
    assert "result" not in cancelled, cancelled
    wait_until(lambda: not group_alive(group), f"the end of the cancelled subagent's process group {group}")
    assert client.request("tasks/cancel", {"taskId": task_id})["result"] == ACK, "after its end too"
    listing = client.call("check_async_tasks", {})["result"]
    assert not any(REMINDER_HEADER in text for text in texts(listing)), listing
    client.server.close()


def test_unknown_ids_and_undeclared_requests_get_the_extensions_errors(client: TasksClient) -> None:
    client.request("server/discover")
    for method, params in [
        ("tasks/get", {"taskId": "no-such-task"}),
        ("tasks/cancel", {"taskId": "no-such-task"}),
        ("tasks/update", {"taskId": "no-such-task", "inputResponses": {}}),
    ]:
        refused = client.request(method, params)["error"]
        assert refused["code"] == -32602, (method, refused)
        assert "Task not found" in refused["message"] and "no-such-task" in refused["message"], refused
        undeclared = client.request(method, params, tasks=False)["error"]
        assert undeclared["code"] == -32021, (method, undeclared)
    # Undeclared, a `task` call is a plain call: the launch text, never a task.
    plain = client.call("task", {"subagent_name": "quick", "goal_prompt": "go", "async": True}, tasks=False)
    assert "resultType" not in plain["result"] or plain["result"]["resultType"] == "complete", plain
    assert texts(plain["result"])[0].startswith("Async task launched: subagent 'quick'"), plain
    client.server.close()


def test_a_question_is_input_required_and_tasks_update_answers_it_once(client: TasksClient) -> None:
    client.request("server/discover")
    task_id = client.launch("asker")
    asking, _ = client.poll_until(task_id, "input_required")
    request = asking["inputRequests"]["question-1"]
    assert request["method"] == "elicitation/create", asking
    assert request["params"]["message"].endswith("(asker) asks:\nDeploy to production too?"), asking
    assert request["params"]["requestedSchema"]["properties"]["answer"]["enum"] == ["yes", "no"], asking
    # Asked of the client alone: no System Note carries the question.
    listing = client.call("check_async_tasks", {})["result"]
    assert not any(REMINDER_HEADER in text for text in texts(listing)), listing
    for answer in ("no", "yes"):
        response = {"question-1": {"action": "accept", "content": {"answer": answer}}}
        updated = client.request("tasks/update", {"taskId": task_id, "inputResponses": response})
        assert updated["result"] == ACK, updated
    done, _ = client.poll_until(task_id, "completed")
    final = json.loads(texts(done["result"])[0])["final_message"]
    assert '"status":"answered","text":"no"' in final, final
    client.server.close()


def status_of(client: TasksClient, task_id: str) -> str:
    """Task `task_id`'s status as `check_async_tasks` shows it."""
    return json.loads(texts(client.call("check_async_tasks", {"task_id": task_id})["result"])[0])["status"]


def durable_client(tmp_path: Path, log: str) -> TasksClient:
    """A durable front (the workspace's supervisor behind it) on the 2026-07-28
    protocol, the extension declared."""
    client = TasksClient(LineServer(tmp_path, durable=True, log=log))
    found = client.request("server/discover")["result"]
    assert found["capabilities"]["extensions"][TASKS] == {}, found
    return client


def supervisor_gone(server: LineServer) -> None:
    """SIGKILLs the workspace's supervisor and waits until it is gone."""
    pid = server.supervisor_pid()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: process_gone(pid), f"the end of supervisor {pid} after SIGKILL")


def test_a_durable_task_resolves_after_the_client_restarts_its_server(tmp_path: Path) -> None:
    first = durable_client(tmp_path, "front-1.log")
    task_id = first.launch("quick")
    # The client goes (its server with it) before the task ends; the supervisor stays.
    first.server.close(stop_supervisor=False)
    second = durable_client(tmp_path, "front-2.log")
    try:
        # Another tool call of the new session, after the task ended: still followed
        # as an MCP Task, so no System Note carries its result.
        second.listed_completed(task_id)
        done, _ = second.poll_until(task_id, "completed")
        assert json.loads(texts(done["result"])[0])["agent_id"] == task_id, done
        assert second.get(task_id)["result"] == done, "a poll again answers the same"
    finally:
        second.server.close()


def test_a_durable_task_resolves_from_the_store_after_a_supervisor_restart(tmp_path: Path) -> None:
    first = durable_client(tmp_path, "front-1.log")
    task_id = first.launch("quick")
    ended = [first.get(task_id)["result"]["status"]]
    wait_until(lambda: status_of(first, task_id) == "completed", f"task {task_id}'s end", every=0.05)
    assert ended == ["working"], ended
    first.server.close(stop_supervisor=False)
    supervisor_gone(first.server)
    # A new front starts the next supervisor, which reads the task from the store.
    second = durable_client(tmp_path, "front-2.log")
    try:
        done, _ = second.poll_until(task_id, "completed")
        notification = json.loads(texts(done["result"])[0])
        assert notification["agent_id"] == task_id and "quick done" in notification["final_message"], done
        assert second.get(task_id)["result"] == done
        after = second.call("check_async_tasks", {})["result"]
        assert not any(REMINDER_HEADER in text for text in texts(after)), after
        refused = second.request("tasks/get", {"taskId": "no-such-task"})["error"]
        assert refused["code"] == -32602, refused
    finally:
        second.server.close()


def test_the_followed_tasks_are_journaled_so_a_supervisor_restart_keeps_their_results_for_the_polls(
    tmp_path: Path,
) -> None:
    """The set of tasks clients follow is in the store: after the supervisor
    restarts, a new session's tool calls carry no System Note with a followed
    task's result — neither the one that ended before the restart nor the one the
    restart interrupted — and the polls get both."""
    first = durable_client(tmp_path, "front-1.log")
    ended = first.launch("quick")
    interrupted = first.launch("slow")
    group = slow_group(tmp_path, interrupted)
    wait_until(lambda: status_of(first, ended) == "completed", f"task {ended}'s end", every=0.05)
    first.server.close(stop_supervisor=False)
    supervisor_gone(first.server)
    wait_until(lambda: not group_alive(group), f"the end of the slow subagent's group {group} with its supervisor")
    second = durable_client(tmp_path, "front-2.log")
    try:
        # Tool calls first, of a session that follows nothing yet and of one that
        # does not even declare the extension: neither takes the results.
        for declares in (True, False, True):
            listing = second.call("check_async_tasks", {}, tasks=declares)["result"]
            assert not any(REMINDER_HEADER in text for text in texts(listing)), listing
        done, _ = second.poll_until(ended, "completed")
        assert "quick done" in json.loads(texts(done["result"])[0])["final_message"], done
        failed, _ = second.poll_until(interrupted, "completed")
        assert failed["result"].get("isError") is True, failed
        assert "interrupted" in texts(failed["result"])[0], failed
        after = second.call("check_async_tasks", {})["result"]
        assert not any(REMINDER_HEADER in text for text in texts(after)), after
    finally:
        second.server.close()


def interrupted(client: TasksClient) -> None:
    """Ends a durable front as Claude Code does when it exits: SIGINT (then SIGTERM,
    when it is still there). The front exits at once and leaves its tasks to the
    supervisor."""
    client.server.process.send_signal(signal.SIGINT)
    status = client.server.process.wait(timeout=10)
    client.server.stderr.close()
    assert status == 0, f"exit status {status}"


def test_a_durable_task_survives_sigint_to_its_front_and_resolves_through_the_next_front(tmp_path: Path) -> None:
    """Claude Code ends its server with SIGINT, not end of input: the supervisor runs
    the followed task on, and the next front's polls follow it — here through a
    question, answered with `tasks/update` — to its result."""
    first = durable_client(tmp_path, "front-1.log")
    task_id = first.launch("asker")
    first.poll_until(task_id, "input_required")
    interrupted(first)
    second = durable_client(tmp_path, "front-2.log")
    try:
        second.poll_until(task_id, "input_required")
        response = {"question-1": {"action": "accept", "content": {"answer": "yes"}}}
        assert second.request("tasks/update", {"taskId": task_id, "inputResponses": response})["result"] == ACK
        done, _ = second.poll_until(task_id, "completed")
        final = json.loads(texts(done["result"])[0])["final_message"]
        assert '"status":"answered","text":"yes"' in final, final
        after = second.call("check_async_tasks", {})["result"]
        assert not any(REMINDER_HEADER in text for text in texts(after)), after
    finally:
        second.server.close()


def test_a_durable_result_nobody_polls_any_more_rides_in_a_system_note_once(tmp_path: Path) -> None:
    """A client that exits ("Exit and stop tasks", "Move to background and exit")
    polls its task no more, and its durable front leaves the task to the supervisor:
    once no session whose client polls is connected, the next session adopts the
    task, and its result rides in a System Note on that session's tool result —
    exactly once. To a third session the task does not exist while the adopter is
    connected; once the adopter left, the third adopts it, and its poll says the
    result was delivered in an earlier response."""
    first = durable_client(tmp_path, "front-1.log")
    task_id = first.launch("quick")
    # Its client connected, the ended task's result waits for its poll.
    first.listed_completed(task_id)
    interrupted(first)
    plain = TasksClient(LineServer(tmp_path, durable=True, log="front-2.log"))
    try:
        plain.request("server/discover", tasks=False)

        def noted() -> list[str] | None:
            listing = texts(plain.call("check_async_tasks", {}, tasks=False)["result"])
            return listing[1:] or None

        note = wait_until(noted, f"task {task_id}'s result in a System Note", every=0.05)
        assert len(note) == 1 and REMINDER_HEADER in note[0] and task_id in note[0], note
        assert "quick done" in note[0], note
        again = plain.call("check_async_tasks", {}, tasks=False)["result"]
        assert len(texts(again)) == 1, again
        late = durable_client(tmp_path, "front-3.log")
        try:
            hidden = late.get(task_id)
            assert "Task not found" in hidden["error"]["message"], hidden
            plain.server.close(stop_supervisor=False)
            plain = None

            def adopted() -> dict | None:
                return late.get(task_id).get("result")

            polled = wait_until(adopted, f"task {task_id} adopted once its adopter left")
            assert polled["status"] == "completed", polled
            assert "already delivered in an earlier response" in polled["statusMessage"], polled
            assert texts(polled["result"]) == [polled["statusMessage"]], polled
        finally:
            late.server.close(stop_supervisor=plain is None)
    finally:
        if plain is not None:
            plain.server.close()
