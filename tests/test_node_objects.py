"""The Vercel AI SDK's `streamObject` (tests/node/objects.mjs, pinned in tests/node/package-lock.json)
through the chat facade (`.chat()`: `response_format` json_schema) and through its default provider
(the Responses facade: `text.format` json_schema), to each provider behind the gateway: a scripted
loopback upstream in each wire format streams the object's JSON in pieces, and the client gets the
object, growing. Locally without node or node_modules the tests skip; with CI=true they fail."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from tests.compat_support import settings_for
from tests.support import require_node, run_node, serve

OBJECT = {"city": "Paris", "sunny": True}
PIECES = ['{"city": "Pa', 'ris", "sun', 'ny": true}']


@pytest.fixture(autouse=True)
def _node() -> None:
    require_node()


def _sse(data: dict[str, Any], kind: str | None = None) -> bytes:
    return (f"event: {kind}\n" if kind else "").encode() + f"data: {json.dumps(data)}\n\n".encode()


async def _frames(frames: list[bytes]) -> AsyncIterator[bytes]:
    for frame in frames:
        yield frame


def _chat(model: str) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        return _sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})
    usage = {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in PIECES), chunk({}, "stop"),
            _sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [],
                  "usage": usage}), b"data: [DONE]\n\n"]


def _messages(model: str) -> list[bytes]:
    def ev(kind: str, **data: Any) -> bytes:
        return _sse({"type": kind, **data}, kind)
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 1}}
    return [ev("message_start", message=message),
            ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            *(ev("content_block_delta", index=0, delta={"type": "text_delta", "text": p}) for p in PIECES),
            ev("content_block_stop", index=0),
            ev("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": 6}),
            ev("message_stop")]


def _responses(model: str) -> list[bytes]:
    seq = iter(range(100))

    def ev(kind: str, **data: Any) -> bytes:
        return _sse({"type": kind, **data, "sequence_number": next(seq)}, kind)
    text = "".join(PIECES)
    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress", "model": model,
                "output": [], "usage": None}
    part = {"type": "output_text", "text": "", "annotations": []}
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
    done = {**item, "status": "completed", "content": [{**part, "text": text}]}
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    usage = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 6,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    return [ev("response.created", response=response), ev("response.output_item.added", output_index=0, item=item),
            ev("response.content_part.added", **where, part=part),
            *(ev("response.output_text.delta", **where, delta=p) for p in PIECES),
            ev("response.output_text.done", **where, text=text),
            ev("response.content_part.done", **where, part={**part, "text": text}),
            ev("response.output_item.done", output_index=0, item=done),
            ev("response.completed", response={**response, "status": "completed", "output": [done], "usage": usage})]


@dataclass
class ObjectUpstream:
    """Every provider wire on one loopback server; each answers the object's JSON in pieces."""

    requests: list[dict[str, Any]] = field(default_factory=list)

    def _route(self, frames: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            return StreamingResponse(_frames(frames(body["model"])), media_type="text/event-stream")
        return endpoint

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._route(_chat), methods=["POST"]),
                                 Route("/v1/messages", self._route(_messages), methods=["POST"]),
                                 Route("/v1/responses", self._route(_responses), methods=["POST"])])


async def _object(scenario: str, url: str, model: str) -> dict[str, Any]:
    return await run_node("objects.mjs", scenario, url, model)


def _schema_sent(scenario: str, sent: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema the upstream received, in its own wire's field."""
    if "response_format" in sent:
        return sent["response_format"]["json_schema"]["schema"]
    if "text" in sent:
        return sent["text"]["format"]["schema"]
    return sent["output_config"]["format"]["schema"]


@pytest.mark.parametrize(("scenario", "model"), [
    ("chat", "openai/gpt-test"), ("chat", "anthropic/claude-test"),
    ("responses", "openai-responses/gpt-test"), ("responses", "anthropic/claude-test"), ("responses", "openai/gpt-test"),
])
async def test_ai_sdk_stream_object(scenario: str, model: str) -> None:
    upstream = ObjectUpstream()
    async with serve(upstream.app()) as up, serve(create_app(settings_for(up))) as url:
        seen = await _object(scenario, url, model)
    assert seen["error"] is None and seen["object"] == OBJECT, seen
    assert seen["partials"][-1] == OBJECT and len(seen["partials"]) >= 2  # the object grows as it streams
    schema = _schema_sent(scenario, upstream.requests[-1])
    assert set(schema["properties"]) == {"city", "sunny"}
