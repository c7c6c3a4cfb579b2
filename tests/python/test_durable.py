"""`asynctask mcp --durable`: sessions relay to the workspace's supervisor, which owns
the tasks, their subagents and a store — so a task outlives its session, a result
survives a killed supervisor, and a running task whose supervisor died is reported
interrupted, with no process left.

Every test uses its own state directory, and ends with no supervisor and no subagent
running (the `workspace` fixture stops the supervisor, and kills it by pid if it
would not stop).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import (
    CONFIG,
    REMINDER_HEADER,
    WAIT_SECONDS,
    Transcript,
    binary,
    connect,
    launched_id,
    process_gone,
    progress_recorder,
    texts,
    wait_for_file,
    wait_until,
    wait_until_async,
)

pytestmark = pytest.mark.anyio

MODE = "legacy"


class Workspace:
    """A workspace's state directory, and the `asynctask supervisor` commands on it."""

    def __init__(self, state: Path) -> None:
        self.state = state

    def args(self) -> list[str]:
        # Every session of the workspace names the same project (a supervisor
        # refuses another project's sessions): the one `connect` runs in.
        project = self.state.parent / "project"
        project.mkdir(exist_ok=True)
        return ["--durable", "--state-dir", str(self.state), "--project", str(project)]

    def command(self, verb: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary()), "supervisor", verb, "--config", str(CONFIG), "--state-dir", str(self.state)]
            + (["--json"] if verb == "status" else []),
            capture_output=True,
            text=True,
            timeout=30,
        )

    def status(self) -> dict:
        done = self.command("status")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def pid(self) -> int | None:
        return self.status()["pid"]

    def kill(self) -> int:
        """SIGKILLs the running supervisor; returns its pid once it is gone."""
        pid = self.pid()
        assert pid, "no supervisor runs"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: process_gone(pid), f"the end of supervisor {pid} after SIGKILL")
        return pid

    def log(self) -> str:
        log = self.state / "supervisor.log"
        return log.read_text() if log.is_file() else ""


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    workspace = Workspace(tmp_path / "state")
    yield workspace
    print(f"--- supervisor log ---\n{workspace.log()}")
    pid = workspace.pid() if workspace.state.is_dir() else None
    stopped = workspace.command("stop")
    assert stopped.returncode == 0, stopped.stderr
    if pid and not process_gone(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"supervisor {pid} still ran after `supervisor stop` (killed now)")
    assert "panicked" not in workspace.log(), workspace.log()


def task_status(workspace: Workspace, task_id: str) -> str | None:
    """The status `supervisor status` gives task `task_id` (None when it lists no such task)."""
    return next((task["status"] for task in workspace.status()["tasks"] if task["id"] == task_id), None)


def reminder_ids(transcript: Transcript) -> list[str]:
    """The task ids the reminders of a transcript report, in order."""
    return [found for reminder in transcript.reminders() for found in re.findall(r'"agent_id": "([^"]+)"', reminder)]


