"""Vertex AI end to end: the gateway on loopback, configured by GOOGLE_CLOUD_PROJECT,
GOOGLE_CLOUD_LOCATION, VERTEX_BASE_URL and a service-account file (GOOGLE_APPLICATION_CREDENTIALS)
whose `token_uri` names a fake token endpoint that checks the signed assertion; the fake Vertex
accepts only the bearer it issued. Gemini on Vertex through the native API (every Gemini
recording), Claude on Vertex through the native API and the Messages facade (passed through to
streamRawPredict and relayed as sent)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.providers.sse import SSEDecoder
from app.settings import Settings
from tests.cloud_fakes import FakeGoogle, service_account
from tests.support import parse_sse, recordings, serve

GEMINI = {r.name: r for r in recordings("gemini")}
ANTHROPIC = {r.name: r for r in recordings("anthropic")}
ASK = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 300}
CLAUDE = "claude-sonnet-4-5@20250929"


@contextlib.asynccontextmanager
async def vertex_gateway(fake: FakeGoogle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         location: str = "us-east5") -> AsyncIterator[httpx.AsyncClient]:
    async with serve(fake.app()) as upstream:
        info, fake.public_key = service_account(f"{upstream}/token")
        path = tmp_path / "service-account.json"
        path.write_text(json.dumps(info))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        config = Settings(google_cloud_project="fake-project", google_cloud_location=location,
                          vertex_base_url=upstream, upstream_max_retries=0)
        async with serve(create_app(config)) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield client


@pytest.mark.parametrize("name", sorted(GEMINI))
async def test_every_gemini_recording_on_vertex(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGoogle([GEMINI[name].body])
    async with vertex_gateway(fake, tmp_path, monkeypatch) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": "vertex/gemini-2.5-pro"})
    assert answer.status_code == 200, answer.text
    events = parse_sse(answer.content)
    final = events[-1][2]
    assert [e for _, e, _ in events].count("final") == 1
    assert final["provider"] == "vertex" and final["message"]["content"] == GEMINI[name].expected["text"]
    (seen,) = fake.seen
    assert seen.path == ("/v1/projects/fake-project/locations/us-east5/publishers/google/models/gemini-2.5-pro"
                         ":streamGenerateContent?alt=sse")
    assert seen.headers["authorization"] == "Bearer ya29.fake-0" and fake.refused == 0


async def test_claude_on_vertex_through_the_native_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGoogle([ANTHROPIC["thinking-signature"].body])
    async with vertex_gateway(fake, tmp_path, monkeypatch, location="global") as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": f"vertex/{CLAUDE}"})
    final = parse_sse(answer.content)[-1][2]
    assert final["status"] == "ok", final
    assert final["message"]["content"] == ANTHROPIC["thinking-signature"].expected["text"]
    assert final["message"]["reasoning"][0]["signature"]
    (seen,) = fake.seen
    assert seen.path == f"/v1/projects/fake-project/locations/global/publishers/anthropic/models/{CLAUDE}:streamRawPredict"
    assert seen.body["anthropic_version"] == "vertex-2023-10-16" and seen.body["stream"] is True
    assert "model" not in seen.body


async def test_claude_code_on_vertex_through_the_messages_facade(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGoogle([ANTHROPIC["thinking-then-tool-use"].body])
    body: dict[str, Any] = {"model": f"vertex/{CLAUDE}", "max_tokens": 2048, "stream": True,
                            "messages": [{"role": "user", "content": "What's the weather?"}],
                            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]}
    async with vertex_gateway(fake, tmp_path, monkeypatch) as client:
        answer = await client.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert answer.status_code == 200, answer.text
    decoder = SSEDecoder()
    relayed = [(e.event, json.loads(e.data)) for e in [*decoder.feed(answer.content), *decoder.flush()]]
    decoder = SSEDecoder()
    assert relayed == [(e.event, json.loads(e.data)) for e in decoder.feed(ANTHROPIC["thinking-then-tool-use"].body)]
    assert fake.seen[0].body["tools"] == body["tools"]


async def test_an_error_from_claude_on_vertex_names_vertex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overloaded = (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
                  b'"message":"Overloaded"}}\n\n')
    fake = FakeGoogle([overloaded])
    async with vertex_gateway(fake, tmp_path, monkeypatch) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": f"vertex/{CLAUDE}"})
    assert answer.status_code >= 500, answer.text
    error = answer.json()["error"]
    assert error["provider"] == "vertex" and error["message"].startswith("vertex: "), error
