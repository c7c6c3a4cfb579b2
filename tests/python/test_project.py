"""Where subagents run: the project is the server's working directory, or the first of
the client's MCP roots when the client offers roots; a durable session's supervisor is
the project's, and a session whose supervisor goes away goes on with another.

Every test ends with no supervisor and no subagent running: durable ones stop their
supervisor (and kill it by pid if it would not stop).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from helpers import CONFIG, binary, connect, launched_id, process_gone, texts, wait_until

pytestmark = pytest.mark.anyio

MODE = "legacy"  # roots belong to the `initialize` handshake


def final_message(result) -> str:
    body = json.loads(texts(result)[0])
    return body.get("final_message", body.get("error", ""))


async def test_subagents_run_in_the_servers_working_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    async with connect(MODE, tmp_path) as client:
        result = await client.call_tool("task", {"subagent_name": "where", "goal_prompt": "pwd"})
    assert final_message(result) == str(project.resolve())


async def test_subagents_run_in_the_clients_first_root(tmp_path: Path) -> None:
    first, second = tmp_path / "first root", tmp_path / "second"
    first.mkdir()
    second.mkdir()

    async def roots(_context) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[types.Root(uri=first.resolve().as_uri()), types.Root(uri=second.resolve().as_uri())]
        )

    async with connect(MODE, tmp_path, list_roots_callback=roots) as client:
        result = await client.call_tool("task", {"subagent_name": "where", "goal_prompt": "pwd"})
        assert final_message(result) == str(first.resolve())
        # The opening's answers did not disturb the session: the tools are all there.
        listed = await client.list_tools()
        assert "wait_async_tasks" in {tool.name for tool in listed.tools}


async def test_project_given_on_the_command_line_wins_over_the_roots(tmp_path: Path) -> None:
    chosen, root = tmp_path / "chosen", tmp_path / "root"
    chosen.mkdir()
    root.mkdir()

    async def roots(_context) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=root.resolve().as_uri())])

    async with connect(MODE, tmp_path, "--project", str(chosen), list_roots_callback=roots) as client:
        result = await client.call_tool("task", {"subagent_name": "where", "goal_prompt": "pwd"})
    assert final_message(result) == str(chosen.resolve())


def supervisor_command(verb: str, state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary()), "supervisor", verb, "--state-dir", str(state), *extra],
        capture_output=True,
        text=True,
        timeout=30,
    )


def supervisor_pid(state: Path) -> int | None:
    done = supervisor_command("status", state, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["pid"]


def stop_supervisor(state: Path) -> None:
    pid = supervisor_pid(state)
    stopped = supervisor_command("stop", state)
    if stopped.returncode != 0 and pid:
        os.kill(pid, signal.SIGKILL)
    if pid:
        wait_until(lambda: process_gone(pid), f"the end of supervisor {pid}")


async def test_a_durable_workspace_is_the_projects_and_shows_it(tmp_path: Path) -> None:
    project = tmp_path / "project"
    state = project / ".asynctask"
    try:
        async with connect(MODE, tmp_path, "--durable") as client:
            result = await client.call_tool("task", {"subagent_name": "where", "goal_prompt": "pwd"})
            assert final_message(result) == str(project.resolve())
            status = json.loads(supervisor_command("status", state, "--json").stdout)
            assert status["project"] == str(project.resolve()), status
            assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
            human = supervisor_command("status", state).stdout
            assert f"project:    {project.resolve()}" in human, human
    finally:
        stop_supervisor(state)


async def test_a_session_goes_on_when_its_supervisor_goes_away(tmp_path: Path) -> None:
    state = tmp_path / "state"
    try:
        async with connect(MODE, tmp_path, "--durable", "--state-dir", str(state)) as client:
            first = supervisor_pid(state)
            assert first
            # Stopped from another shell: the session goes on with a new supervisor.
            stopped = supervisor_command("stop", state)
            assert stopped.returncode == 0, stopped.stderr
            result = await client.call_tool("task", {"subagent_name": "quick", "goal_prompt": "go"})
            assert not result.is_error, texts(result)
            assert "quick done" in texts(result)[0]
            second = supervisor_pid(state)
            assert second and second != first

            # Killed with a call in flight: that call gets an error that says so, at once.
            launched = await client.call_tool(
                "task", {"subagent_name": "slow", "goal_prompt": "wait", "async": True}
            )
            task_id = launched_id(launched)
            outcome: dict = {}
            async with anyio.create_task_group() as group:

                async def waiting() -> None:
                    outcome["wait"] = await client.call_tool(
                        "wait_async_tasks", {"task_id_prefixes": [task_id[:8]], "timeout_seconds": 30}
                    )

                group.start_soon(waiting)
                await anyio.sleep(0.3)  # the wait is in flight (it waits on a 30 s task)
                os.kill(second, signal.SIGKILL)
            wait = outcome["wait"]
            assert wait.is_error, texts(wait)
            assert "supervisor ended while this call ran" in texts(wait)[0], texts(wait)
            result = await client.call_tool("check_async_tasks", {"task_id": task_id[:8]})
            assert "interrupted" in " ".join(texts(result)), texts(result)
            third = supervisor_pid(state)
            assert third and third not in (first, second)
    finally:
        stop_supervisor(state)


async def test_a_supervisor_serves_new_tasks_with_the_config_as_it_is_now(tmp_path: Path) -> None:
    state, config = tmp_path / "state", tmp_path / "asynctask.toml"
    config.write_text('[subagents.a]\ncommand = ["echo", "from a"]\n')
    try:
        async with connect(MODE, tmp_path, "--durable", "--state-dir", str(state), config=config) as client:
            result = await client.call_tool("task", {"subagent_name": "a", "goal_prompt": "go"})
            assert "from a" in texts(result)[0]
        # A subagent added while the supervisor runs: the next session has it.
        config.write_text('[subagents.a]\ncommand = ["echo", "from a"]\n[subagents.b]\ncommand = ["echo", "from b"]\n')
        os.utime(config, (time.time() + 5, time.time() + 5))  # a new mtime, whatever the clock's grain
        async with connect(MODE, tmp_path, "--durable", "--state-dir", str(state), config=config) as client:
            result = await client.call_tool("task", {"subagent_name": "b", "goal_prompt": "go"})
            assert not result.is_error, texts(result)
            assert "from b" in texts(result)[0]
    finally:
        stop_supervisor(state)


async def test_the_guides_agent_adapter_passes_the_models_parameters_on(tmp_path: Path) -> None:
    """docs/examples/agent_subagent.py with a stand-in `claude` that records what it
    was given: the behaviour prompts and the tool whitelist reach its flags, the output
    spec its prompt, its `ASYNCTASK_VARS` line the task's variables, and the usage of
    its JSON result the task's usage."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        "prompt = sys.stdin.read()\n"
        "json.dump({'args': sys.argv[1:], 'prompt': prompt}, open(os.environ['ASYNCTASK_TEST_DIR'] + '/claude.json', 'w'))\n"
        "print(json.dumps({'type': 'result', 'result': 'the answer is 42\\nASYNCTASK_VARS {\"answer\": \"42\"}',\n"
        "    'usage': {'input_tokens': 3, 'cache_creation_input_tokens': 500, 'cache_read_input_tokens': 9000, 'output_tokens': 120},\n"
        "    'total_cost_usd': 0.0421, 'modelUsage': {'claude-sonnet-4-5': {}}}))\n"
    )
    fake.chmod(0o755)
    adapter = Path(__file__).resolve().parents[2] / "docs" / "examples" / "agent_subagent.py"
    config = tmp_path / "asynctask.toml"
    config.write_text(
        f'[subagents.claude]\ncommand = ["python3", "{adapter}", "claude"]\n'
        'inherit_env = ["ASYNCTASK_TEST_DIR"]\n'
    )
    path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    async with connect(MODE, tmp_path, config=config, env={"PATH": path}) as client:
        result = await client.call_tool(
            "task",
            {
                "subagent_name": "claude",
                "goal_prompt": "find the answer",
                "behaviour_prompts": ["be brief"],
                "tool_whitelist": ["Read", "Grep", "rm -rf"],
                "output_spec": [{"name": "answer", "description": "the number"}],
            },
        )
    body = json.loads(texts(result)[0])
    assert body["emitted_vars"] == {"answer": "42"}, body
    assert body["final_message"] == "the answer is 42", body
    assert body["usage"] == {
        "input_tokens": 9503, "output_tokens": 120, "cost_usd": 0.0421, "model": "claude-sonnet-4-5"
    }, body
    seen = json.loads((tmp_path / "claude.json").read_text())
    assert seen["args"] == [
        "-p", "--output-format", "json", "--append-system-prompt", "be brief", "--tools", "Read,Grep"
    ], seen
    assert seen["prompt"].startswith("find the answer\n\nWhen you are done"), seen
    assert '"answer": the number' in seen["prompt"], seen


