"""Claude Code, unchanged, using the gateway as its MCP server: given `--mcp-config` naming the
gateway's `/mcp` with a key header, headless (`claude -p`), it lists the tools that key may use and
calls one. Its model is a scripted loopback Anthropic upstream (behind the same gateway) that asks
for the gateway-served tool `basic__echo` (Claude Code offers it as `mcp__<config name>__basic__echo`)
and, once the tool's result is in the conversation, answers with text. The tool must really run on
the MCP server (its answer, `echo: ...`, comes from the server alone; the call is recorded in
GET /v1/mcp/calls) and its result reach the model. The CLI is pinned as in tests/test_real_agents.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from tests.agent_upstreams import USAGE
from tests.auth_support import ADMIN
from tests.compat_support import settings_for
from tests.support import HANG_GUARD, serve
from tests.test_mcp import BASIC, TOKEN, _token  # noqa: F401 - fixture
from tests.test_mcp_endpoint import KEYS, LIMITED
from tests.test_real_agents import _binary, _home, _lines, _run

GATEWAY_TOOL = "basic__echo"
MARKER = "claude-reached-mcp"
ANSWER = "The gateway's MCP tool said: echo: claude-reached-mcp"


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _tool_results(body: dict[str, Any]) -> list[Any]:
    return [b.get("content") for m in body.get("messages", []) if isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


@dataclass
class McpToolScript:
    """Calls the tool whose name ends with `__basic__echo` (an MCP tool the agent lists), then answers."""

    requests: list[dict[str, Any]] = field(default_factory=list)

    async def messages(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        tool = next((t["name"] for t in body.get("tools") or () if t.get("name", "").endswith(f"__{GATEWAY_TOOL}")),
                    None)
        start = _sse("message_start", {"message": {"id": "msg_mcp", "type": "message", "role": "assistant",
                                                   "model": body.get("model"), "content": [], "stop_reason": None,
                                                   "stop_sequence": None, "usage": {**USAGE, "output_tokens": 1}}})
        if tool and not _tool_results(body):
            block = {"type": "tool_use", "id": "toolu_mcp_1", "name": tool, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps({"text": MARKER})}
            frames = [start, _sse("content_block_start", {"index": 0, "content_block": block}),
                      _sse("content_block_delta", {"index": 0, "delta": delta}), _sse("content_block_stop", {"index": 0}),
                      _sse("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                             "usage": USAGE})]
        else:
            text = ANSWER if tool else "No MCP tool was offered."
            frames = [start, _sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                      _sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
                      _sse("content_block_stop", {"index": 0}),
                      _sse("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                             "usage": USAGE})]
        frames.append(_sse("message_stop", {}))

        async def stream() -> Any:
            for frame in frames:
                yield frame

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def count_tokens(self, request: Request) -> Response:
        return JSONResponse({"input_tokens": 12})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"]),
                                 Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"])])


async def test_claude_code_lists_and_calls_a_gateway_served_mcp_tool(tmp_path: Path) -> None:
    claude = _binary("claude")
    script = McpToolScript()
    async with serve(script.app()) as up:
        settings = settings_for(up, admin_key=ADMIN, keys=KEYS, mcp_servers=[BASIC], data_dir=str(tmp_path / "data"))
        app = create_app(settings)
        async with serve(app) as url:
            config = {"mcpServers": {"foundry": {"type": "http", "url": f"{url}/mcp",
                                                 "headers": {"Authorization": f"Bearer {LIMITED}"}}}}
            env = {**_home(tmp_path), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": ADMIN,
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "MCP_TIMEOUT": "60000"}
            code, out, err = await _run([str(claude), "-p", f"Call the echo tool with the text {MARKER}.",
                                         "--output-format", "stream-json", "--verbose", "--strict-mcp-config",
                                         "--mcp-config", json.dumps(config), "--allowedTools", "mcp__foundry"],
                                        env, tmp_path / "work")
            await app.state.mcp.journal.flush()
            async with httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as client:
                calls = (await client.get("/v1/mcp/calls", headers={"authorization": f"Bearer {ADMIN}"})).json()
    assert code == 0, err[-2000:] + out[-2000:]
    lines = _lines(out)
    init = next(m for m in lines if m.get("type") == "system" and m.get("subtype") == "init")
    assert [(s["name"], s["status"]) for s in init["mcp_servers"]] == [("foundry", "connected")], init["mcp_servers"]
    offered = {t["name"] for r in script.requests for t in r.get("tools") or ()}
    assert "mcp__foundry__basic__echo" in offered and "mcp__foundry__basic__add" in offered
    assert not any("basic__leak" in name for name in offered)  # outside the key's policy: never listed
    results = [r for body in script.requests for r in _tool_results(body)]
    assert any(f"echo: {MARKER}" in json.dumps(r) for r in results), results  # the server's answer reached the model
    assert lines[-1]["type"] == "result" and lines[-1]["result"] == ANSWER
    assert [(c["key_id"], c["server"], c["tool"], c["status"]) for c in calls["data"]] == [
        ("limited", "basic", "echo", "ok")]
    assert TOKEN not in out