async def test_a_task_outlives_its_session_and_reaches_the_next_once(tmp_path: Path, workspace: Workspace) -> None:
    """Closing a durable session leaves its task running; its result reaches the next
    session of the workspace exactly once."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        first = Transcript(client)
        task_id = launched_id(
            await first.call("task", {"subagent_name": "quick", "goal_prompt": "x", "async": True})
        )
    # The session is closed (the relay exited); the task goes on in the supervisor.
    wait_until(lambda: task_status(workspace, task_id) == "completed", "the task's end")
    status = workspace.status()
    assert status["pid"], status
    (task,) = status["tasks"]
    assert (task["id"], task["status"], task["delivered"]) == (task_id, "completed", False), task

    async with connect(MODE, tmp_path, *workspace.args()) as client:
        second = Transcript(client)
        await second.call("check_async_tasks", {})
        await second.call("check_async_tasks", {})
        assert reminder_ids(second) == [task_id], second.dump()
        assert "quick done" in second.reminders()[0]
    assert workspace.status()["tasks"][0]["delivered"] is True


async def test_a_response_read_just_before_the_client_leaves_is_not_delivered_again(
    tmp_path: Path, workspace: Workspace
) -> None:
    """A client that reads a response carrying a result and closes its end at once: the
    relay confirms that response before it exits, so the next session does not get the
    result a second time."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        task_id = launched_id(
            await Transcript(client).call("task", {"subagent_name": "quick", "goal_prompt": "x", "async": True})
        )
    wait_until(lambda: task_status(workspace, task_id) == "completed", "the task's end")

    front = subprocess.Popen(
        [str(binary()), "mcp", "--config", str(CONFIG), *workspace.args()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert front.stdin and front.stdout

        def send(message: dict) -> None:
            front.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
            front.stdin.flush()

        def response(request_id: int) -> dict:
            while True:
                line = front.stdout.readline()
                assert line, "the front closed its stdout before answering"
                message = json.loads(line)
                if message.get("id") == request_id and "method" not in message:
                    return message

        client_info = {"name": "raw", "version": "0"}
        send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info}})
        response(1)
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "check_async_tasks", "arguments": {}}})
        carried = json.dumps(response(2))
        front.stdin.close()  # at once, as a client that is done
        assert task_id in carried and "quick done" in carried, carried
        assert front.wait(timeout=10) == 0
    finally:
        if front.poll() is None:
            front.kill()
            front.wait()
    wait_until(lambda: workspace.status()["tasks"][0]["delivered"], "the confirmation")

    async with connect(MODE, tmp_path, *workspace.args()) as client:
        transcript = Transcript(client)
        await transcript.call("check_async_tasks", {})
        await transcript.call("check_async_tasks", {})
        assert transcript.reminder_count() == 0, f"a result was delivered again:\n{transcript.dump()}"


async def test_results_go_to_the_session_that_launched_them_while_it_is_connected(
    tmp_path: Path, workspace: Workspace
) -> None:
    """With two sessions open, a task and its result are the launching session's alone:
    the other lists nothing, and an id of the task is unknown to it."""
    async with connect(MODE, tmp_path, *workspace.args()) as a, connect(MODE, tmp_path, *workspace.args()) as b:
        ta, tb = Transcript(a), Transcript(b)
        task_id = launched_id(await ta.call("task", {"subagent_name": "quick", "goal_prompt": "x", "async": True}))
        wait_until(lambda: task_status(workspace, task_id) == "completed", "the task's end")
        listing = await tb.call("check_async_tasks", {})
        assert texts(listing)[0] == "No async tasks.", texts(listing)
        peek = await tb.call("check_async_tasks", {"task_id": task_id})
        assert peek.is_error and texts(peek)[0] == f"No async task found with ID or prefix '{task_id}'.", texts(peek)
        assert tb.reminder_count() == 0, f"another session's result reached b:\n{tb.dump()}"
        mine = await ta.call("check_async_tasks", {})
        assert f"[{task_id[:8]}] quick - completed" in texts(mine)[0] and "(this session)" in texts(mine)[0]
        assert reminder_ids(ta) == [task_id], ta.dump()


async def test_an_undelivered_result_survives_a_killed_supervisor(tmp_path: Path, workspace: Workspace) -> None:
    """A finished, undelivered result is in the store: after SIGKILL the next session
    starts a new supervisor, which delivers it, once."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        task_id = launched_id(
            await Transcript(client).call("task", {"subagent_name": "quick", "goal_prompt": "x", "async": True})
        )
    wait_until(lambda: task_status(workspace, task_id) == "completed", "the task's end")
    killed = workspace.kill()
    assert workspace.pid() is None
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        transcript = Transcript(client)
        await transcript.call("check_async_tasks", {})
        await transcript.call("check_async_tasks", {})
        assert reminder_ids(transcript) == [task_id], transcript.dump()
        assert "quick done" in transcript.reminders()[0]
    assert workspace.pid() not in (None, killed)


async def test_a_killed_supervisors_running_task_is_reported_interrupted(
    tmp_path: Path, workspace: Workspace
) -> None:
    """SIGKILL the supervisor while a subagent runs: every process of the subagent ends
    with it (a setsid grandchild and a double-forked one too), and the next supervisor
    reports the task as interrupted."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        task_id = launched_id(
            await Transcript(client).call("task", {"subagent_name": "orphans", "goal_prompt": "x", "async": True})
        )
        pids = [int(pid) for pid in wait_for_file(tmp_path / f"orphans-{task_id}.pids").split()]
    killed = workspace.kill()
    try:
        wait_until(lambda: all(process_gone(pid) for pid in pids), f"the end of subagent processes {pids} with their supervisor")
    finally:
        for pid in pids:
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
    stored = workspace.status()
    assert stored["pid"] is None and stored["tasks"][0]["status"] == "interrupted", stored

    async with connect(MODE, tmp_path, *workspace.args()) as client:
        transcript = Transcript(client)
        await transcript.call("check_async_tasks", {})
        assert reminder_ids(transcript) == [task_id], transcript.dump()
        reminder = transcript.reminders()[0]
        assert '"status": "failed"' in reminder, reminder
        assert (
            f"interrupted: the process running this task ended before it finished (pid {killed}, killed or crashed)"
            in reminder
        ), reminder