async def test_the_agent_adapter_routes_claudes_permission_prompts_to_the_user(tmp_path: Path) -> None:
    """With `stdin = "jsonl"`, docs/examples/agent_subagent.py gives a stand-in `claude`
    `--permission-prompt-tool` and the MCP server behind it; the stand-in asks it, as
    Claude Code does, whether `Bash` may run; the prompt reaches the test client as an
    elicitation form, and its `allow` comes back to the stand-in as the tool's answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "sys.stdin.read()\n"
        "config = json.loads(args[args.index('--mcp-config') + 1])\n"
        "tool = args[args.index('--permission-prompt-tool') + 1]\n"
        "server = config['mcpServers']['asynctask_permissions']\n"
        "proc = subprocess.Popen([server['command'], *server['args']], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
        "def call(id, method, params):\n"
        "    proc.stdin.write(json.dumps({'jsonrpc': '2.0', 'id': id, 'method': method, 'params': params}) + '\\n'); proc.stdin.flush()\n"
        "    return json.loads(proc.stdout.readline())['result']\n"
        "call(1, 'initialize', {'protocolVersion': '2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 'fake', 'version': '0'}})\n"
        "names = [t['name'] for t in call(2, 'tools/list', {})['tools']]\n"
        "result = call(3, 'tools/call', {'name': tool.split('__')[-1], 'arguments': {'tool_name': 'Bash', 'input': {'command': 'rm -rf build'}}})\n"
        "decision = json.loads(result['content'][0]['text'])\n"
        "proc.stdin.close(); proc.wait()\n"
        "print(json.dumps({'type': 'result', 'result': f\"tools {names}; Bash: {decision['behavior']} {json.dumps(decision.get('updatedInput'))}\"}))\n"
    )
    fake.chmod(0o755)
    adapter = Path(__file__).resolve().parents[2] / "docs" / "examples" / "agent_subagent.py"
    config = tmp_path / "asynctask.toml"
    config.write_text(f'[subagents.claude]\nstdin = "jsonl"\ncommand = ["python3", "{adapter}", "claude"]\n')
    asked: list[Any] = []

    async def allow(_context: object, params: Any) -> Any:
        from mcp_types import ElicitResult

        asked.append(params.model_dump(by_alias=True, exclude_none=True))
        return ElicitResult(action="accept", content={"answer": "allow"})

    path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    async with connect(MODE, tmp_path, config=config, env={"PATH": path}, elicitation_callback=allow) as client:
        launched = await client.call_tool("task", {"subagent_name": "claude", "goal_prompt": "clean the build", "async": True})
        task_id = launched_id(launched)
        waited = await client.call_tool("wait_async_tasks", {"task_id_prefixes": [task_id], "timeout_seconds": 20})
    note = texts(waited)[-1]
    assert "tools ['ask']; Bash: allow {\\\"command\\\": \\\"rm -rf build\\\"}" in note, note
    assert len(asked) == 1, asked
    assert "Claude Code asks to use Bash with {\"command\": \"rm -rf build\"}. Allow it?" in asked[0]["message"], asked
    assert asked[0]["requestedSchema"]["properties"]["answer"]["enum"] == ["allow", "deny"], asked
