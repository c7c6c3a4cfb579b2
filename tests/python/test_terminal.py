"""Views for a person show what a subagent wrote with its control and bidirectional
formatting characters escaped: a subagent that prints `ESC ] 0 ; … BEL` (set the
terminal's title) and `ESC [ 2K` (erase the line) cannot retitle or redraw the terminal
of `asynctask supervisor status` or of `asynctask run`'s progress line."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from helpers import Transcript, binary, connect, launched_id, wait_until
from test_durable import Workspace
from test_usage import subprocess_text, workspace  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio

HIJACK = "\x1b]0;TITLE-HIJACKED\x07\x1b[2KALL 512 TESTS PASSED \u202e"
SHOWN = "\\x1b]0;TITLE-HIJACKED\\x07\\x1b[2KALL 512 TESTS PASSED \\u{202e}"


def config(tmp_path: Path) -> Path:
    """A subagent that prints the hijacking line, then waits for the file `go`."""
    go = tmp_path / "go"
    script = f"printf '%s\\n' \"$LINE\"; while [ ! -e {go} ]; do sleep 0.05; done; printf 'done %s\\n' \"$LINE\""
    path = tmp_path / "terminal.toml"
    path.write_text(
        "[subagents.hijacker]\n"
        f"command = {json.dumps(['sh', '-c', script])}\n"
        f"env = {{ LINE = {json.dumps(HIJACK)} }}\n"
    )
    return path


async def test_supervisor_status_shows_a_progress_line_escaped(tmp_path: Path, workspace: Workspace) -> None:  # noqa: F811
    async with connect("legacy", tmp_path, *workspace.args(), config=config(tmp_path)) as client:
        transcript = Transcript(client)
        task_id = launched_id(
            await transcript.call("task", {"subagent_name": "hijacker", "goal_prompt": "go", "async": True})
        )

        def last_line() -> str | None:
            task = next(task for task in workspace.status()["tasks"] if task["id"] == task_id)
            return task.get("last_line")

        # The JSON carries the line as it was: JSON escapes it.
        assert wait_until(last_line, "the hijacking line in the status") == HIJACK
        text = subprocess_text(workspace)
        line = next(line for line in text.splitlines() if line.strip().startswith(task_id[:8]))
        assert line.endswith(f": {SHOWN}"), text
        assert "\x1b" not in text and "\u202e" not in text, repr(text)
        (tmp_path / "go").touch()


def test_run_shows_its_progress_line_and_its_output_escaped(tmp_path: Path) -> None:
    """`asynctask run` draws its progress line on a terminal (stderr is a pty here)."""
    master, slave = pty.openpty()
    run = subprocess.Popen(
        [str(binary()), "run", "--config", str(config(tmp_path)), "hijacker", "go"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=tmp_path,
    )
    os.close(slave)
    drawn = b""
    try:
        deadline = time.monotonic() + 30
        while SHOWN.encode() not in drawn:
            assert time.monotonic() < deadline, f"no progress line drawn: {drawn!r}"
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                drawn += os.read(master, 65536)
        (tmp_path / "go").touch()
        stdout, _ = run.communicate(timeout=30)
        while select.select([master], [], [], 0.1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end is closed
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        os.close(master)
    assert run.returncode == 0
    # Our own redraw (`\r ESC[K`) is the only escape sequence on the terminal.
    assert b"\x1b]" not in drawn and b"\x1b[2K" not in drawn and b"\x07" not in drawn, drawn
    assert "\u202e".encode() not in drawn, drawn
    assert stdout.decode() == f"{SHOWN}\ndone {SHOWN}\n"
