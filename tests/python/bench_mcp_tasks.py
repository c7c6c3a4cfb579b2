"""Figures of MCP Tasks as a client meets them, for docs/benchmarks.md: how long a
`task` call takes to be answered with its task (`working`), and how long after the
subagent ended a `tasks/get` first answers `completed` with its result — for the
per-session server and a durable session (through the workspace supervisor).

Run it with the built binary (a debug build unless `ASYNCTASK_BIN` names another):

    python tests/python/bench_mcp_tasks.py [TASKS]

Each task runs the `stamp` subagent, whose last command writes the time it ends (Unix
ns, the clock this script reads too). The script polls every
millisecond, so the completion figure is the server's own latency (the subagent's
exit noticed, the result claimed, the answer written); a client that polls at the
task's `pollIntervalMs` (5 s) adds half of it on average, 5 s at worst.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from helpers import LineServer
from test_mcp_tasks import TasksClient


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def stamp_of(directory: Path, task_id: str) -> int:
    path = directory / f"stamp-{task_id}"
    deadline = time.monotonic() + 10
    # Written by the subagent's last command, in one line.
    while not (path.is_file() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"no stamp for {task_id}"
        time.sleep(0.001)
    return int(path.read_text())


def measure(durable: bool, tasks: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        client = TasksClient(LineServer(directory, durable=durable))
        figures: dict[str, list[float]] = {"created": [], "first_get": [], "completed": []}
        try:
            client.request("server/discover")
            for _ in range(tasks):
                sent = time.perf_counter_ns()
                task_id = client.launch("stamp")
                created = time.perf_counter_ns()
                first = client.get(task_id)["result"]["status"]
                polled = time.perf_counter_ns()
                figures["created"].append((created - sent) / 1e6)
                if first == "working":
                    figures["first_get"].append((polled - created) / 1e6)
                while True:
                    answer = client.get(task_id)["result"]
                    if answer["status"] == "completed":
                        seen = time.time_ns()
                        break
                    time.sleep(0.001)
                figures["completed"].append((seen - stamp_of(directory, task_id)) / 1e6)
        finally:
            client.server.close()
        return figures


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    # Quiet: the client prints every exchange.
    sys.stdout, printed = open("/dev/null", "w"), sys.stdout
    try:
        runs = {"plain": measure(False, tasks), "durable": measure(True, tasks)}
    finally:
        sys.stdout = printed
    for name, figures in runs.items():
        for what, values in figures.items():
            if values:
                print(
                    f"{name:8} {what:10} n={len(values):3} median {statistics.median(values):7.2f} ms"
                    f"  p90 {percentile(values, 0.9):7.2f} ms  max {max(values):7.2f} ms"
                )


if __name__ == "__main__":
    main()
