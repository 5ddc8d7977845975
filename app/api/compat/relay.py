"""Same-wire facades (DESIGN.md section 10): the client's request passed through as written, and
the upstream's own events relayed to it as sent, in the order the validation gate released them.

What the gateway owns is not passed through: the resolved model, its own fields (`validators`,
`chunking`, `max_steps`, `provider_options`), the credentials. The provider's namespace headers
and the query string go upstream with the body. The relay's last word is the gateway's only when
the run did not end as the upstream said: a validator block or a failure ends the stream in the
provider's own shape (an `Ending` per wire); a run that ended ok already relayed the upstream's end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, Protocol

import orjson
from fastapi import Request
from starlette.responses import Response

from app.api.compat.common import GatewayExtras, failure
from app.api.compat.responses_request import OPAQUE_PREFIX, opaque_block
from app.api.sse import SSEResponse
from app.core.errors import GatewayError
from app.core.events import FinalEvent
from app.pipeline import Gateway, RunHandle, RunSpec
from app.providers.openai_responses_stream import reasoning_input_item
from app.providers.passthrough import Passthrough, Wire
from app.streams.frames import LastFrames
from app.streams.relay import Relay

__all__ = ["AnthropicEnding", "ChatEnding", "Ending", "ResponsesEnding", "own_reasoning", "passthrough_spec",
           "relay_answer", "same_wire"]

GATEWAY_FIELDS = frozenset(GatewayExtras.model_fields)
"""The gateway's own request fields: never sent upstream."""
NAMESPACE_HEADERS: dict[Wire, tuple[str, ...]] = {
    "anthropic-messages": ("anthropic-beta", "anthropic-version"),
    "openai-chat": ("openai-beta",),
    "openai-responses": ("openai-beta",),
}
"""The provider's headers a client sets for its API's features, forwarded as sent (the client's
`anthropic-version` wins over the gateway's)."""


def same_wire(gateway: Gateway, model: str, wire: Wire) -> bool:
    """The model (an alias or `provider/model`; a named route may mix wires) is served by a
    provider that speaks `wire`."""
    if not gateway.settings.dropin_passthrough or model in gateway.router.routes:
        return False
    try:
        adapter, _, upstream = gateway.registry.resolve(model)
    except GatewayError:
        return False  # answered when the run opens
    wire_for = getattr(adapter, "wire_for", None)  # a cloud whose wire depends on the model (Claude on Bedrock)
    return (wire_for(upstream) if wire_for is not None else getattr(adapter, "wire", None)) == wire


async def passthrough_spec(spec: RunSpec, request: Request, wire: Wire, *, relay: bool,
                           provider_options: dict[str, Any]) -> RunSpec:
    """`spec` carrying the client's own request; its options are only the caller's explicit
    `provider_options` (the body already has every field the client wrote)."""
    raw = orjson.loads(await request.body())
    body = own_reasoning(wire, {key: value for key, value in raw.items() if key not in GATEWAY_FIELDS})
    headers = {name: request.headers[name] for name in NAMESPACE_HEADERS[wire] if name in request.headers}
    passthrough = Passthrough(wire=wire, body=body, headers=headers, query=dict(request.query_params), relay=relay)
    return replace(spec, request=replace(spec.request, options=dict(provider_options), passthrough=passthrough))


def own_reasoning(wire: Wire, body: dict[str, Any]) -> dict[str, Any]:
    """The opaque reasoning the gateway issued (`fgw-reasoning.`..., its own value) in a same-wire
    body: a Responses reasoning item OpenAI Responses issued becomes that item again; any other
    (another provider's, which would not verify) is left out. Everything else stays as written."""
    if wire == "openai-responses" and isinstance(body.get("input"), list):
        body["input"] = [own for item in body["input"] if (own := _own_item(item)) is not None]
    elif wire == "anthropic-messages" and isinstance(body.get("messages"), list):
        for message in body["messages"]:  # the Messages facade wraps no Anthropic signature
            if isinstance(message, dict) and isinstance(message.get("content"), list):
                message["content"] = [b for b in message["content"] if not _gateways(b, "signature")]
    return body


def _gateways(item: Any, key: str) -> bool:
    return isinstance(item, dict) and isinstance(item.get(key), str) and item[key].startswith(OPAQUE_PREFIX)


def _own_item(item: Any) -> Any:
    if not (_gateways(item, "encrypted_content") and item.get("type") == "reasoning"):
        return item
    block = opaque_block(item["encrypted_content"], "", "input")
    if block.provider != "openai-responses" or block.signature is None:
        return None
    own = reasoning_input_item("", block.signature)
    return None if own is None else {**own, "summary": item.get("summary") or []}


class Ending(Protocol):
    """Watches the relayed frames of one wire; ends the stream when the run did not end as the
    upstream said (a block, a failure)."""

    def feed(self, data: bytes) -> bytes:
        """Relayed frames, as they go to the client (maybe less: a frame the client did not ask for)."""

    def end(self, final: FinalEvent) -> bytes: ...


def relay_answer(gateway: Gateway, handle: RunHandle, relay: Relay, ending: Ending,
                 headers: dict[str, str]) -> Response:
    """The relayed stream; a client that leaves cancels the run."""

    async def frames() -> AsyncIterator[bytes]:
        async for data, final in relay.follow():
            out = ending.feed(data) if data else b""
            if final is not None:  # the end of the body goes with the last frames (app/api/sse.py)
                out += ending.end(final)
                if out:
                    yield LastFrames(out)
            elif out:
                yield out

    return SSEResponse(frames(), ping_seconds=gateway.settings.ping_seconds,
                       send_timeout=gateway.settings.send_timeout_seconds,
                       headers={"x-stream-id": handle.log.info.stream_id, **headers},
                       on_disconnect=lambda: handle.cancel("client_gone"))


