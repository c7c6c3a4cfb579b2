#!/usr/bin/env python3
"""Runs `asynctask mcp` inside the real MCP clients, Claude Code, Codex CLI and
Gemini CLI, against a scripted fake model (`fake_model.py`), and checks what
reached the model.

    python3 tests/hosts/run_hosts.py [--client claude|codex|gemini ...] [--binary PATH]

It builds nothing: `--binary` (default `$ASYNCTASK_BIN`, else
`target/release/asynctask` of this repository) must exist. For each client it

1. writes a subagents config with one small subagent, `hello` (a shell command
   that prints a result made for this run after about a second);
2. starts the fake model on 127.0.0.1 and registers the server with the client
   (Claude Code: `--mcp-config` with `--strict-mcp-config`; Codex: a
   `config.toml` in a temporary `CODEX_HOME`; Gemini CLI: `gemini mcp add
   --trust`, which writes the work directory's `.gemini/settings.json`), with a
   temporary `HOME`;
3. runs one non-interactive session (`claude -p`, `codex exec`, `gemini -p`) in
   which the fake model calls `task` with `async: true` (after loading the tools
   with `ToolSearch` where Claude Code defers them), then `check_async_tasks`,
   then `wait_async_tasks`, then answers;
   (The `claude-tasks` scenario runs Claude Code in an interactive session on a
   pseudo-terminal instead, which declares MCP Tasks: the `task` calls become
   tasks Claude Code polls, their results come as `<task-notification>` turns, a
   subagent's question is answered in Claude Code's form, and `/exit` ends it
   with a third task still running; see `run_interactive`.)
4. checks that the client called `task` and got the launch text back at once;
   that the subagent's result reached the model exactly once across the whole
   conversation, riding on a later tool result; that the session ended with the
   final answer; that afterwards no process the client started (the server, its
   subagents) is left, by pid (any left is killed, and the run fails); and how
   the server ended (its exit status, when the kernel reports it).

It measures the time from the client's start to the server's start, to the
model's first request and to the first tool result reaching the model, and how
long after the session's last answer the server exited. Under `--trace-signals`
and `--trace-wire` it runs the client under strace and reports the signals the
client sent the server, and the MCP handshake (`initialize` or
`server/discover`, protocol version, capabilities) and methods used.

Every process is watched through the kernel's process events (the netlink
process connector; they usually need root), which give each exit's status; without
them the harness polls /proc and cannot tell how the server ended. When it can
(root), the harness first moves itself into a new network namespace with only a
loopback interface, so nothing a client tries can reach any other address; Codex's
and Gemini CLI's proxy variables point at the fake model, which refuses and
records such attempts.

Exit status: 0 when every client run passed, 1 when one failed or a client asked
for (every client, unless `--client` names some) is not installed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import codecs
import ctypes
import datetime
import errno
import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts

import fake_model  # noqa: E402 (the script's own directory, added above)
from terminal import Terminal  # noqa: E402

CLIENTS = ("claude", "codex", "gemini", "claude-tasks")
# What each client is called in the report, the API its fake model speaks, and the
# program it runs (`--claude`, `$CLAUDE_BIN`, ...).
CLIENT_NAMES = {"claude": "Claude Code", "codex": "Codex CLI", "gemini": "Gemini CLI",
                "claude-tasks": "Claude Code, interactive (MCP Tasks)"}
CLIENT_APIS = {"claude": "anthropic", "codex": "responses", "gemini": "gemini", "claude-tasks": "anthropic"}
CLIENT_PROGRAMS = {"claude": "claude", "codex": "codex", "gemini": "gemini", "claude-tasks": "claude"}
SUBAGENT = "hello"
PROMPT = "Run the hello subagent in the background with the asynctask tools, then report what it said."
# The model name the clients send; the fake model answers to any.
CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "fake-model"
# After the client exits, how long its processes may take to end.
EXIT_GRACE = 5.0
# --trace-wire: the longest read or write strace records whole.
WIRE_MESSAGE_LIMIT = 1 << 20


# ------------------------------------------------------------ process watch


@dataclass
class Proc:
    """One process the harness saw: its parent, command line and life span."""

    pid: int
    ppid: int
    cmdline: list[str] = field(default_factory=list)
    starttime: int | None = None  # /proc/<pid>/stat field 22, to tell a reused pid
    t_start: float | None = None  # monotonic seconds (fork)
    t_exec: float | None = None  # monotonic seconds (last exec)
    t_exit: float | None = None
    status: int | None = None  # the wait status the kernel reported

    def ended_how(self) -> str:
        if self.status is None:
            return "ended (status not observable)" if self.t_exit is not None else "unknown"
        if self.status & 0x7F:
            number = self.status & 0x7F
            name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
            return f"killed by {name}"
        return f"exited with status {self.status >> 8}"

    @property
    def killed_by(self) -> int | None:
        return self.status & 0x7F if self.status is not None and self.status & 0x7F else None


def read_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, starttime) of a live process, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def read_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part] or None


def alive(proc: Proc) -> bool:
    """Whether the process still runs (a zombie does not), and is the one we saw."""
    if proc.t_exit is not None:
        return False
    stat = read_stat(proc.pid)
    if stat is None or stat[1] in ("Z", "X"):
        return False
    return proc.starttime is None or stat[2] == proc.starttime


class ProcessWatch:
    """Every process descending from the harness, from the kernel's process
    events when it gets them (the netlink process connector, which also
    reports each exit's wait status), and from polling /proc in any case."""

    NETLINK_CONNECTOR = 11
    CN_IDX_PROC = 1
    PROC_EVENT_FORK = 0x1
    PROC_EVENT_EXEC = 0x2
    PROC_EVENT_EXIT = 0x80000000

    def __init__(self) -> None:
        self.procs: dict[int, Proc] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.lost_events = False
        self.sock: socket.socket | None = None
        self.note = ""
        me = os.getpid()
        stat = read_stat(me)
        self.procs[me] = Proc(me, stat[0] if stat else 0, sys.argv[:1], stat[2] if stat else None, time.monotonic())
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, self.NETLINK_CONNECTOR)
            sock.bind((0, self.CN_IDX_PROC))
            try:
                sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
            listen = struct.pack("=IIIIHH", self.CN_IDX_PROC, 1, 0, 0, 4, 0) + struct.pack("=I", 1)
            sock.send(struct.pack("=IHHII", 16 + len(listen), 3, 0, 0, 0) + listen)
            sock.settimeout(0.2)
            self.sock = sock
            self.note = "kernel process events (exit statuses observable)"
        except OSError as err:
            self.note = f"polling /proc only (no process events: {err.strerror}); exit statuses not observable"

    @property
    def exact(self) -> bool:
        return self.sock is not None

    def start(self) -> None:
        if self.sock is not None:
            self.threads.append(threading.Thread(target=self.read_events, daemon=True))
        self.threads.append(threading.Thread(target=self.poll, daemon=True))
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=2)
        if self.sock is not None:
            self.sock.close()

    def tracked(self, pid: int) -> bool:
        return pid in self.procs

    def read_events(self) -> None:
        assert self.sock is not None
        while not self.stopping.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as err:
                if err.errno == errno.ENOBUFS:
                    self.lost_events = True
                    continue
                return
            offset = 0
            while offset + 16 <= len(data):
                length = struct.unpack_from("=I", data, offset)[0]
                if length < 16:
                    break
                self.event(data[offset : offset + length])
                offset += (length + 3) & ~3

    def event(self, message: bytes) -> None:
        if len(message) < 52:
            return
        what, _cpu, stamp = struct.unpack_from("=IIQ", message, 36)
        when = stamp / 1e9  # CLOCK_MONOTONIC, as time.monotonic()
        with self.lock:
            if what == self.PROC_EVENT_FORK:
                _ppid, ptgid, cpid, ctgid = struct.unpack_from("=IIII", message, 52)
                if cpid == ctgid and ptgid in self.procs:
                    known = self.procs.get(ctgid)
                    if known is None or known.t_exit is not None:
                        self.procs[ctgid] = Proc(ctgid, ptgid, [], None, when)
            elif what == self.PROC_EVENT_EXEC:
                _pid, tgid = struct.unpack_from("=II", message, 52)
                proc = self.procs.get(tgid)
                if proc is not None:
                    proc.t_exec = when
                    proc.cmdline = read_cmdline(tgid) or proc.cmdline
                    stat = read_stat(tgid)
                    if stat is not None and proc.starttime is None:
                        proc.starttime = stat[2]
            elif what == self.PROC_EVENT_EXIT:
                pid, tgid, code, _sig = struct.unpack_from("=IIII", message, 52)
                proc = self.procs.get(tgid)
                if pid == tgid and proc is not None and proc.t_exit is None:
                    proc.t_exit, proc.status = when, code

    def poll(self) -> None:
        while not self.stopping.wait(0.05):
            self.scan()

    def scan(self) -> None:
        """One pass over /proc: new descendants, command lines, starttimes."""
        try:
            entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return
        found: dict[int, tuple[int, str, int]] = {}
        for pid in entries:
            stat = read_stat(pid)
            if stat is not None:
                found[pid] = stat
        with self.lock:
            grew = True
            while grew:
                grew = False
                for pid, (ppid, state, start) in found.items():
                    proc = self.procs.get(pid)
                    if proc is not None and proc.starttime not in (None, start):
                        if proc.t_exit is None:
                            proc.t_exit = time.monotonic()  # reused pid: the one we knew is gone
                        continue
                    if proc is None and ppid in self.procs and state not in ("Z", "X"):
                        self.procs[pid] = Proc(pid, ppid, [], start, time.monotonic())
                        grew = True
            for pid, (_ppid, state, start) in found.items():
                proc = self.procs.get(pid)
                if proc is None or proc.t_exit is not None or proc.starttime not in (None, start):
                    continue
                proc.starttime = start
                if state not in ("Z", "X"):
                    proc.cmdline = read_cmdline(pid) or proc.cmdline
            if not self.exact:
                now = time.monotonic()
                for pid, proc in self.procs.items():
                    if proc.t_exit is None and pid != os.getpid():
                        stat = found.get(pid)
                        if stat is None or stat[1] in ("Z", "X") or (proc.starttime not in (None, stat[2])):
                            proc.t_exit = now

    def descendants(self, root: int) -> list[Proc]:
        """The root and every process it started, in the order they started."""
        with self.lock:
            children: dict[int, list[int]] = {}
            for proc in self.procs.values():
                children.setdefault(proc.ppid, []).append(proc.pid)
            out: list[Proc] = []
            todo = [root]
            seen: set[int] = set()
            while todo:
                pid = todo.pop()
                if pid in seen or pid not in self.procs:
                    continue
                seen.add(pid)
                out.append(self.procs[pid])
                todo.extend(children.get(pid, []))
        return sorted(out, key=lambda p: p.t_start or 0)


