"""`asynctask mcp` and the processes it starts: no subagent outlives its server, even
one killed with SIGKILL, nor its task, even a descendant that left the process group;
and the server exits promptly on SIGINT or SIGTERM whatever its stdin is.

These tests speak raw JSON-RPC over the server's stdio (the SDK client owns the
process it starts, and these tests must signal and kill it themselves). Every process
they start is ended by pid.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import subprocess
import termios
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import CONFIG, binary, process_gone, wait_for_file, wait_until

#: How long the server may take to exit after a signal, here. Claude Code sends
#: SIGTERM 100 ms after SIGINT and SIGKILL 400 ms after that; how fast the
#: server exits is measured by `cargo bench -p asynctask-cli --bench mcp` (a few
#: milliseconds). This test checks the behaviour — the subagents end at once,
#: without their 2 s grace — with a bound no slow machine misses.
PROMPT_EXIT = 1.5


class RawServer:
    """`asynctask mcp` on stdio the test controls: `stdin` is a pipe, a socketpair
    or a terminal; stdout is a pipe or a socketpair."""

    def __init__(
        self, tmp_path: Path, stdin_kind: str, *extra_args: str, tmpdir: Path | None = None
    ) -> None:
        env = {**os.environ, "ASYNCTASK_TEST_DIR": str(tmp_path)}
        if tmpdir is None:
            # Outputs go to the test's directory: a server killed here leaves
            # nothing elsewhere.
            state = ["--state-dir", str(tmp_path / "state")]
        else:
            # No state directory: outputs go to a temporary one under `tmpdir`.
            state = []
            env["TMPDIR"] = str(tmpdir)
        args = [str(binary()), "mcp", "--config", str(CONFIG), *state, *extra_args]
        self._keep: list[Any] = []
        self.stderr = (tmp_path / "server-stderr.log").open("w")
        if stdin_kind == "socketpair":
            ours_in, theirs_in = socket.socketpair()
            ours_out, theirs_out = socket.socketpair()
            self.process = subprocess.Popen(
                args, stdin=theirs_in.fileno(), stdout=theirs_out.fileno(), stderr=self.stderr, env=env
            )
            theirs_in.close()
            theirs_out.close()
            self._keep += [ours_in, ours_out]
            self._send: Callable[[bytes], None] = ours_in.sendall
            self._read = ours_out.makefile("rb")
        elif stdin_kind == "terminal":
            master, slave = pty.openpty()
            # No echo, no line editing: the terminal passes the JSON through as is.
            attrs = termios.tcgetattr(slave)
            attrs[3] &= ~(termios.ECHO | termios.ICANON)
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            self.process = subprocess.Popen(
                args, stdin=slave, stdout=subprocess.PIPE, stderr=self.stderr, env=env
            )
            os.close(slave)
            self._keep.append(master)
            self._send = lambda data: os.write(master, data) and None
            self._read = self.process.stdout
        else:
            self.process = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env
            )
            self._send = lambda data: (self.process.stdin.write(data), self.process.stdin.flush()) and None
            self._read = self.process.stdout
        self._next = 0
        self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test_processes", "version": "1"},
        })
        self._send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        message = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        self._send((json.dumps(message) + "\n").encode())
        while True:
            line = self._read.readline()
            assert line, "the server closed its stdout"
            answer = json.loads(line)
            if answer.get("id") == self._next:
                return answer

    def launch(self, subagent: str) -> str:
        answer = self.request(
            "tools/call", {"name": "task", "arguments": {"subagent_name": subagent, "goal_prompt": "x", "async": True}}
        )
        text = answer["result"]["content"][0]["text"]
        return text.split("(ID: ")[1].split(")")[0]

    def end(self) -> None:
        """Ends the server: as a client does (end of input), then by pid if it
        lingers."""
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for kept in self._keep:
            if isinstance(kept, int):
                os.close(kept)
            else:
                kept.close()
        self.stderr.close()


def pids_of(path: Path) -> list[int]:
    return [int(line) for line in wait_for_file(path).split()]


def assert_gone_now(pids: list[int]) -> None:
    """Every pid is gone (zombies count as gone) right now; any left is killed."""
    left = [pid for pid in pids if not process_gone(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes {left} outlived the server (killed now)"


def assert_all_gone(pids: list[int], within: float) -> float:
    """Waits until every pid is gone (zombies count as gone); returns how long it took."""
    started = time.monotonic()
    while not all(process_gone(pid) for pid in pids):
        elapsed = time.monotonic() - started
        left = [pid for pid in pids if not process_gone(pid)]
        if elapsed > within:
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            pytest.fail(f"processes {left} still ran {elapsed:.1f} s later (killed now)")
        time.sleep(0.01)
    return time.monotonic() - started


def test_a_killed_server_leaves_no_subagent(tmp_path: Path) -> None:
    """A server killed with SIGKILL runs no code, yet its subagents end well within
    2 s — the subagent's shell, a grandchild that called setsid, a double-forked one,
    and a subagent that ignores SIGTERM: a dead server grants no grace."""
    server = RawServer(tmp_path, "pipe")
    try:
        task_id = server.launch("orphans")
        pids = pids_of(tmp_path / f"orphans-{task_id}.pids")
        assert len(pids) == 3 and not any(process_gone(pid) for pid in pids), pids
        stubborn_id = server.launch("stubborn")
        (stubborn,) = pids_of(tmp_path / f"stubborn-{stubborn_id}.pid")
        server.process.kill()
        server.process.wait()
        # The grace is 2 s: a stubborn subagent gone in half a second was not
        # given it.
        took = assert_all_gone([*pids, stubborn], within=0.5)
        print(f"every subagent process gone {took * 1000:.0f} ms after SIGKILL")
    finally:
        server.end()


def test_descendants_that_left_the_group_end_with_their_task(tmp_path: Path) -> None:
    """Cancelling a task ends all of its processes, also those that left its process group."""
    server = RawServer(tmp_path, "pipe")
    try:
        task_id = server.launch("orphans")
        pids = pids_of(tmp_path / f"orphans-{task_id}.pids")
        answer = server.request(
            "tools/call", {"name": "end_async_task", "arguments": {"task_id": task_id}}
        )
        assert not answer["result"].get("isError"), answer
        assert_all_gone(pids, within=4.0)
        assert server.process.poll() is None, "the server goes on"
    finally:
        server.end()


@pytest.mark.parametrize("stdin_kind", ["socketpair", "pipe", "terminal"])
@pytest.mark.parametrize("first_signal", [signal.SIGINT, signal.SIGTERM])
def test_the_server_exits_promptly_on_a_signal(
    tmp_path: Path, stdin_kind: str, first_signal: signal.Signals
) -> None:
    """As Claude Code stops its servers (the signal, then SIGTERM 100 ms later, then
    SIGKILL 400 ms after that), the server exits by itself, after ending its
    subagents at once — here one that ignores SIGTERM, whose grace would be 2 s."""
    server = RawServer(tmp_path, stdin_kind)
    try:
        task_id = server.launch("stubborn")
        (stubborn,) = pids_of(tmp_path / f"stubborn-{task_id}.pid")
        started = time.monotonic()
        server.process.send_signal(first_signal)
        try:
            status = server.process.wait(timeout=PROMPT_EXIT)
        except subprocess.TimeoutExpired:
            server.process.send_signal(signal.SIGTERM)
            time.sleep(0.4)
            server.process.kill()
            pytest.fail(f"still running {PROMPT_EXIT * 1000:.0f} ms after {first_signal.name} ({stdin_kind} stdin)")
        took = time.monotonic() - started
        print(f"{stdin_kind}, {first_signal.name}: exited with {status} after {took * 1000:.0f} ms")
        assert status == 0, f"exit status {status}"
        # The server waited for its subagents: they are gone by its exit.
        assert_gone_now([stubborn])
    finally:
        server.end()


def test_a_signal_after_end_of_input_cuts_the_grace_short(tmp_path: Path) -> None:
    """A client that closes stdin and then signals the server (as clients stop their
    servers) gets an exit as prompt as on a signal alone: the signal ends the
    subagents without their grace, also during the shutdown that end of input began."""
    server = RawServer(tmp_path, "pipe")
    try:
        task_id = server.launch("stubborn")
        (stubborn,) = pids_of(tmp_path / f"stubborn-{task_id}.pid")
        assert server.process.stdin is not None
        server.process.stdin.close()
        time.sleep(0.05)
        assert server.process.poll() is None, "the stubborn subagent holds the shutdown in its grace"
        started = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        try:
            status = server.process.wait(timeout=PROMPT_EXIT)
        except subprocess.TimeoutExpired:
            server.process.kill()
            pytest.fail(f"still running {PROMPT_EXIT * 1000:.0f} ms after SIGINT that followed end of input")
        took = time.monotonic() - started
        print(f"end of input, then SIGINT: exited with {status} after {took * 1000:.0f} ms")
        assert status == 0, f"exit status {status}"
        assert_gone_now([stubborn])
    finally:
        server.end()


@pytest.mark.parametrize("ending", ["end of input", "SIGINT"])
def test_a_server_without_a_state_dir_takes_its_outputs_along(tmp_path: Path, ending: str) -> None:
    """Without --state-dir the whole outputs live in a temporary directory, which the
    server removes when it exits, however it is asked to."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    server = RawServer(tmp_path, "pipe", tmpdir=tmpdir)
    try:
        answer = server.request(
            "tools/call", {"name": "task", "arguments": {"subagent_name": "big", "goal_prompt": "x"}}
        )
        text = answer["result"]["content"][0]["text"]
        found = re.search(r"\[whole output: (\S+) \((\d+) bytes\)\]", text)
        assert found, text
        output = Path(found.group(1))
        assert output.is_file() and output.stat().st_size == int(found.group(2)), output
        assert output.parent.parent == tmpdir, output
        if ending == "SIGINT":
            server.process.send_signal(signal.SIGINT)
        else:
            assert server.process.stdin is not None
            server.process.stdin.close()
        server.process.wait(timeout=5)
        assert server.process.returncode == 0, server.process.returncode
        assert not output.parent.exists(), "the temporary outputs outlived the server"
        # The server waits a bounded time for the removal (a busy disk can be
        # slow to unlink fresh files); what it leaves is renamed `.removing`,
        # and the next server sweeps it (tested below). A leftover is accepted
        # only when the server said its wait ran out; else nothing is left.
        left = [p.name for p in tmpdir.iterdir()]
        if any(name.endswith(".removing") for name in left):
            log = (tmp_path / "server-stderr.log").read_text()
            assert "still being removed" in log, (left, log)
            assert all(name.endswith(".removing") for name in left), left
        else:
            assert left == [], left
    finally:
        server.end()


