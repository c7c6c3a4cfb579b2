"""A small pseudo-terminal driver for the real-host tests: runs one program on a
pty of its own (its controlling terminal, in a new session), keeps everything it
drew, and lets the harness wait for text to appear and type into it.

Standard library only. The program's output is kept raw (`raw`, and in a file when
one is given) and as plain text (`text`: ANSI escape sequences and carriage returns
taken out, runs of blanks folded into one), which is what `wait_for` matches: a
full-screen program redraws in pieces, so text is matched with its blanks
ignored.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path

# CSI (ESC [ ... final byte), OSC (ESC ] ... BEL or ESC \), DCS/APC/PM/SOS strings,
# and two-byte escapes (ESC followed by one character).
ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[P_^X][^\x1b]*\x1b\\"
    r"|\x1b[@-Z\\-_=>()*+][0-9A-Za-z]?"
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
BLANKS = re.compile(r"\s+")


def plain(raw: str) -> str:
    """The text a terminal shows, without its escape sequences, blanks folded."""
    return BLANKS.sub(" ", CONTROL.sub(" ", ANSI.sub(" ", raw)))


def squeeze(text: str) -> str:
    """`text` with every blank taken out: what `wait_for` compares."""
    return BLANKS.sub("", text)


class Terminal:
    """One program on a pseudo-terminal of `rows` x `columns`."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path | None = None,
                 rows: int = 40, columns: int = 160) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.master = master
        self.raw = ""
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closed = False
        self.log = log.open("w") if log is not None else None
        # A new session whose controlling terminal is the pty (set in the child,
        # after `setsid`, before `exec`).
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            try:
                ready, _, _ = select.select([self.master], [], [], 0.2)
                if not ready:
                    if self.proc.poll() is not None and self.closed:
                        break
                    continue
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the last holder of the terminal's other side is gone
                data = b""
            if not data:
                break
            text = decoder.decode(data)
            with self.changed:
                self.raw += text
                if self.log is not None:
                    self.log.write(text)
                    self.log.flush()
                self.changed.notify_all()
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    @property
    def text(self) -> str:
        with self.lock:
            return plain(self.raw)

    def mark(self) -> int:
        """Where the output is now: `wait_for(..., since=mark)` looks only after it."""
        with self.lock:
            return len(self.raw)

    def wait_for(self, *needles: str, timeout: float, since: int = 0) -> str | None:
        """Waits until the output after `since` shows one of `needles` (blanks
        ignored); returns the one it found, or None when `timeout` passed or the
        program closed the terminal first."""
        wanted = [(needle, squeeze(needle)) for needle in needles]
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                seen = squeeze(plain(self.raw[since:]))
                for needle, squeezed in wanted:
                    if squeezed in seen:
                        return needle
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return None
                self.changed.wait(min(left, 0.5))

    def type(self, text: str) -> None:
        """Writes `text` as typed keys (`\\r` is Enter)."""
        data = text.encode()
        while data:
            written = os.write(self.master, data)
            data = data[written:]

    def wait(self, timeout: float) -> int | None:
        """The program's exit status, or None if it still runs after `timeout`."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Closes our side of the terminal (the program gets a hangup if it still
        runs) once the program has ended or was ended by the caller."""
        with self.changed:
            self.closed = True
        self.reader.join(timeout=2)
        try:
            os.close(self.master)
        except OSError:
            pass
        if self.log is not None:
            self.log.close()
