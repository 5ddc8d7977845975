"""Real coding agents, unchanged, through the gateway: Claude Code (`claude -p --output-format
stream-json`) on /v1/messages and the Codex CLI (`codex exec --json`) on /v1/responses, each with
its default model (a bare name the gateway routes by pattern), default settings and no alias,
against a scripted loopback provider in the real wire format (tests/agent_upstreams.py). Each must
run its shell tool and end with the provider's text. Versions are pinned by
tests/agents/package-lock.json (`npm ci` there, as .ci/run does); without them the tests skip on a
laptop and fail under CI=true."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from tests.agent_upstreams import ANSWER, AnthropicScript, ResponsesScript
from tests.compat_support import settings_for
from tests.support import serve

BIN = Path(__file__).parent / "agents" / "node_modules" / ".bin"
MARKER = "agent-ran-shell"
TIMEOUT = float(os.environ.get("FOUNDRY_AGENT_TIMEOUT", "120"))


def _binary(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        reason = f"{path} is missing: run `npm ci` in tests/agents"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


async def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                   start_new_session=True)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=TIMEOUT)  # a guard: each runs in seconds
    except TimeoutError:
        os.killpg(process.pid, signal.SIGKILL)  # the CLI's children hold its pipes too
        out, err = await process.communicate()
        pytest.fail(f"{argv[0]} did not end: {err.decode()[-2000:]} {out.decode()[-3000:]}")
    return process.returncode or 0, out.decode(), err.decode()


def _home(tmp_path: Path) -> dict[str, str]:
    """A clean home (no user config) and a git work dir, PATH kept for the shell tool."""
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "work")], check=True)
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8", "TERM": "dumb"}


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_claude_code_runs_its_shell_tool_through_the_gateway(tmp_path: Path) -> None:
    claude = _binary("claude")
    script = AnthropicScript()
    async with serve(script.app()) as up, serve(create_app(settings_for(up))) as url:
        env = {**_home(tmp_path), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-gateway-client",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # no telemetry off the machine
        code, out, err = await _run([str(claude), "-p", "Run `echo agent-ran-shell` in the shell.",
                                     "--output-format", "stream-json", "--verbose", "--allowedTools", "Bash"],
                                    env, tmp_path / "work")
    assert code == 0, err[-2000:] + out[-2000:]
    lines = _lines(out)
    results = [b for m in lines if m.get("type") == "user" for b in m["message"]["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert any(MARKER in json.dumps(b.get("content")) for b in results), out[-3000:]
    assert lines[-1]["type"] == "result" and lines[-1]["result"] == ANSWER
    assert script.requests and "/" not in script.requests[0]["model"]  # its default model, by its bare name


# Codex's default model (gpt-6.2-sol) is `tool_mode: code_mode_only` with `use_responses_lite` in the
# catalog Codex ships (`codex debug models`): it sends no `tools` field and offers its tools in an
# `additional_tools` input item instead (a `namespace` holding the custom `exec` tool, JavaScript that calls
# `tools.exec_command`). A named older model gets classic function tools. Both must run the shell.
@pytest.mark.parametrize("model", [None, "gpt-5.1-codex"])
async def test_codex_runs_its_shell_tool_through_the_gateway(tmp_path: Path, model: str | None) -> None:
    codex = _binary("codex")
    script = ResponsesScript()
    async with serve(script.app()) as up, serve(create_app(settings_for(up))) as url:
        env = {**_home(tmp_path), "FOUNDRY_API_KEY": "sk-gateway-client", "CODEX_HOME": str(tmp_path / "home")}
        # The gateway as a model provider, as docs/drop-in.md shows it in ~/.codex/config.toml
        provider = f'{{name="Foundry Gateway",base_url="{url}/v1",env_key="FOUNDRY_API_KEY",wire_api="responses"}}'
        chosen = ["-m", model] if model else []
        code, out, err = await _run([str(codex), "exec", "--json", *chosen, "-c", "model_provider=foundry",
                                     "-c", f"model_providers.foundry={provider}",
                                     "Run `echo agent-ran-shell` in the shell."], env, tmp_path / "work")
    assert code == 0, err[-2000:] + out[-2000:]
    items = [e["item"] for e in _lines(out) if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    offered = [sorted(t.get("name", t.get("type")) for t in r.get("tools") or ()) for r in script.requests]
    assert commands and MARKER in commands[0].get("aggregated_output", ""), (offered, out[-3000:])
    assert items[-1]["type"] == "agent_message" and items[-1]["text"] == ANSWER
    assert script.requests and "/" not in script.requests[0]["model"]