async def test_a_signalled_supervisors_running_task_is_reported_interrupted_once(
    tmp_path: Path, workspace: Workspace
) -> None:
    """SIGTERM to the supervisor ends every process of its subagents, but does not cancel
    their tasks: each is reported failed, interrupted by the signal, to the next session,
    once."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        task_id = launched_id(
            await Transcript(client).call("task", {"subagent_name": "orphans", "goal_prompt": "x", "async": True})
        )
        pids = [int(pid) for pid in wait_for_file(tmp_path / f"orphans-{task_id}.pids").split()]
    pid = workspace.pid()
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: process_gone(pid), f"the end of supervisor {pid} after SIGTERM")
    left = [pid for pid in pids if not process_gone(pid)]
    for leftover in left:
        os.kill(leftover, signal.SIGKILL)
    assert not left, f"subagent processes {left} outlived their supervisor (killed now)"
    stored = workspace.status()
    assert stored["pid"] is None, stored
    assert [(task["id"], task["status"], task["delivered"]) for task in stored["tasks"]] == [
        (task_id, "failed", False)
    ], stored

    async with connect(MODE, tmp_path, *workspace.args()) as client:
        transcript = Transcript(client)
        await transcript.call("check_async_tasks", {})
        await transcript.call("check_async_tasks", {})
        assert reminder_ids(transcript) == [task_id], transcript.dump()
        reminder = transcript.reminders()[0]
        assert '"status": "failed"' in reminder, reminder
        assert "interrupted: the supervisor received SIGTERM" in reminder, reminder


async def test_supervisor_stop_ends_every_task(tmp_path: Path, workspace: Workspace) -> None:
    """`asynctask supervisor stop` cancels every task, ends their processes, and exits 0;
    afterwards no supervisor runs."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        task_id = launched_id(
            await Transcript(client).call("task", {"subagent_name": "stubborn", "goal_prompt": "x", "async": True})
        )
        (stubborn,) = [int(pid) for pid in wait_for_file(tmp_path / f"stubborn-{task_id}.pid").split()]
    pid = workspace.pid()
    stopped = workspace.command("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stderr.strip() == f"asynctask: supervisor {pid} stopped", stopped.stderr
    assert process_gone(pid) and process_gone(stubborn)
    status = workspace.status()
    assert status["pid"] is None
    assert [(task["id"], task["status"]) for task in status["tasks"]] == [(task_id, "cancelled")]
    again = workspace.command("stop")
    assert (again.returncode, again.stderr.strip()) == (0, "asynctask: no supervisor runs")


async def test_messages_reach_a_task_owned_by_the_supervisor(tmp_path: Path, workspace: Workspace) -> None:
    """A task launched by a session that closed still takes messages from the next
    session, and its result reaches that session."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        task_id = launched_id(
            await Transcript(client).call("task", {"subagent_name": "listener", "goal_prompt": "x", "async": True})
        )
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        transcript = Transcript(client)
        for text in ("first", "second"):
            sent = await transcript.call("message_async_task", {"task_id": task_id, "message": text})
            assert not sent.is_error, texts(sent)
        await transcript.call(
            "wait_async_tasks", {"task_id_prefixes": [task_id], "timeout_seconds": WAIT_SECONDS}
        )
        assert reminder_ids(transcript) == [task_id], transcript.dump()
        assert 'heard: {\\"type\\":\\"message\\",\\"text\\":\\"first\\"}' in transcript.reminders()[0]


def children(pid: int) -> list[tuple[int, str]]:
    """The child processes of `pid`, each with its state letter (`Z` for a zombie)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(ppid) == pid:
            found.append((int(entry.name), state))
    return found


async def test_fronts_that_start_supervisors_at_once_leave_no_zombie(tmp_path: Path, workspace: Workspace) -> None:
    """Two fronts starting on a workspace with no supervisor may both start one; the one
    that finds the other's lock ends, and its front reaps it while it runs on."""
    command = [str(binary()), "mcp", "--config", str(CONFIG), *workspace.args()]
    fronts = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(3)]
    # A front reaches its supervisor once its client opens the session.
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    for front in fronts:
        assert front.stdin
        front.stdin.write((json.dumps(initialize) + "\n").encode())
        front.stdin.flush()
    try:
        wait_until(lambda: workspace.status()["sessions"] == len(fronts), "every front's session")
        wait_until(
            lambda: not any(state == "Z" for front in fronts for _, state in children(front.pid)),
            "the reaping of every supervisor that ended",
        )
    finally:
        for front in fronts:
            assert front.stdin
            front.stdin.close()
        for front in fronts:
            try:
                front.wait(timeout=10)
            except subprocess.TimeoutExpired:
                front.kill()
                front.wait()
                pytest.fail(f"front {front.pid} did not exit when its stdin closed (killed now)")