def test_a_killed_servers_outputs_are_swept_by_the_next_server(tmp_path: Path) -> None:
    """A server killed with SIGKILL runs no code and leaves its temporary outputs;
    the next server that makes its own temporary directory there removes them, and
    leaves a running server's alone."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()

    def output_dir_of(server: RawServer) -> Path:
        answer = server.request(
            "tools/call", {"name": "task", "arguments": {"subagent_name": "big", "goal_prompt": "x"}}
        )
        text = answer["result"]["content"][0]["text"]
        found = re.search(r"\[whole output: (\S+) \(\d+ bytes\)\]", text)
        assert found, text
        return Path(found.group(1)).parent

    for name in ("killed", "running", "later"):
        (tmp_path / name).mkdir()
    killed = RawServer(tmp_path / "killed", "pipe", tmpdir=tmpdir)
    running = RawServer(tmp_path / "running", "pipe", tmpdir=tmpdir)
    later = None
    try:
        abandoned = output_dir_of(killed)
        kept = output_dir_of(running)
        killed.process.kill()
        killed.process.wait(timeout=5)
        assert abandoned.is_dir(), "SIGKILL runs no code: the outputs stay"
        later = RawServer(tmp_path / "later", "pipe", tmpdir=tmpdir)
        made = output_dir_of(later)
        wait_until(lambda: not abandoned.exists(), f"the sweep of {abandoned}")
        assert kept.is_dir() and made.is_dir(), "a running server's outputs were swept"
    finally:
        for server in (killed, running, later):
            if server is not None:
                server.end()
