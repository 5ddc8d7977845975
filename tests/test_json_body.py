"""JSON request bodies are parsed by orjson (app/api/json_body.py); what orjson refuses is read by the
standard library as before, and a body neither reads gets the same answer as before."""

from __future__ import annotations

import json

import httpx
import orjson

from app.main import create_app
from app.settings import Settings


def _client() -> httpx.AsyncClient:
    app = create_app(Settings())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0)  # type: ignore[arg-type]


def _generate(content: str = "Hi") -> bytes:
    return orjson.dumps({"model": "mock/simple", "messages": [{"role": "user", "content": content}]})


async def test_a_body_on_every_json_route_is_parsed_by_orjson_not_the_standard_library(monkeypatch):
    bodies = {
        "/v1/generate": _generate(),
        "/v1/stream": _generate(),
        "/v1/chat/completions": orjson.dumps({"model": "mock/simple", "messages": [{"role": "user", "content": "Hi"}]}),
        "/v1/messages": orjson.dumps({"model": "mock/simple", "max_tokens": 64,
                                      "messages": [{"role": "user", "content": "Hi"}]}),
        "/v1/responses": orjson.dumps({"model": "mock/simple", "input": "Hi"}),
    }
    parsed: list[bytes] = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda s, *a, **kw: parsed.append(s) or loads(s, *a, **kw))
    async with _client() as client:
        for path, body in bodies.items():
            answer = await client.post(path, content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 200, (path, answer.text)
    assert not [s for s in parsed if s in bodies.values()]


async def test_what_orjson_refuses_the_standard_library_reads_as_before():
    lone = b'{"model": "mock/simple", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    with_bom = b"\xef\xbb\xbf" + _generate()
    utf16 = _generate().decode().encode("utf-16")
    for body in (lone, with_bom, utf16):
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            raise AssertionError(f"orjson reads {body[:20]!r}: not a fallback case")
    async with _client() as client:
        for body in (with_bom, utf16):
            answer = await client.post("/v1/generate", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 200, (body[:20], answer.text)
        # read, then refused by the gateway's own check, naming the field (not a JSON error)
        answer = await client.post("/v1/generate", content=lone, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_unicode" and answer.json()["error"]["field"] == "messages.0.content"


async def test_a_body_neither_reads_gets_the_same_answers_as_before():
    async with _client() as client:
        native = await client.post("/v1/generate", content=b'{"model": "mock/simple", "messages": [',
                                   headers={"content-type": "application/json"})
        facade = await client.post("/v1/chat/completions", content=b"{not json",
                                   headers={"content-type": "application/json"})
    assert native.status_code == 400
    assert native.json()["error"]["code"] == "invalid_json" and native.json()["error"]["field"] == "body", native.text
    assert facade.status_code == 400 and facade.json()["error"]["type"] == "invalid_request_error", facade.text