async def test_the_state_directory_is_private(tmp_path: Path, workspace: Workspace) -> None:
    """The state directory is the user's alone (0700), and so is the socket in it."""
    async with connect(MODE, tmp_path, *workspace.args()) as client:
        await Transcript(client).call("check_async_tasks", {})
    assert workspace.state.stat().st_mode & 0o777 == 0o700
    assert (workspace.state / "supervisor.sock").stat().st_mode & 0o077 == 0


async def test_progress_never_quotes_another_sessions_task(tmp_path: Path, workspace: Workspace) -> None:
    """A long call's progress notification quotes the latest line of a running task of
    its own session, never one of another session sharing the workspace."""
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    async with connect(MODE, first_dir, *workspace.args()) as first_client:
        first = Transcript(first_client)
        chatty = launched_id(
            await first.call("task", {"subagent_name": "chatty", "goal_prompt": "x", "async": True})
        )
        async with connect(MODE, second_dir, *workspace.args()) as second_client:
            second = Transcript(second_client)
            slow = launched_id(
                await second.call("task", {"subagent_name": "slow", "goal_prompt": "x", "async": True})
            )
            progress, on_progress = progress_recorder()
            await second.call("wait_async_tasks", {"timeout_seconds": 6}, progress_callback=on_progress)
            messages = [message for _, _, message in progress if message]
            print(f"progress notifications: {progress}")
            assert messages, "no progress notification during a 6 s wait"
            # Its own task prints nothing; the other session's prints a line every 0.1 s.
            assert all(re.fullmatch(r"still running \(\d+s\)", m) for m in messages), messages
            assert not (await second.call("end_async_task", {"task_id": slow})).is_error
        assert not (await first.call("end_async_task", {"task_id": chatty})).is_error


async def test_the_inline_budget_option_reaches_the_supervisor_it_starts(tmp_path: Path, workspace: Workspace) -> None:
    """`mcp --durable --inline-budget 2000` starts a supervisor whose results hold 2,000
    characters of stdout (not the default 10,000)."""
    async with connect(MODE, tmp_path, *workspace.args(), "--inline-budget", "2000") as client:
        transcript = Transcript(client)
        result = await transcript.call("task", {"subagent_name": "big", "goal_prompt": "x"})
        assert not result.is_error, texts(result)
        message = json.loads(texts(result)[0])["final_message"]
        omitted = re.search(r"\[\.\.\. (\d+) characters omitted", message)
        assert omitted, message[:300]
        assert int(omitted.group(1)) > 66_008 - 2_000, omitted.group(0)


def holds_flock(pid: int, path: Path) -> bool:
    """Whether process `pid` holds a `flock` on the file at `path` (as /proc/locks says)."""
    inode = path.stat().st_ino if path.exists() else None
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[4] == str(pid) and fields[5].endswith(f":{inode}"):
            return True
    return False


