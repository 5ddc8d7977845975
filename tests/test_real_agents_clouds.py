"""Claude Code, unchanged, on a Bedrock-backed and a Vertex-backed Claude through the gateway: its
model set to `bedrock/...` or `vertex/...` (ANTHROPIC_MODEL and the small model), the gateway in
front of a fake cloud that checks the credentials (SigV4 recomputed with botocore; the bearer its
token endpoint issued) and answers with the real-agent script (tests/agent_upstreams.py) in the
cloud's own framing. It must run its shell tool and end with the script's text. Skips without the
pinned CLI (tests/agents, `npm ci`), fails under CI=true, as tests/test_real_agents.py does."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from scripts.build_cloud_fixtures import encode_frame
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from app.providers.cloud_auth import AwsSigner
from app.providers.sse import SSEDecoder
from app.settings import Settings
from tests.agent_upstreams import ANSWER, AnthropicScript
from tests.cloud_fakes import AWS_KEYS, FakeGoogle, service_account, sigv4_problem
from tests.support import serve
from tests.test_real_agents import MARKER, _binary, _home, _lines, _run

BEDROCK_CLAUDE = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_CLAUDE = "vertex/claude-sonnet-4-5@20250929"


async def _script_body(script: AnthropicScript, request: Request) -> bytes:
    answer = await script.messages(request)
    assert isinstance(answer, StreamingResponse)
    return b"".join([chunk if isinstance(chunk, bytes) else chunk.encode() async for chunk in answer.body_iterator])


def _bedrock(script: AnthropicScript, refused: list[str]) -> Starlette:
    async def invoke(request: Request) -> Response:
        problem = sigv4_problem(request, await request.body(), region="us-east-1")
        if problem is not None:
            refused.append(problem)
            return JSONResponse({"message": problem}, status_code=403)
        decoder = SSEDecoder()
        frames = [encode_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                               json.dumps({"bytes": base64.b64encode(e.data.encode()).decode()}).encode())
                  for e in decoder.feed(await _script_body(script, request))]
        return Response(b"".join(frames), media_type="application/vnd.amazon.eventstream")

    return Starlette(routes=[Route("/model/{model:path}/invoke-with-response-stream", invoke, methods=["POST"])])


def _env(tmp_path: Path, url: str, model: str) -> dict[str, str]:
    return {**_home(tmp_path), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-gateway-client",
            "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model, "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


async def _claude(tmp_path: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    code, out, err = await _run([str(_binary("claude")), "-p", "Run `echo agent-ran-shell` in the shell.",
                                 "--output-format", "stream-json", "--verbose", "--allowedTools", "Bash"],
                                env, tmp_path / "work")
    assert code == 0, err[-2000:] + out[-2000:]
    return _lines(out)


def _ran_its_shell(lines: list[dict[str, Any]]) -> None:
    results = [b for m in lines if m.get("type") == "user" for b in m["message"]["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert any(MARKER in json.dumps(b.get("content")) for b in results), lines[-3:]
    assert lines[-1]["type"] == "result" and lines[-1]["result"] == ANSWER


async def test_claude_code_on_bedrock(tmp_path: Path) -> None:
    _binary("claude")
    script, refused = AnthropicScript(), []
    async with serve(_bedrock(script, refused)) as upstream:
        settings = Settings(aws_region="us-east-1", bedrock_endpoint_url=upstream, upstream_max_retries=0)
        signer = AwsSigner(region="us-east-1", credentials=AWS_KEYS)
        async with serve(create_app(settings, clients={"bedrock-signer": signer})) as url:
            lines = await _claude(tmp_path, _env(tmp_path, url, BEDROCK_CLAUDE))
    _ran_its_shell(lines)
    assert script.requests and not refused
    assert all(r["anthropic_version"] == "bedrock-2023-05-31" and "model" not in r for r in script.requests)


async def test_claude_code_on_vertex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _binary("claude")
    script = AnthropicScript()
    fake = FakeGoogle([])

    async def raw_predict(request: Request) -> Response:
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if bearer not in fake.issued:
            fake.refused += 1
            return JSONResponse({"error": {"code": 401, "message": "bad bearer"}}, status_code=401)
        return await script.messages(request)

    app = Starlette(routes=[*fake.app().routes[:1], Route("/v1/{rest:path}", raw_predict, methods=["POST"])])
    async with serve(app) as upstream:
        info, fake.public_key = service_account(f"{upstream}/token")
        (tmp_path / "sa.json").write_text(json.dumps(info))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
        settings = Settings(google_cloud_project="fake-project", google_cloud_location="us-east5",
                            vertex_base_url=upstream, upstream_max_retries=0)
        async with serve(create_app(settings)) as url:
            lines = await _claude(tmp_path, _env(tmp_path, url, VERTEX_CLAUDE))
    _ran_its_shell(lines)
    assert script.requests and fake.refused == 0 and fake.issued
    assert all(r["anthropic_version"] == "vertex-2023-10-16" and r["stream"] is True for r in script.requests)