def _object(data: bytes) -> dict[str, Any] | None:
    """A provider's frame data as a JSON object; None when it is not one (the provider's JSON is
    untrusted: the run's normalizer fails the stream for it, and the relay must still end it)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class AnthropicEnding:
    """Messages: a block closes the open content block and ends with `stop_reason: refusal`; a
    failure is an `error` event (the anthropic SDK raises it)."""

    __slots__ = ("_starts", "_stops", "_started")

    def __init__(self) -> None:
        self._starts = self._stops = 0
        self._started = False

    def feed(self, data: bytes) -> bytes:
        self._started = self._started or b"event: message_start\n" in data
        self._starts += data.count(b"event: content_block_start\n")
        self._stops += data.count(b"event: content_block_stop\n")
        return data

    def end(self, final: FinalEvent) -> bytes:
        if final.status == "ok":
            return b""
        if final.status == "blocked" and self._started:
            out = b""
            if self._starts > self._stops:  # blocks are sequential: the open one is the last started
                out = _frame("content_block_stop", {"type": "content_block_stop", "index": self._starts - 1})
            delta = {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": None},
                     "usage": {"output_tokens": final.usage.output_tokens}}
            return out + _frame("message_delta", delta) + _frame("message_stop", {"type": "message_stop"})
        code, message = failure(final)
        kind = "invalid_request_error" if final.status == "blocked" else "api_error"
        return _frame("error", {"type": "error", "error": {"type": kind, "message": message, "code": code}})


_CHOICES = (b'"choices":[{', b'"choices": [{')
"""A chunk with choices, in compact JSON (OpenAI's) or with spaces (inside a string its quotes would be
escaped): never the usage chunk a client did not ask for, so it is kept without being read."""


class ChatEnding:
    """Chat completions: a block ends with `finish_reason: content_filter`; a failure with a chunk
    carrying `error` (the openai SDK raises it); then `[DONE]`. The usage chunk the gateway asked
    for is not passed on to a client that did not ask for it."""

    __slots__ = ("_usage", "_head")

    def __init__(self, *, include_usage: bool) -> None:
        self._usage = include_usage
        self._head: dict[str, Any] | None = None

    def feed(self, data: bytes) -> bytes:
        if self._head is None or (not self._usage and b'"usage"' in data):  # a chunk it takes out names usage
            frames = data.split(b"\n\n")
            kept = [f for f in frames if self._keep(f)]
            if len(kept) != len(frames):
                data = b"\n\n".join(kept)
        return data

    def _keep(self, frame: bytes) -> bool:
        if self._head is not None and (self._usage or _CHOICES[0] in frame or _CHOICES[1] in frame):
            return True  # kept whatever else it holds: nothing to read in it
        chunk = _object(frame[6:]) if frame.startswith(b"data: {") else None
        if chunk is None:  # not a chunk, or a broken one (passed on as sent; the run ends with its error)
            return True
        if self._head is None:
            self._head = {key: chunk.get(key) for key in ("id", "object", "created", "model")}
        return self._usage or bool(chunk.get("choices")) or "usage" not in chunk

    def end(self, final: FinalEvent) -> bytes:
        if final.status == "ok":
            return b""
        head = self._head or {"id": "chatcmpl-" + final.model, "object": "chat.completion.chunk",
                              "created": int(time.time()), "model": final.model}
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "content_filter"}
        chunk: dict[str, Any] = {**head, "choices": [choice]}
        if final.status != "blocked":
            code, message = failure(final)
            chunk["error"] = {"message": message, "type": "server_error", "param": None, "code": code}
            choice["finish_reason"] = "error"
        return b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"


class ResponsesEnding:
    """Responses: a block ends with `response.incomplete` (`content_filter`); a failure with
    `error` and `response.failed`. Numbered after the upstream's own events."""

    __slots__ = ("_seq", "_response")

    def __init__(self) -> None:
        self._seq = 0
        self._response: dict[str, Any] = {}

    def feed(self, data: bytes) -> bytes:
        self._seq += data.count(b"\n\n")
        if not self._response and b"event: response.created\n" in data:
            for frame in data.split(b"\n\n"):
                if frame.startswith(b"event: response.created\n"):
                    created = _object(frame.partition(b"\ndata: ")[2]) or {}
                    response = created.get("response")
                    self._response = response if isinstance(response, dict) else {}
        return data

    def _emit(self, kind: str, **fields: Any) -> bytes:
        out = _frame(kind, {"type": kind, **fields, "sequence_number": self._seq})
        self._seq += 1
        return out

    def end(self, final: FinalEvent) -> bytes:
        if final.status == "ok":
            return b""
        response = {**self._response, "output": []}
        if final.status == "blocked":
            response.update(status="incomplete", incomplete_details={"reason": "content_filter"})
            return self._emit("response.incomplete", response=response)
        code, message = failure(final)
        response.update(status="failed", error={"code": "rate_limit_exceeded" if code == "rate_limited"
                                                  else "server_error", "message": message})
        return (self._emit("error", code=code, message=message, param=None)
                + self._emit("response.failed", response=response))
