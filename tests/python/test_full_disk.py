"""A durable server whose state directory is on a full disk: a result whose delivery
the store cannot record reaches the model once, is not lost, and is recorded once
the disk has room again.

The state directory is a 2 MiB tmpfs the test mounts (the test runs as root, as the
project's CI does; without root it fails saying so) and unmounts at its end, after
the supervisor has stopped.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import (
    CONFIG,
    REMINDER_HEADER,
    Transcript,
    binary,
    connect,
    launched_id,
    process_gone,
    wait_until,
    wait_until_async,
)

pytestmark = pytest.mark.anyio

MODE = "legacy"


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


class FullDisk:
    """A tmpfs of 2 MiB holding the workspace's state directory, and a filler file
    that takes every byte left."""

    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.project = root / "project"
        self.filler = self.state / "filler"

    def mount(self) -> None:
        assert os.geteuid() == 0, "this test mounts a tmpfs: run it as root"
        self.state.mkdir()
        self.project.mkdir()
        mounted = run("mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(self.state))
        assert mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr.strip()}"

    def fill(self) -> None:
        """Writes until the disk is full."""
        with open(self.filler, "wb", buffering=0) as filler:
            chunk = b"\0" * 4096
            try:
                while True:
                    filler.write(chunk)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error

    def free(self) -> None:
        self.filler.unlink()

    def args(self) -> list[str]:
        return ["--durable", "--state-dir", str(self.state), "--project", str(self.project)]

    def supervisor(self, verb: str) -> subprocess.CompletedProcess[str]:
        return run(
            str(binary()), "supervisor", verb, "--config", str(CONFIG), "--state-dir", str(self.state),
            *(["--json"] if verb == "status" else []),
        )

    def status(self) -> dict:
        done = self.supervisor("status")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[FullDisk]:
    disk = FullDisk(tmp_path)
    disk.mount()
    try:
        yield disk
    finally:
        log = disk.state / "supervisor.log"
        print(f"--- supervisor log ---\n{log.read_text() if log.is_file() else ''}")
        if disk.filler.exists():
            disk.free()
        pid = disk.status().get("pid")
        stopped = disk.supervisor("stop")
        if pid:
            try:
                wait_until(lambda: process_gone(pid), f"supervisor {pid}'s exit after `supervisor stop`")
            finally:
                if not process_gone(pid):
                    os.kill(pid, signal.SIGKILL)
        # A mount whose last user has just exited can still be busy for a moment.
        wait_until(lambda: run("umount", str(disk.state)).returncode == 0, f"unmounting {disk.state}")
        assert stopped.returncode == 0, stopped.stderr


def reminder_ids(transcript: Transcript) -> list[str]:
    """The task ids the reminders of a transcript report, in order."""
    return [found for reminder in transcript.reminders() for found in re.findall(r'"agent_id": "([^"]+)"', reminder)]


def task(disk: FullDisk, task_id: str) -> dict | None:
    """The task as the supervisor holds it in memory."""
    return next((task for task in disk.status()["tasks"] if task["id"] == task_id), None)


def stored_delivery(disk: FullDisk, task_id: str) -> int | None:
    """When the store says task `task_id` was delivered (None: not yet)."""
    with sqlite3.connect(f"file:{disk.state / 'tasks.db'}?mode=ro", uri=True) as store:
        (notified_at,) = store.execute("SELECT notified_at FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return notified_at


async def test_a_result_whose_delivery_cannot_be_recorded_reaches_the_model_once(
    tmp_path: Path, disk: FullDisk
) -> None:
    async with connect(MODE, tmp_path, *disk.args()) as client:
        transcript = Transcript(client)
        task_id = launched_id(
            await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "x", "async": True})
        )
        # The task's end is in the store before the disk fills.
        await wait_until_async(lambda: (task(disk, task_id) or {}).get("status") == "completed", "the task's end")
        disk.fill()
        for _ in range(10):
            await transcript.call("check_async_tasks", {})
        ids = reminder_ids(transcript)
        assert ids == [task_id], f"the result reached the model {len(ids)} times:\n{transcript.dump()}"
        # Marked in memory (offered no more), and not in the store yet.
        assert task(disk, task_id)["delivered"] is True
        assert stored_delivery(disk, task_id) is None

        disk.free()
        # The mark is written ahead of the next change (or by the supervisor's
        # retries, with backoff): a launch.
        other = launched_id(
            await transcript.call("task", {"subagent_name": "quick", "goal_prompt": "y", "async": True})
        )
        await wait_until_async(lambda: stored_delivery(disk, task_id) is not None, "the mark's write")
        await wait_until_async(lambda: (task(disk, other) or {}).get("status") == "completed", "the second task's end")
        await transcript.call("check_async_tasks", {})
        assert reminder_ids(transcript) == [task_id, other], transcript.dump()

    async with connect(MODE, tmp_path, *disk.args()) as client:
        later = Transcript(client)
        await later.call("check_async_tasks", {})
        assert REMINDER_HEADER not in "".join(later.reminders()), later.dump()