# --------------------------------------------------------- network isolation


def isolate_network() -> str:
    """Moves the harness (and so everything it starts) into a new network
    namespace whose only interface is loopback. Returns what happened."""
    if not sys.platform.startswith("linux"):
        return "not isolated (not Linux)"
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newnet = 0x40000000
    if libc.unshare(clone_newnet) != 0:
        return f"not isolated (unshare: {os.strerror(ctypes.get_errno())})"
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        sock.close()
    return "isolated: a network namespace with only loopback"


# ------------------------------------------------------------- the fake model


class FakeModelProcess:
    """`fake_model.py` as a child process, on a port it picked."""

    def __init__(self, run_dir: Path, done_file: Path) -> None:
        self.log = run_dir / "model-requests.json"
        self.stderr_path = run_dir / "fake-model.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE / "fake_model.py"), "--log", str(self.log),
                 "--subagent", SUBAGENT, "--done-file", str(done_file)],
                stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, cwd=run_dir,
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the fake model did not start: {line!r}; see {self.stderr_path}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def records(self) -> list[dict[str, Any]]:
        try:
            return json.loads(self.log.read_text())
        except (OSError, ValueError):
            return []

    def stop(self) -> None:
        """Ends it by its pid: SIGTERM, then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# ---------------------------------------------------------------- the clients


@dataclass
class Setup:
    """Where one client run keeps its files."""

    client: str
    exe: Path
    binary: Path
    run_dir: Path
    marker: str

    @property
    def home(self) -> Path:
        return self.run_dir / "home"

    @property
    def work(self) -> Path:
        return self.run_dir / "work"

    @property
    def done_file(self) -> Path:
        return self.run_dir / "subagent.done"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "subagent.pid"

    @property
    def server_log(self) -> Path:
        return self.run_dir / "server.stderr"

    @property
    def config(self) -> Path:
        return self.run_dir / "subagents.toml"

    @property
    def claude_debug_log(self) -> Path:
        return self.run_dir / "claude-debug.log"

    @property
    def strace_log(self) -> Path:
        return self.run_dir / "client.strace"


def write_subagents_config(setup: Setup) -> None:
    """One subagent: prints this run's marker after about a second. The marker is
    in its environment only, so the model can only learn it from the result."""
    script = (
        'echo $$ > "$HOSTS_DIR/subagent.pid"; sleep 1; '
        'echo "hello from the background: $HOSTS_MARKER"; touch "$HOSTS_DIR/subagent.done"'
    )
    setup.config.write_text(
        f"roots = [{json.dumps(str(setup.run_dir))}]\n\n"
        f"[subagents.{SUBAGENT}]\n"
        'description = "Says hello from the background after about a second"\n'
        f"command = [\"sh\", \"-c\", {json.dumps(script)}]\n"
        f"cwd = {json.dumps(str(setup.work))}\n"
        f"env = {{ HOSTS_DIR = {json.dumps(str(setup.run_dir))}, HOSTS_MARKER = {json.dumps(setup.marker)} }}\n"
    )


def server_command(setup: Setup) -> tuple[str, list[str]]:
    """`asynctask mcp --config FILE`, with its stderr kept in a file. The shell
    `exec`s the server, so the process the client starts and signals is the
    server itself."""
    return "/bin/sh", [
        "-c", 'exec "$0" mcp --config "$1" 2>>"$2"',
        str(setup.binary), str(setup.config), str(setup.server_log),
    ]


def base_env(setup: Setup) -> dict[str, str]:
    """A clean environment: nothing inherited but the user's name, so no real API
    key, proxy or config of the machine reaches the client."""
    node = shutil.which("node")
    path_dirs = [str(Path(node).parent)] if node else []
    path_dirs += [str(setup.exe.parent), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "PATH": ":".join(dict.fromkeys(path_dirs)),
        "HOME": str(setup.home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(setup.run_dir / "tmp"),
    }
    for name in ("USER", "LOGNAME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


@dataclass
class Invocation:
    """How to run one client: its session's command line and environment, and the
    commands that prepare it (run first, in the work directory, same environment)."""

    argv: list[str]
    env: dict[str, str]
    prepare: list[list[str]] = field(default_factory=list)


def claude_invocation(setup: Setup, model_url: str) -> Invocation:
    command, args = server_command(setup)
    mcp_config = setup.run_dir / "mcp.json"
    servers = {"asynctask": {"type": "stdio", "command": command, "args": args}}
    mcp_config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    env = base_env(setup) | {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "fake-key-for-the-host-tests",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    argv = [
        str(setup.exe), "-p", PROMPT,
        "--output-format", "stream-json", "--verbose",
        "--model", CLAUDE_MODEL,
        "--mcp-config", str(mcp_config), "--strict-mcp-config",
        "--debug-file", str(setup.claude_debug_log),
        "--allowedTools", "mcp__asynctask",
    ]
    return Invocation(argv, env)


def codex_invocation(setup: Setup, model_url: str) -> Invocation:
    command, args = server_command(setup)
    codex_home = setup.run_dir / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{CODEX_MODEL}"\n'
        'model_provider = "hosts_fake"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "read-only"\n'
        "check_for_update_on_startup = false\n"
        "\n[features]\nplugins = false\n"
        "\n[analytics]\nenabled = false\n"
        "\n[model_providers.hosts_fake]\n"
        'name = "fake model of the host tests"\n'
        f'base_url = "{model_url}/v1"\n'
        'env_key = "HOSTS_FAKE_API_KEY"\n'
        'wire_api = "responses"\n'
        "\n[mcp_servers.asynctask]\n"
        f"command = {json.dumps(command)}\n"
        f"args = {json.dumps(args)}\n"
        'default_tools_approval_mode = "approve"\n'
    )
    env = base_env(setup) | proxy_env(model_url) | {
        "CODEX_HOME": str(codex_home),
        "HOSTS_FAKE_API_KEY": "fake-key-for-the-host-tests",
    }
    argv = [str(setup.exe), "exec", "--skip-git-repo-check", "--json", "-C", str(setup.work), PROMPT]
    return Invocation(argv, env)


def proxy_env(model_url: str) -> dict[str, str]:
    """Anything the client tries to reach beyond the fake model goes to the fake
    model as a proxy request, which refuses it and records the address."""
    return {"HTTPS_PROXY": model_url, "HTTP_PROXY": model_url, "ALL_PROXY": model_url,
            "NO_PROXY": "127.0.0.1,localhost"}


def gemini_invocation(setup: Setup, model_url: str) -> Invocation:
    """The server is added as the README says (`gemini mcp add`, which writes the
    work directory's `.gemini/settings.json`), with `--trust`: in `-p` mode Gemini
    CLI does not offer the model any tool that would ask for a confirmation, so an
    untrusted server's tools never reach it. A user's settings hold the rest: the
    Gemini API key as the way to sign in, the work directory trusted (an untrusted
    one ignores its settings and stops `-p` with an error), no auto-update and no
    usage statistics. `GOOGLE_GEMINI_BASE_URL` points the API at the fake model."""
    command, args = server_command(setup)
    gemini_dir = setup.home / ".gemini"
    gemini_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    (gemini_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    (gemini_dir / "trustedFolders.json").write_text(json.dumps({str(setup.work): "TRUST_FOLDER"}, indent=2))
    env = base_env(setup) | proxy_env(model_url) | {
        "GOOGLE_GEMINI_BASE_URL": model_url,
        "GEMINI_API_KEY": "fake-key-for-the-host-tests",
    }
    add = [str(setup.exe), "mcp", "add", "--trust", "asynctask", command, *args]
    argv = [str(setup.exe), "-p", PROMPT, "--output-format", "stream-json"]
    return Invocation(argv, env, [add])


INVOCATIONS = {"claude": claude_invocation, "codex": codex_invocation, "gemini": gemini_invocation}


def find_client(name: str, override: str | None) -> Path | None:
    if override:
        return Path(override)
    env_override = os.environ.get(f"{name.upper()}_BIN")
    if env_override:
        return Path(env_override)
    found = shutil.which(name)
    return Path(found) if found else None


def client_version(exe: Path, env: dict[str, str]) -> str:
    try:
        done = subprocess.run([str(exe), "--version"], env=env, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unknown ({err})"
    return (done.stdout.strip() or done.stderr.strip()).splitlines()[-1] if (done.stdout or done.stderr) else "unknown"


# ------------------------------------------------------------------ one run


@dataclass
class Outcome:
    client: str
    version: str = ""
    missing: bool = False  # not installed
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.failures.append(message)


def kill_leftovers(procs: list[Proc]) -> list[Proc]:
    """SIGKILLs each process still running, by its pid; returns them."""
    left = [proc for proc in procs if alive(proc) and proc.pid != os.getpid()]
    for proc in left:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def describe(proc: Proc) -> str:
    return f"pid {proc.pid} ({' '.join(proc.cmdline)[:160] or '?'})"


def wait_for_exits(watch: ProcessWatch, root: int, limit: float) -> None:
    """Waits, at most `limit` seconds, until every process under `root` has ended
    and its end was recorded (the kernel's exit event, or a /proc scan)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        watch.scan()
        procs = watch.descendants(root)
        if not any(alive(p) for p in procs) and (watch.lost_events or all(p.t_exit is not None for p in procs)):
            return
        time.sleep(0.05)


def run_prepared(outcome: Outcome, setup: Setup, watch: ProcessWatch, invocation: Invocation) -> bool:
    """The commands that prepare a client's session (`gemini mcp add ...`): each
    must exit 0 within a minute and leave no process. Returns whether all did."""
    for number, argv in enumerate(invocation.prepare):
        out_path = setup.run_dir / f"prepare-{number}.out"
        what = f"`{' '.join([Path(argv[0]).name, *argv[1:5]])} ...`"
        with out_path.open("w") as out:
            proc = subprocess.Popen(argv, env=invocation.env, cwd=setup.work, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = None
        wait_for_exits(watch, proc.pid, EXIT_GRACE)
        left = kill_leftovers(watch.descendants(proc.pid))
        if rc is None:
            proc.wait()
        for proc_left in left:
            outcome.fail(f"{what} left a process running (killed): {describe(proc_left)}")
        if rc != 0:
            ended = "timed out" if rc is None else f"exited with status {rc}"
            outcome.fail(f"{what} {ended}: {out_path.read_text()[-500:]!r}")
            return False
        outcome.notes.append(f"prepared: {what}: {out_path.read_text().strip()[-200:]}")
    return not outcome.failures


def strace_argv(setup: Setup, trace_signals: bool, trace_wire: bool) -> list[str]:
    """`strace` recording, for every process under the client, the signals sent
    (`--trace-signals`), and the reads, writes and clones from which the MCP
    messages between the client and the server are read back (`--trace-wire`)."""
    calls = []
    if trace_signals:
        calls.append("kill,tkill,tgkill,pidfd_send_signal")
    if trace_wire:
        calls.append("read,write,clone,clone3,fork,vfork")
    argv = ["strace", "-f", "-tt", "-qq", "-o", str(setup.strace_log), "-e", f"trace={','.join(calls)}",
            "-e", "signal=none"]
    if trace_wire:
        argv += ["-s", str(WIRE_MESSAGE_LIMIT)]
    return argv


def run_client(client: str, exe: Path, binary: Path, watch: ProcessWatch, root: Path, timeout: float,
               trace_signals: bool, trace_wire: bool) -> Outcome:
    outcome = Outcome(client)
    run_dir = root / client
    for sub in ("home", "work", "tmp"):
        (run_dir / sub).mkdir(parents=True)
    setup = Setup(client, exe, binary, run_dir, f"hosts-result-{uuid.uuid4().hex[:16]}")
    write_subagents_config(setup)
    outcome.version = client_version(exe, base_env(setup))
    model = FakeModelProcess(run_dir, setup.done_file)
    try:
        invocation = INVOCATIONS[client](setup, model.url)
        argv, env = invocation.argv, invocation.env
        if trace_signals or trace_wire:
            argv = strace_argv(setup, trace_signals, trace_wire) + argv
        (run_dir / "command.json").write_text(json.dumps(
            {"prepare": invocation.prepare, "argv": argv, "env": env}, indent=2))
        if not run_prepared(outcome, setup, watch, invocation):
            return outcome
        stdout_path, stderr_path = run_dir / f"{client}.stdout", run_dir / f"{client}.stderr"
        with stdout_path.open("w") as out, stderr_path.open("w") as err:
            wall0, t0 = time.time(), time.monotonic()
            proc = subprocess.Popen(argv, env=env, cwd=setup.work, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            t_client_exit = time.monotonic()
        if rc is None:
            outcome.fail(f"the client did not finish within {timeout:.0f} s")
            kill_leftovers(watch.descendants(proc.pid))
            proc.wait()
        elif rc != 0:
            outcome.fail(f"the client exited with status {rc}; see {stderr_path}")
        # The client's processes may end just after it: give them a moment.
        wait_for_exits(watch, proc.pid, EXIT_GRACE)
        procs = watch.descendants(proc.pid)
        (run_dir / "processes.json").write_text(json.dumps(
            [{"pid": p.pid, "ppid": p.ppid, "cmdline": p.cmdline, "t_start": rel(p.t_start, t0),
              "t_exec": rel(p.t_exec, t0), "t_exit": rel(p.t_exit, t0), "ended": p.ended_how()} for p in procs],
            indent=1))
        for left in kill_leftovers(procs):
            outcome.fail(f"left running {EXIT_GRACE:.0f} s after the client exited (killed): {describe(left)}")
        if setup.pid_file.exists():
            group = int(setup.pid_file.read_text().strip() or 0)
            if group and group_alive(group):
                outcome.fail(f"the subagent's process group {group} is still alive (killed)")
                os.killpg(group, signal.SIGKILL)
        else:
            outcome.fail("the subagent never ran (no pid file)")
    finally:
        model.stop()
    check_conversation(outcome, setup, model.records(), t0, wall0)
    server = check_processes(outcome, setup, watch, procs, t0, t_client_exit, model.records())
    wire = Wire()
    if trace_wire:
        wire = read_wire(setup, wall0, t0, server.pid if server is not None else None)
        check_wire(outcome, setup, wire, t0)
    if server is not None:
        check_shutdown(outcome, setup, server, t0, wall0, wire)
    check_client_output(outcome, client, stdout_path)
    return outcome


def rel(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 4)


def group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None and stat[1] not in ("Z", "X"):
                try:
                    raw = (entry / "stat").read_text()
                    if int(raw[raw.rindex(")") + 2 :].split()[2]) == pgid:
                        return True
                except (OSError, ValueError):
                    continue
    return False


# ------------------------------------------------------------------ checking


def check_conversation(outcome: Outcome, setup: Setup, records: list[dict[str, Any]], t0: float,
                       wall0: float) -> None:
    """What the client sent the model: the tool results, and the marker in them."""
    main = [r for r in records if r.get("kind") == "main"]
    api = CLIENT_APIS[setup.client]
    for record in records:
        if record.get("error"):
            outcome.fail(f"model request {record['seq']}: {record['error']}")
    if not main:
        outcome.fail("the client never sent the model a request offering the asynctask tools")
        return
    outcome.times["first model request"] = main[0]["t"] - t0
    # Every tool result, once per call id, with the first request that carried it.
    results: dict[str, dict[str, Any]] = {}
    for record in main:
        for result in fake_model.tool_results(api, record["body"]):
            results.setdefault(result["call_id"], dict(result, seq=record["seq"], t=record["t"]))
    calls = [r for r in main if r.get("action", {}).get("call")]
    task_calls = [r for r in calls if r["action"]["tool"] == "task"]
    if not task_calls:
        outcome.fail("the model never got to call `task`")
        return
    task_results = [r for r in results.values() if r["tool"] == "task"]
    if not task_results:
        outcome.fail("the client called `task` but no result of it reached the model")
        return
    launch = task_results[0]
    if "Async task launched" not in (launch["text"] or "") or launch["is_error"]:
        outcome.fail(f"`task` did not launch a background task: {launch['text']!r}")
    outcome.times["first tool result at the model"] = launch["t"] - t0
    outcome.times["`task` call round trip"] = launch["t"] - task_calls[0]["t_end"]
    if setup.done_file.exists():
        t_done = t0 + setup.done_file.stat().st_mtime - wall0
        outcome.times["subagent done"] = t_done - t0
        if launch["t"] >= t_done:
            outcome.fail("`task` with async: true returned only after the subagent had finished")
    # The subagent's result: exactly once over the whole conversation.
    carriers = [r for r in results.values() if setup.marker in (r["text"] or "")]
    count = sum((r["text"] or "").count(setup.marker) for r in results.values())
    if count != 1:
        where = ", ".join(f"{r['tool']} (request {r['seq']})" for r in carriers) or "nowhere"
        outcome.fail(f"the subagent's result reached the model {count} times (in {where}), not once")
    for carrier in carriers:
        if carrier["tool"] == "task":
            outcome.fail("the result rode on the `task` call's own result")
        if "System Note: Async Task Status" not in carrier["text"]:
            outcome.fail(f"the result in {carrier['tool']}'s result is not in a System Note reminder")
        outcome.notes.append(f"the result rode on `{carrier['tool']}`'s result (model request {carrier['seq']})")
        outcome.times["result at the model"] = carrier["t"] - t0
    # The last request carries the whole conversation: the result in it once too.
    final = main[-1]
    history = fake_model.tool_results(api, final["body"])
    in_history = sum((r["text"] or "").count(setup.marker) for r in history)
    if in_history != 1:
        outcome.fail(f"the last request's history holds the result {in_history} times, not once")
    if final.get("action", {}).get("text") != fake_model.FINAL_TEXT:
        outcome.fail(f"the conversation did not reach its final answer (last step: {final.get('action')})")
    outcome.times["final answer sent"] = final["t_end"] - t0
    tools = [r["action"]["tool"] for r in calls]
    outcome.notes.append(f"tool calls: {' -> '.join(tools)}; {len(main)} main and "
                         f"{len(records) - len(main) - 1} other requests to the model")
    refused = sorted({r["path"] for r in records if r.get("api") == "proxy"})
    if refused:
        outcome.notes.append(f"refused {len(refused)} attempted outside address(es) (proxy): {', '.join(refused)}")
    others = sorted({f"{r['method']} {r['path']}" for r in records
                     if r.get("kind") not in ("main", "start", "refused")})
    if others:
        outcome.notes.append(f"other model requests answered: {', '.join(others)}")


def procs_under(procs: list[Proc], root: int) -> list[Proc]:
    """`root` and its descendants among `procs`."""
    out = [p for p in procs if p.pid == root]
    for proc in procs:  # in the order they started: parents first
        if proc.ppid in {p.pid for p in out} and proc not in out:
            out.append(proc)
    return out


def is_server(proc: Proc, binary: str) -> bool:
    """`<binary> mcp ...`, also when the binary is a script run by its interpreter."""
    args = proc.cmdline[:3]
    return any(arg == binary and args[i + 1 : i + 2] == ["mcp"] for i, arg in enumerate(args))


def check_processes(outcome: Outcome, setup: Setup, watch: ProcessWatch, procs: list[Proc], t0: float,
                    t_client_exit: float, records: list[dict[str, Any]]) -> Proc | None:
    """The server and its subagents: seen, ended, and how; returns the server."""
    binary = str(setup.binary)
    servers = [p for p in procs if is_server(p, binary)]
    under_servers = {p.pid for s in servers for p in procs_under(procs, s.pid)} - {s.pid for s in servers}
    subagents = [p for p in procs if p.pid in under_servers]
    outcome.times["client ran"] = t_client_exit - t0
    if not servers:
        outcome.fail("no `asynctask mcp` process was seen under the client")
        return None
    if len(servers) > 1:
        outcome.notes.append(f"the client started the server {len(servers)} times")
    server = servers[0]
    if server.t_exec is not None or server.t_start is not None:
        outcome.times["server started"] = (server.t_exec or server.t_start or t0) - t0
    outcome.notes.append(f"server {describe(server)}: {server.ended_how()}; subagent processes seen: "
                         f"{', '.join(str(p.pid) for p in subagents) or 'none'}")
    if server.t_exit is not None:
        outcome.times["server exited"] = server.t_exit - t0
        final = [r for r in records if r.get("kind") == "main"]
        if final:
            outcome.times["last answer -> server exit"] = server.t_exit - final[-1]["t_end"]
        outcome.times["server exit -> client exit"] = t_client_exit - server.t_exit
    if server.killed_by == signal.SIGKILL:
        outcome.fail("the server was killed with SIGKILL: it did not exit in time on its own")
    elif server.killed_by is not None:
        outcome.notes.append(f"the server died of {signal.Signals(server.killed_by).name}")
    for sub in subagents:
        if sub.killed_by == signal.SIGKILL:
            outcome.notes.append(f"subagent process {describe(sub)} was SIGKILLed")
    # The server keeps subagents' whole outputs in a temporary directory it removes
    # when it exits: one left behind means it did not finish its shutdown.
    for tmp in {setup.run_dir / "tmp", Path(tempfile.gettempdir())}:
        for left in tmp.glob(f"asynctask-{server.pid}-*"):
            outcome.fail(f"the server left its temporary outputs directory behind (removed): {left}")
            shutil.rmtree(left, ignore_errors=True)
    log = setup.server_log.read_text() if setup.server_log.exists() else ""
    if "panicked" in log:
        outcome.fail(f"the server panicked: {log}")
    if f"({SUBAGENT}) completed" not in log:
        outcome.fail(f"the server's log does not show the task completing: {log!r}")
    if watch.lost_events:
        outcome.notes.append("some kernel process events were lost (the machine is busy); /proc polling covered")
    return server


def strace_clock(wall0: float, t0: float) -> Callable[[str], float]:
    """Turns strace's `-tt` wall-clock time of day into monotonic seconds."""
    midnight = datetime.datetime.fromtimestamp(wall0).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()

    def monotonic(hms: str) -> float:
        hours, minutes, seconds = hms.split(":")
        return t0 + midnight + int(hours) * 3600 + int(minutes) * 60 + float(seconds) - wall0

    return monotonic


@dataclass
class WireMessage:
    t: float  # monotonic seconds: when the read or write that completed it returned
    to_server: bool
    message: Any


@dataclass
class Wire:
    """What the client and the server said to each other (`--trace-wire`)."""

    messages: list[WireMessage] = field(default_factory=list)
    stdin_closed: float | None = None  # when the server read end-of-file on its stdin
    unreadable: int = 0  # lines that were not JSON


STRACE_LINE = re.compile(r"^(\d+) +(\d\d:\d\d:\d\d\.\d+) (?:(\w+)\((.*)|<\.\.\. (\w+) resumed>(.*))$")
STRACE_UNFINISHED = " <unfinished ...>"
STRACE_IO = re.compile(r'^(\d+), "((?:[^"\\]|\\.)*)"(?:\.\.\.)?, \d+\) += (-?\d+)$')
STRACE_CLONE = re.compile(r"^(.*)\) += (\d+)$")


def strace_calls(path: Path) -> list[tuple[str, str, str, str]]:
    """Each system call in an `strace -f -tt` log as (tid, time of day, name,
    `arguments) = result`), an unfinished call joined with its resumption (and
    timed by it)."""
    calls: list[tuple[str, str, str, str]] = []
    pending: dict[str, tuple[str, str]] = {}  # tid -> (name, arguments so far)
    for line in path.read_text(errors="replace").splitlines():
        found = STRACE_LINE.match(line)
        if not found:
            continue
        tid, when = found[1], found[2]
        if found[3]:
            if found[4].endswith(STRACE_UNFINISHED):
                pending[tid] = (found[3], found[4][: -len(STRACE_UNFINISHED)])
            else:
                calls.append((tid, when, found[3], found[4]))
        elif tid in pending and pending[tid][0] == found[5]:
            name, head = pending.pop(tid)
            calls.append((tid, when, name, head + found[6]))
    return calls


def read_wire(setup: Setup, wall0: float, t0: float, server_pid: int | None) -> Wire:
    """The MCP messages in the strace log: what the server read from the client and
    wrote to it, joined in order per file descriptor, so a message split across
    calls is whole again. The server's threads are known from the `clone` calls (a
    thread shares its creator's process); its channel to the client is the
    descriptors whose first data is JSON-RPC (stdin and stdout, or, when they are
    pipes, the non-blocking copies the server makes of them)."""
    wire = Wire()
    if not setup.strace_log.exists() or server_pid is None:
        return wire
    monotonic = strace_clock(wall0, t0)
    process_of: dict[str, str] = {}  # tid -> the pid of its process
    streams: dict[tuple[bool, str], bytes] = {}  # (read by the server, fd) -> what is not a whole line yet
    for tid, when, name, rest in strace_calls(setup.strace_log):
        if name in ("clone", "clone3", "fork", "vfork"):
            done = STRACE_CLONE.match(rest)
            if done:
                process_of[done[2]] = process_of.get(tid, tid) if "CLONE_THREAD" in done[1] else done[2]
            continue
        if name not in ("read", "write") or process_of.get(tid, tid) != str(server_pid):
            continue
        io = STRACE_IO.match(rest)
        if io is None or int(io[3]) < 0:
            continue
        data, key = unescape(io[2])[: int(io[3])], (name == "read", io[1])
        if key not in streams:
            if not (data.startswith(b"{") and b'"jsonrpc"' in data.split(b"\n")[0]):
                continue
            streams[key] = b""
        if key[0] and not data:
            wire.stdin_closed = wire.stdin_closed or monotonic(when)
            continue
        streams[key] += data
        *lines, streams[key] = streams[key].split(b"\n")
        for line in lines:
            try:
                wire.messages.append(WireMessage(monotonic(when), key[0], json.loads(line)))
            except ValueError:
                wire.unreadable += 1
    return wire


def unescape(text: str) -> bytes:
    """strace's quoted string (C escapes, octal for other bytes) as bytes."""
    return codecs.escape_decode(text.encode("latin-1", "backslashreplace"))[0]


def check_wire(outcome: Outcome, setup: Setup, wire: Wire, t0: float) -> None:
    """The handshake (`initialize` or `server/discover`), the protocol version and
    the client's capabilities, and which methods the client used."""
    (setup.run_dir / "wire.json").write_text(json.dumps(
        [{"t": round(m.t - t0, 4), "to": "server" if m.to_server else "client", "message": m.message}
         for m in wire.messages], indent=1))
    if wire.unreadable:
        outcome.notes.append(f"wire: {wire.unreadable} line(s) were not JSON")
    sent = [m.message for m in wire.messages if m.to_server and isinstance(m.message, dict)]
    answers = {json.dumps(m.message.get("id")): m.message for m in wire.messages
               if not m.to_server and isinstance(m.message, dict) and "id" in m.message and "method" not in m.message}
    if not sent:
        outcome.notes.append("wire: no message from the client was recorded")
        return
    first = next((m for m in sent if "method" in m and "id" in m), sent[0])
    params = first.get("params") or {}
    meta = params.get("_meta") or {}
    if first.get("method") == "initialize":
        version, info, capabilities = params.get("protocolVersion"), params.get("clientInfo"), params.get("capabilities")
    else:
        version = meta.get("io.modelcontextprotocol/protocolVersion")
        info = meta.get("io.modelcontextprotocol/clientInfo")
        capabilities = meta.get("io.modelcontextprotocol/clientCapabilities")
    result = (answers.get(json.dumps(first.get("id"))) or {}).get("result") or {}
    agreed = result.get("protocolVersion") or version
    who = f"{(info or {}).get('name')} {(info or {}).get('version')}" if info else "no client info"
    outcome.notes.append(f"wire: the client opened with `{first.get('method')}` (protocol {version}; {who}); "
                         f"the session speaks {agreed}")
    outcome.notes.append(f"wire: client capabilities: {json.dumps(capabilities, sort_keys=True)}; MCP Tasks: "
                         f"{tasks_declared(capabilities)}")
    methods: dict[str, int] = {}
    for message in sent:
        if "method" in message:
            kind = message["method"] if "id" in message else f"{message['method']} (notification)"
            methods[kind] = methods.get(kind, 0) + 1
    outcome.notes.append("wire: the client sent " + ", ".join(f"{name} x{n}" for name, n in methods.items()))
    per_request = sorted({key for m in sent if m is not first for key in ((m.get("params") or {}).get("_meta") or {})})
    if per_request:
        outcome.notes.append(f"wire: later requests carry _meta {', '.join(per_request)}")


def tasks_declared(capabilities: Any) -> str:
    """Whether client capabilities declare MCP Tasks: the `tasks` capability
    (2025-11-25) or the `io.modelcontextprotocol/tasks` extension."""
    if not isinstance(capabilities, dict):
        return "not declared"
    found = []
    if "tasks" in capabilities:
        found.append(f"capability tasks = {json.dumps(capabilities['tasks'])}")
    extensions = capabilities.get("extensions") or {}
    if isinstance(extensions, dict) and "io.modelcontextprotocol/tasks" in extensions:
        found.append(f"extension io.modelcontextprotocol/tasks = {json.dumps(extensions['io.modelcontextprotocol/tasks'])}")
    return "; ".join(found) or "not declared"


def check_shutdown(outcome: Outcome, setup: Setup, server: Proc, t0: float, wall0: float, wire: Wire) -> None:
    """How the client stopped the server: the signals it sent (Claude Code's debug
    log; any client under --trace-signals), when it closed the server's stdin
    (under --trace-wire), and how soon the server was gone."""
    signals: list[tuple[float, str]] = []  # (monotonic time, what)
    if wire.stdin_closed is not None:
        signals.append((wire.stdin_closed, "the server read end-of-file on its stdin"))
    if setup.claude_debug_log.exists():
        pattern = re.compile(r'^(\S+Z) \[\w+\] MCP server "asynctask": (.*)$')
        for line in setup.claude_debug_log.read_text(errors="replace").splitlines():
            found = pattern.match(line)
            if found and re.search(r"SIG(INT|TERM|KILL)|exited cleanly|Cleanup timeout", found[2]):
                wall = datetime.datetime.fromisoformat(found[1].replace("Z", "+00:00")).timestamp()
                signals.append((t0 + wall - wall0, f"Claude Code: {found[2]}"))
    if setup.strace_log.exists():
        monotonic = strace_clock(wall0, t0)
        pattern = re.compile(r"^(\d+) +(\d\d):(\d\d):(\d\d\.\d+) (kill|tgkill|tkill|pidfd_send_signal)\((.*?)\) += (.*)$")
        for line in setup.strace_log.read_text(errors="replace").splitlines():
            found = pattern.match(line)
            if not found:
                continue
            args = [a.strip() for a in found[6].split(",")]
            target = args[0] if found[5] == "kill" else args[1] if found[5] == "tgkill" else args[0]
            if target.lstrip("-") != str(server.pid) or args[-1] in ("0", "SIG_0"):
                continue
            when = monotonic(f"{found[2]}:{found[3]}:{found[4]}")
            signals.append((when, f"pid {found[1]}: {found[5]}({found[6]}) = {found[7]}"))
    signals.sort()
    for when, what in signals:
        outcome.notes.append(f"shutdown at {(when - t0) * 1000:.0f} ms: {what}")
    first = next((when for when, what in signals if "SIG" in what), None)
    if first is not None and server.t_exit is not None:
        outcome.times["first signal -> server exit"] = server.t_exit - first
    if any("SIGKILL" in what and "Error" not in what for _, what in signals):
        outcome.fail("the client had to SIGKILL the server: it did not exit in time on its own")


def check_client_output(outcome: Outcome, client: str, stdout_path: Path) -> None:
    text = stdout_path.read_text() if stdout_path.exists() else ""
    if fake_model.FINAL_TEXT not in text:
        outcome.fail(f"the client did not print the final answer (see {stdout_path})")
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("type") != "result":
            continue
        if client == "claude" and (event.get("is_error") or event.get("subtype") != "success"):
            outcome.fail(f"Claude Code's result is an error: {line[:300]}")
        if client == "gemini" and event.get("status") != "success":
            outcome.fail(f"Gemini CLI's result is an error: {line[:300]}")


# ------------------------------------------------- Claude Code, interactive

# The second prompt of the interactive session: a subagent that asks a question.
ASKER = "asker"
ASKER_PROMPT = f"Run the {ASKER} subagent in the background with the asynctask tools, then report what it said."
QUESTION = "Deploy to production too?"
# The third: a subagent still running when the user types `/exit`.
SLEEPER = "sleeper"
SLEEPER_PROMPT = f"Run the {SLEEPER} subagent in the background with the asynctask tools, then report what it said."
EXIT_DIALOG = "Background work is running"
EXIT_AND_STOP = "❯ 1. Exit and stop tasks"
# Keys: the form's fields expand with the right arrow; Enter confirms.
KEY_RIGHT, KEY_DOWN, KEY_ENTER = "\x1b[C", "\x1b[B", "\r"
# Claude Code's debug log line for a `tools/call` answered with an MCP Task.
BACKGROUNDED = re.compile(r"MCP server \"asynctask\": Tool 'task' returned task (\S+) \(working\); backgrounded as (\S+)")


def write_asker_config(setup: Setup, marker: str) -> None:
    """A second subagent, `asker` (`stdin = "jsonl"`): asks `QUESTION` with the
    choices yes and no, waits for the answer on its stdin, and prints `marker`
    only when the answer is `no`."""
    script = (
        'echo $$ > "$HOSTS_DIR/asker.pid"; read -r goal; '
        f"printf '%s\\n' '{{\"type\":\"question\",\"id\":\"q1\",\"text\":\"{QUESTION}\",\"choices\":[\"yes\",\"no\"]}}' "
        '> "$ASYNCTASK_QUESTIONS"; read -r answer; '
        'case "$answer" in *\'"status":"answered","text":"no"\'*) echo "the answer was no: $HOSTS_MARKER";; '
        '*) echo "unexpected answer: $answer";; esac'
    )
    with setup.config.open("a") as config:
        config.write(
            f"\n[subagents.{ASKER}]\n"
            'description = "Asks whether to deploy to production too, and says the answer"\n'
            'stdin = "jsonl"\n'
            f"command = [\"sh\", \"-c\", {json.dumps(script)}]\n"
            f"cwd = {json.dumps(str(setup.work))}\n"
            f"env = {{ HOSTS_DIR = {json.dumps(str(setup.run_dir))}, HOSTS_MARKER = {json.dumps(marker)} }}\n"
        )


def write_sleeper_config(setup: Setup) -> None:
    """A third subagent, `sleeper`: leaves its pid and sleeps five minutes."""
    script = 'echo $$ > "$HOSTS_DIR/sleeper.pid"; sleep 300; echo "the sleeper woke up"'
    with setup.config.open("a") as config:
        config.write(
            f"\n[subagents.{SLEEPER}]\n"
            'description = "Sleeps five minutes"\n'
            f"command = [\"sh\", \"-c\", {json.dumps(script)}]\n"
            f"cwd = {json.dumps(str(setup.work))}\n"
            f"env = {{ HOSTS_DIR = {json.dumps(str(setup.run_dir))} }}\n"
        )


def claude_interactive_invocation(setup: Setup, model_url: str) -> Invocation:
    """`claude` without `-p`, on a terminal, with a prepared `~/.claude.json` in its
    temporary `HOME` that skips the first-run dialogs instead of answering them:
    `hasCompletedOnboarding` (else the welcome and theme screens, and a check that
    reaches for api.anthropic.com), `customApiKeyResponses.approved` holding the
    API key's last 20 characters (else "Detected a custom API key in your
    environment ... Do you want to use this API key?", "No" preselected), and the
    work directory's `hasTrustDialogAccepted` (else "Quick safety check: Is this a
    project you created or one you trust?")."""
    headless = claude_invocation(setup, model_url)
    argv = [arg for arg in headless.argv]
    del argv[1:3]  # "-p", PROMPT
    at = argv.index("--output-format")
    del argv[at : at + 3]  # "--output-format", "stream-json", "--verbose"
    env = dict(headless.env, TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    key = env["ANTHROPIC_API_KEY"]
    setup.home.mkdir(parents=True, exist_ok=True)
    (setup.home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
        "projects": {str(setup.work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }, indent=2))
    return Invocation(argv, env)


class Session:
    """The steps of one interactive session, each waiting for what it expects on
    the screen or at the fake model, within what is left of the run's time."""

    def __init__(self, outcome: Outcome, term: Terminal, model: FakeModelProcess, deadline: float) -> None:
        self.outcome, self.term, self.model, self.deadline = outcome, term, model, deadline

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def screen(self, what: str, *needles: str, since: int) -> bool:
        if self.term.wait_for(*needles, timeout=self.left(), since=since) is not None:
            return True
        self.outcome.fail(f"{what}: the screen did not show {' or '.join(map(repr, needles))} in time; "
                          f"it ends with {self.term.text[-700:]!r}")
        return False

    def type_line(self, what: str, line: str) -> bool:
        """Types `line` and waits until the input box shows it."""
        since = self.term.mark()
        self.term.type(line)
        return self.screen(what, line[-40:], since=since)

    def prompt(self, what: str, line: str, tries: int = 3, wait: float = 10.0) -> bool:
        """Types the prompt `line` and presses Enter until a request carrying it
        reaches the model (at most `tries` times, `wait` seconds apart): Enter
        typed while Claude Code is still finishing a turn can be lost, leaving
        the prompt in the input box; one pressed again on an empty box does
        nothing."""
        if not self.type_line(what, line):
            return False
        def carries(record: dict[str, Any]) -> bool:
            return line in json.dumps((record.get("body") or {}).get("messages"))
        for attempt in range(1, tries + 1):
            self.term.type(KEY_ENTER)
            if self.model_request(what, carries, within=wait, quiet=True) is not None:
                if attempt > 1:
                    self.outcome.notes.append(f"{what}: Enter took {attempt} presses")
                return True
        self.outcome.fail(f"{what}: no request carrying it reached the model after {tries} presses of Enter; "
                          f"the screen ends with {self.term.text[-700:]!r}")
        return False

    def key(self, what: str, key: str, *shows: str) -> bool:
        """Presses `key`, and waits until the screen shows one of `shows` (if any)."""
        since = self.term.mark()
        self.term.type(key)
        return not shows or self.screen(what, *shows, since=since)

    def press_until(self, what: str, key: str, *shows: str, tries: int = 3, wait: float = 5.0) -> bool:
        """Presses `key` until the screen shows one of `shows`, at most `tries`
        times, `wait` seconds apart: a key that arrives while the program is still
        moving the focus (its form has drawn the new state, not yet bound the keys
        to it) can be lost."""
        for attempt in range(1, tries + 1):
            since = self.term.mark()
            self.term.type(key)
            if self.term.wait_for(*shows, timeout=min(wait, self.left()), since=since) is not None:
                if attempt > 1:
                    self.outcome.notes.append(f"{what}: the key took {attempt} presses")
                return True
        self.outcome.fail(f"{what}: the screen did not show {' or '.join(map(repr, shows))} after {tries} "
                          f"presses; it ends with {self.term.text[-700:]!r}")
        return False

    def model_request(self, what: str, test: Callable[[dict[str, Any]], bool], within: float | None = None,
                      quiet: bool = False) -> dict[str, Any] | None:
        """Waits for a request at the fake model that passes `test` (its log is
        rewritten after each request), at most `within` seconds (else what is
        left of the run); a failure of the run unless `quiet`."""
        deadline = time.monotonic() + min(self.left(), within if within is not None else self.left())
        while True:
            found = next((r for r in self.model.records() if test(r)), None)
            if found is not None or time.monotonic() >= deadline or self.term.proc.poll() is not None:
                break
            time.sleep(0.1)
        if found is None and not quiet:
            self.outcome.fail(f"{what}: no such request reached the model in time")
        return found


def last_user_text(record: dict[str, Any]) -> str:
    messages = (record.get("body") or {}).get("messages") or []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return fake_model.text_of(users[-1].get("content")) if users else ""


def waiting_on(prompt: str) -> Callable[[dict[str, Any]], bool]:
    """The model's answer that it waits for the task `prompt`'s turn launched."""
    def test(record: dict[str, Any]) -> bool:
        return (record.get("kind") == "main" and (record.get("action") or {}).get("text") == fake_model.WAITING_TEXT
                and prompt in json.dumps((record.get("body") or {}).get("messages")))
    return test


def final_after_notification(marker: str) -> Callable[[dict[str, Any]], bool]:
    """The model's final answer to the new turn that brought `marker`'s task."""
    def test(record: dict[str, Any]) -> bool:
        text = last_user_text(record)
        return (record.get("kind") == "main" and (record.get("action") or {}).get("text") == fake_model.FINAL_TEXT
                and fake_model.TASK_NOTIFICATION in text and marker in text)
    return test


def run_interactive(exe: Path, binary: Path, watch: ProcessWatch, root: Path, timeout: float,
                    trace_wire: bool) -> Outcome:
    """Interactive Claude Code on a pseudo-terminal, which declares MCP Tasks: the
    model calls `task` (the client backgrounds it as an MCP Task and polls
    `tasks/get`), the result comes back as a `<task-notification>` turn; then a
    subagent that asks a question, answered in Claude Code's form (`tasks/update`);
    then one that sleeps, and `/exit` with it running (`Exit and stop tasks`)."""
    client = "claude-tasks"
    outcome = Outcome(client)
    run_dir = root / client
    for sub in ("home", "work", "tmp"):
        (run_dir / sub).mkdir(parents=True)
    setup = Setup(client, exe, binary, run_dir, f"hosts-result-{uuid.uuid4().hex[:16]}")
    asker_marker = f"hosts-answer-{uuid.uuid4().hex[:16]}"
    write_subagents_config(setup)
    write_asker_config(setup, asker_marker)
    write_sleeper_config(setup)
    outcome.version = client_version(exe, base_env(setup)) + ", interactive"
    model = FakeModelProcess(run_dir, setup.done_file)
    term: Terminal | None = None
    procs: list[Proc] = []
    wall0, t0 = time.time(), time.monotonic()
    t_client_exit = t0
    try:
        invocation = claude_interactive_invocation(setup, model.url)
        argv = (strace_argv(setup, False, True) if trace_wire else []) + invocation.argv
        (run_dir / "command.json").write_text(json.dumps({"argv": argv, "env": invocation.env}, indent=2))
        wall0, t0 = time.time(), time.monotonic()
        term = Terminal(argv, invocation.env, setup.work, run_dir / "screen.log")
        session = Session(outcome, term, model, t0 + timeout)
        # The prompt box is ready once the status line offers its shortcuts. The
        # prompt is typed at once, as a user would: the model may be told the server
        # is still connecting (it then searches its tools with `ToolSearch`).
        if (session.screen("start", "? for shortcuts", since=0)
                and session.prompt("the first prompt", PROMPT)
                and session.model_request("the hello task's result", final_after_notification(setup.marker))
                and session.prompt("the second prompt", ASKER_PROMPT)
                and session.screen("the question", QUESTION, since=0)
                and session.screen("the question's form", "requests your input", since=0)
                and session.key("open the answer's choices", KEY_RIGHT, "Space to select")
                and session.key("move to no", KEY_DOWN, "❯ no", "❯ ◯ no")
                and session.key("choose no", KEY_ENTER, "❯ Accept")
                and session.press_until("accept", KEY_ENTER, "↓ to manage", "? for shortcuts")):
            if (session.model_request("the asker's result", final_after_notification(asker_marker))
                    and session.prompt("the third prompt", SLEEPER_PROMPT)
                    and session.model_request("the sleeper's launch", waiting_on(SLEEPER_PROMPT))
                    and session.type_line("/exit", "/exit")
                    and session.press_until("/exit", KEY_ENTER, EXIT_DIALOG)
                    and session.screen("its first choice", EXIT_AND_STOP, since=0)):
                # Enter takes the first choice; pressed again if the dialog had not
                # bound it yet (as the question's form), while Claude Code runs.
                for _ in range(3):
                    term.type(KEY_ENTER)
                    if term.wait(5.0) is not None:
                        break
        session.deadline = max(session.deadline, time.monotonic() + 30)
        if term.proc.poll() is None:
            outcome.fail(f"Claude Code did not exit; the screen ends with {term.text[-700:]!r}")
        if term.proc.poll() is None:
            kill_leftovers(watch.descendants(term.pid))
            term.proc.wait()
        t_client_exit = time.monotonic()
        rc = term.proc.returncode
        if rc != 0:
            outcome.fail(f"Claude Code exited with status {rc}")
        wait_for_exits(watch, term.pid, EXIT_GRACE)
        procs = watch.descendants(term.pid)
        (run_dir / "processes.json").write_text(json.dumps(
            [{"pid": p.pid, "ppid": p.ppid, "cmdline": p.cmdline, "t_start": rel(p.t_start, t0),
              "t_exec": rel(p.t_exec, t0), "t_exit": rel(p.t_exit, t0), "ended": p.ended_how()} for p in procs],
            indent=1))
        for left in kill_leftovers(procs):
            outcome.fail(f"left running {EXIT_GRACE:.0f} s after Claude Code exited (killed): {describe(left)}")
        for name, pid_file in ((SUBAGENT, setup.pid_file), (ASKER, run_dir / "asker.pid"),
                               (SLEEPER, run_dir / "sleeper.pid")):
            if not pid_file.exists():
                outcome.fail(f"the {name} subagent never ran (no pid file)")
                continue
            group = int(pid_file.read_text().strip() or 0)
            if group and group_alive(group):
                outcome.fail(f"the {name} subagent's process group {group} is still alive (killed)")
                os.killpg(group, signal.SIGKILL)
    finally:
        if term is not None:
            if term.proc.poll() is None:
                kill_leftovers(watch.descendants(term.pid))
                term.proc.wait()
            term.close()
        model.stop()
    records = model.records()
    check_tasks_conversation(outcome, setup, records, asker_marker, t0, wall0)
    server = check_processes(outcome, setup, watch, procs, t0, t_client_exit, records)
    log = setup.server_log.read_text() if setup.server_log.exists() else ""
    if f"({ASKER}) completed" not in log:
        outcome.fail(f"the server's log does not show the {ASKER} task completing")
    if f"({SLEEPER}) cancelled" not in log:
        outcome.fail(f"the server's log does not show the {SLEEPER} task cancelled at the exit")
    wire = Wire()
    if trace_wire:
        wire = read_wire(setup, wall0, t0, server.pid if server is not None else None)
        check_wire(outcome, setup, wire, t0)
        check_tasks_wire(outcome, wire)
    if server is not None:
        check_shutdown(outcome, setup, server, t0, wall0, wire)
    return outcome


def check_tasks_wire(outcome: Outcome, wire: Wire) -> None:
    """Under --trace-wire: Claude Code declared MCP Tasks, polled `tasks/get` for
    both tasks and answered the question with `tasks/update`."""
    sent = [m.message for m in wire.messages if m.to_server and isinstance(m.message, dict)]
    first = next((m for m in sent if "method" in m), {})
    meta = (first.get("params") or {}).get("_meta") or {}
    if "not declared" in tasks_declared(meta.get("io.modelcontextprotocol/clientCapabilities")):
        outcome.fail("wire: interactive Claude Code did not declare MCP Tasks")
    polled = {str(((m.get("params") or {}).get("taskId"))) for m in sent if m.get("method") == "tasks/get"}
    if len(polled) < 2:
        outcome.fail(f"wire: Claude Code polled tasks/get for {len(polled)} task(s), not the two that ended")
    cancels = [m for m in sent if m.get("method") == "tasks/cancel"]
    outcome.notes.append(f"wire: tasks/cancel sent {len(cancels)} time(s)"
                         + (f", for {sorted({str((m.get('params') or {}).get('taskId')) for m in cancels})}"
                            if cancels else ""))
    if not any(m.get("method") == "tasks/update" for m in sent):
        outcome.fail("wire: the question's answer did not come through tasks/update")


def check_tasks_conversation(outcome: Outcome, setup: Setup, records: list[dict[str, Any]], asker_marker: str,
                             t0: float, wall0: float) -> None:
    """Both `task` calls became MCP Tasks, and each result reached the model
    exactly once: in a `<task-notification>` turn of its own, never in a tool
    result (no System Note), counted over the whole conversation."""
    main = [r for r in records if r.get("kind") == "main"]
    for record in records:
        if record.get("error"):
            outcome.fail(f"model request {record['seq']}: {record['error']}")
    if not main:
        outcome.fail("the client never sent the model a request offering the asynctask tools")
        return
    outcome.times["first model request"] = main[0]["t"] - t0
    task_calls = [r for r in main if (r.get("action") or {}).get("tool") == "task"]
    if len(task_calls) != 3:
        outcome.fail(f"the model called `task` {len(task_calls)} times, not 3 ({SUBAGENT}, {ASKER}, {SLEEPER})")
    results: dict[str, dict[str, Any]] = {}
    for record in main:
        for result in fake_model.tool_results("anthropic", record["body"]):
            results.setdefault(result["call_id"], dict(result, seq=record["seq"], t=record["t"]))
    task_results = [r for r in results.values() if r["tool"] == "task"]
    for result in task_results:
        if fake_model.MCP_TASK_STARTED not in (result["text"] or "") or result["is_error"]:
            outcome.fail(f"Claude Code did not run the `task` call as an MCP Task: {(result['text'] or '')[:300]!r}")
    if task_results and task_calls:
        outcome.times["first tool result at the model"] = task_results[0]["t"] - t0
        outcome.times["`task` call round trip"] = task_results[0]["t"] - task_calls[0]["t_end"]
    history = (main[-1].get("body") or {}).get("messages") or []
    for name, marker in ((SUBAGENT, setup.marker), (ASKER, asker_marker)):
        carriers = [m for m in history if marker in json.dumps(m)]
        count = sum(json.dumps(m).count(marker) for m in history)
        in_tools = [r for r in results.values() if marker in (r["text"] or "")]
        if count != 1 or len(carriers) != 1:
            outcome.fail(f"the {name} task's result is in the conversation {count} times, not once")
        if in_tools:
            outcome.fail(f"the {name} task's result rode on a tool result ({in_tools[0]['tool']}), "
                         "not only in its task notification")
        for carrier in carriers:
            text = fake_model.text_of(carrier.get("content"))
            if carrier.get("role") != "user" or fake_model.TASK_NOTIFICATION not in text or "<result>" not in text:
                outcome.fail(f"the {name} task's result did not come as a <task-notification> turn: {text[:300]!r}")
            if "System Note" in text:
                outcome.fail(f"the {name} task's result came in a System Note")
        # Exactly once, request by request: never twice in one, and the first
        # request holding it is the new turn that brought it.
        holding = [r for r in main if marker in json.dumps((r.get("body") or {}).get("messages"))]
        if any(json.dumps((r.get("body") or {}).get("messages")).count(marker) > 1 for r in holding):
            outcome.fail(f"a request to the model held the {name} task's result more than once")
        if holding:
            first = holding[0]
            if marker not in last_user_text(first):
                outcome.fail(f"the {name} task's result first reached the model inside the history, "
                             "not as a new turn")
            outcome.notes.append(f"the {name} task's result came as a <task-notification> turn "
                                 f"(model request {first['seq']})")
            outcome.times[f"{name}: result at the model"] = first["t"] - t0
            if name == SUBAGENT and setup.done_file.exists():
                outcome.times["hello: done -> result at the model"] = first["t"] - t0 - (
                    setup.done_file.stat().st_mtime - wall0)
    if setup.done_file.exists():
        outcome.times["subagent done"] = setup.done_file.stat().st_mtime - wall0
    finals = [r for r in main if (r.get("action") or {}).get("text") == fake_model.FINAL_TEXT]
    if len(finals) != 2:
        outcome.fail(f"the model gave its final answer {len(finals)} times, not twice (once per prompt)")
    else:
        outcome.times["final answer sent"] = finals[-1]["t_end"] - t0
    backgrounded = BACKGROUNDED.findall(setup.claude_debug_log.read_text(errors="replace")) \
        if setup.claude_debug_log.exists() else []
    if len(backgrounded) != 3:
        outcome.fail(f"Claude Code's debug log shows {len(backgrounded)} `task` calls answered with an MCP Task, "
                     "not 3")
    for task_id, local in backgrounded:
        outcome.notes.append(f"Claude Code backgrounded MCP Task {task_id} as its task {local}")
    tools = [r["action"].get("tool") or "text" for r in main if r.get("action")]
    outcome.notes.append(f"model steps: {' -> '.join(tools)}; {len(main)} main and "
                         f"{len(records) - len(main) - 1} other requests to the model")


# ---------------------------------------------------------------------- main


def outcome_word(outcome: Outcome) -> str:
    return "missing" if outcome.missing else "pass" if not outcome.failures else "fail"


def report(outcome: Outcome) -> None:
    status = "MISSING" if outcome.missing else "PASS" if not outcome.failures else "FAIL"
    print(f"\n== {outcome.client} ({outcome.version}): {status}")
    order = ["server started", "first model request", "first tool result at the model", "`task` call round trip",
             "subagent done", "result at the model", "final answer sent", "server exited", "last answer -> server exit",
             "first signal -> server exit", "server exit -> client exit", "client ran"]
    for key in order + [k for k in outcome.times if k not in order]:
        if key in outcome.times:
            print(f"   {key:<34} {outcome.times[key] * 1000:9.0f} ms")
    for note in outcome.notes:
        print(f"   note: {note}")
    for failure in outcome.failures:
        print(f"   FAIL: {failure}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", choices=[*CLIENTS, "all"], action="append",
                        help="run this client only (repeatable; default: all four scenarios, whose clients must "
                             "be installed; claude-tasks is Claude Code in an interactive session)")
    parser.add_argument("--binary", default=os.environ.get("ASYNCTASK_BIN") or str(REPO / "target/release/asynctask"),
                        help="the asynctask binary (default: $ASYNCTASK_BIN, else target/release/asynctask)")
    parser.add_argument("--claude", help="the claude executable (default: $CLAUDE_BIN, else claude on PATH)")
    parser.add_argument("--codex", help="the codex executable (default: $CODEX_BIN, else codex on PATH)")
    parser.add_argument("--gemini", help="the gemini executable (default: $GEMINI_BIN, else gemini on PATH)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds one client run may take")
    parser.add_argument("--keep", action="store_true", help="keep the run directory even when every run passed")
    parser.add_argument("--no-isolate", action="store_true", help="do not move into a loopback-only network namespace")
    parser.add_argument("--trace-signals", action="store_true",
                        help="run each client under strace to record the signals it sends the server (slower)")
    parser.add_argument("--trace-wire", action="store_true",
                        help="run each client under strace to record the MCP messages it exchanges with the server "
                             "(the handshake, protocol version and capabilities are reported; slower)")
    args = parser.parse_args()

    binary = Path(args.binary).resolve()
    if not binary.is_file():
        print(f"run_hosts: no asynctask binary at {binary}: build it with "
              "`cargo build --release -p asynctask-cli`, or pass --binary", file=sys.stderr)
        return 2
    if (args.trace_signals or args.trace_wire) and shutil.which("strace") is None:
        print("run_hosts: --trace-signals and --trace-wire need strace on PATH", file=sys.stderr)
        return 2
    asked = args.client or ["all"]
    wanted = [name for name in CLIENTS if "all" in asked or name in asked]
    # Every client asked for must be there: a missing one fails the run (narrow the
    # run with --client to leave one out).
    clients: list[tuple[str, Path | None]] = []
    for name in wanted:
        exe = find_client(CLIENT_PROGRAMS[name], getattr(args, CLIENT_PROGRAMS[name]))
        clients.append((name, exe if exe is not None and exe.exists() else None))

    watch = ProcessWatch()  # before the namespace: the process events live in the first one
    network = "not isolated (--no-isolate)" if args.no_isolate else isolate_network()
    watch.start()
    root = Path(tempfile.mkdtemp(prefix="asynctask-hosts-"))
    print(f"run_hosts: binary {binary}\nrun_hosts: processes: {watch.note}\nrun_hosts: network: {network}\n"
          f"run_hosts: files in {root}")
    outcomes: list[Outcome] = []
    try:
        for name, exe in clients:
            if exe is None:
                outcome = Outcome(name, "not installed", missing=True)
                program = CLIENT_PROGRAMS[name]
                outcome.fail(f"{CLIENT_NAMES[name]} is not installed: pass --{program} PATH or set "
                             f"{program.upper()}_BIN (or leave it out with --client)")
                outcomes.append(outcome)
                report(outcome)
                continue
            try:
                if name == "claude-tasks":
                    outcome = run_interactive(exe, binary, watch, root, args.timeout, args.trace_wire)
                else:
                    outcome = run_client(name, exe, binary, watch, root, args.timeout, args.trace_signals,
                                         args.trace_wire)
            except Exception as err:  # noqa: BLE001 (reported as this client's failure)
                outcome = Outcome(name)
                outcome.fail(f"the harness failed: {err!r}")
            outcomes.append(outcome)
            report(outcome)
    finally:
        # Whatever is still running of ours, by pid.
        watch.scan()
        leftovers = kill_leftovers([p for p in watch.descendants(os.getpid()) if p.pid != os.getpid()])
        watch.stop()
    for left in leftovers:
        print(f"run_hosts: killed a leftover process: {describe(left)}")
    passed = all(not o.failures for o in outcomes) and not leftovers
    if passed and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"\nrun_hosts: files kept in {root}")
    print(f"\nrun_hosts: {'PASS' if passed else 'FAIL'} "
          f"({', '.join(f'{o.client}: ' + outcome_word(o) for o in outcomes)})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