async def test_supervisor_stop_stops_a_supervisor_that_is_starting(workspace: Workspace) -> None:
    """`asynctask supervisor stop` while a supervisor holds the workspace's lock but has
    no socket yet (it is opening its store) waits for it to answer and stops it, rather
    than reporting that none runs."""

    workspace.state.mkdir(mode=0o700)
    # The store held here keeps the starting supervisor from binding its socket.
    store_lock = open(workspace.state / "tasks.db.lock", "w")
    fcntl.flock(store_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    run = [str(binary()), "supervisor", "run", "--config", str(CONFIG), "--state-dir", str(workspace.state)]
    supervisor = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: holds_flock(supervisor.pid, workspace.state / "supervisor.lock"), "the supervisor's lock")
        stop = subprocess.Popen(
            [str(binary()), "supervisor", "stop", "--config", str(CONFIG), "--state-dir", str(workspace.state)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Still starting while `stop` first looks (one that reported no supervisor
        # would have exited by then); then it may bind its socket.
        try:
            stop.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        fcntl.flock(store_lock, fcntl.LOCK_UN)
        _, stderr = stop.communicate(timeout=30)
        assert (stop.returncode, stderr.strip()) == (0, f"asynctask: supervisor {supervisor.pid} stopped"), stderr
        assert process_gone(supervisor.pid)
    finally:
        store_lock.close()
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
            pytest.fail(f"supervisor {supervisor.pid} still ran after `supervisor stop` (killed now)")
        supervisor.wait()


async def test_queued_tasks_survive_a_killed_supervisor_and_start_in_order(
    tmp_path: Path, workspace: Workspace
) -> None:
    """Launches past the limit wait in the store's queue: after SIGKILL the running
    task is reported interrupted, and the next supervisor starts the queued ones in
    their order and delivers every result once."""
    args = [*workspace.args(), "--max-async-tasks", "1", "--max-queued-tasks", "5"]
    async with connect(MODE, tmp_path, *args) as client:
        transcript = Transcript(client)
        running = launched_id(
            await transcript.call("task", {"subagent_name": "slow", "goal_prompt": "x", "async": True})
        )
        queued = []
        for n in range(2):
            launch = await transcript.call("task", {"subagent_name": "quick", "goal_prompt": f"q{n}", "async": True})
            assert texts(launch)[0].startswith("Async task queued: subagent 'quick'"), texts(launch)
            queued.append(launched_id(launch))
        wait_for_file(tmp_path / f"slow-{running}.pid")
    workspace.kill()
    stored = {task["id"]: task["status"] for task in workspace.status()["tasks"]}
    assert stored == {running: "interrupted", queued[0]: "queued", queued[1]: "queued"}, stored

    async with connect(MODE, tmp_path, *args) as client:
        transcript = Transcript(client)
        for _ in range(10):
            if set(reminder_ids(transcript)) >= {running, *queued}:
                break
            await transcript.call("wait_async_tasks", {"timeout_seconds": WAIT_SECONDS})
        await transcript.call("check_async_tasks", {})
        ids = reminder_ids(transcript)
        assert sorted(ids) == sorted([running, *queued]), transcript.dump()
    # One runs at a time: they ended in the order they started. (The first
    # starts while the new supervisor restores, before it logs anything.)
    log = workspace.log()
    ends = re.findall(r"task (\w{8}) \(quick\) completed", log)
    assert ends == [task_id[:8] for task_id in queued], log


async def test_a_front_warns_of_a_supervisor_of_another_build(tmp_path: Path) -> None:
    """A supervisor started from another executable (an older install, say) serves
    on, and the front of this one says so on its stderr, naming the command."""
    import shutil

    old = tmp_path / "asynctask-old"
    shutil.copy(binary(), old)  # same bytes, another executable: another build
    state = tmp_path / "state"
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    supervisor = subprocess.Popen(
        [str(old), "supervisor", "run", "--config", str(CONFIG), "--state-dir", str(state), "--project", str(project)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_until_async(lambda: (state / "supervisor.sock").exists(), "the old supervisor's socket")
        async with connect(MODE, tmp_path, "--durable", "--state-dir", str(state), "--project", str(project)) as client:
            result = await client.call_tool("check_async_tasks", {})
            assert not result.is_error
        log = (tmp_path / "server-stderr.log").read_text()
        assert "runs another build of asynctask" in log and "asynctask supervisor restart" in log, log
    finally:
        supervisor.terminate()
        supervisor.wait(timeout=15)
