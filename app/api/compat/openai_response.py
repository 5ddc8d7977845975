"""Canonical events -> OpenAI Chat Completions: `chat.completion.chunk` frames, the JSON
`chat.completion`, and errors in OpenAI's format.

- Reasoning goes out as `delta.reasoning_content` (the convention of compatible servers).
- A model's refusal (token events marked `refusal`) goes out as `delta.refusal` / `message.refusal`
  with `finish_reason: "stop"`, as OpenAI sends it; a validator's block is `content_filter`.
- Only the caller's tool calls become `tool_calls` (numbered from 0 in order of appearance); the
  gateway's tools and the provider's server tools run where they are and are not shown: their
  activity is in the stream's transcript (`GET /v1/stream/{id}/transcript`, id in `x-stream-id`).
- A run that ends in error after the stream began sends one chunk with an `error` object (as
  OpenRouter does), which makes the openai SDK raise `APIError`, then `data: [DONE]`.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from app.api.compat.common import caller_call, failure
from app.api.responses import JSON
from app.core.errors import GatewayError
from app.core.events import FinalEvent, ReasoningEvent, StartEvent, StreamEvent, TokenEvent, ToolCallEvent, Usage
from app.run import Run

__all__ = ["ChunkWriter", "OpenAIErrors", "completion", "finish_reason", "usage"]

_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "content_filter": "content_filter",
           "pause": "length"}
"""canonical stop_reason -> finish_reason. `pause` (max_steps reached while the gateway ran tools)
is a limit cut, as `length` is."""

_DONE = b"data: [DONE]\n\n"


def finish_reason(final: FinalEvent, refused: bool = False) -> str:
    """A model's own refusal ends with `stop`, its words in `refusal`, as OpenAI answers it."""
    if final.status == "blocked":
        return "content_filter"
    if refused and final.stop_reason == "content_filter":
        return "stop"
    return _FINISH.get(final.stop_reason or "stop", "stop")


def usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens or u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    }


class ChunkWriter:
    """One stream's chunks. `feed()` takes released events, gives the bytes to send."""

    __slots__ = ("run", "model", "include_usage", "_open", "_indexes", "_sent_args", "_refused")

    def __init__(self, run: Run, *, model: str, include_usage: bool) -> None:
        self.run = run
        self.model = model
        self.include_usage = include_usage
        # Every chunk starts the same; only `choices` (and `usage`) differ.
        head = {"id": chat_id(run), "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "system_fingerprint": None}
        self._open = b"data: " + orjson.dumps(head)[:-1]  # without its closing brace
        self._indexes: dict[str, int] = {}  # caller call id -> OpenAI tool call index
        self._sent_args: set[str] = set()  # calls that streamed non-empty arguments
        self._refused = False  # the model refused (its words went out as `delta.refusal`)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = orjson.dumps({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish})
        tail = b'],"usage":null}\n\n' if self.include_usage else b"]}\n\n"
        return self._open + b',"choices":[' + choice + tail

    def feed(self, events: list[StreamEvent]) -> bytes:
        out = []
        for event in events:
            if isinstance(event, TokenEvent):
                if event.refusal:
                    self._refused = True
                    out.append(self._chunk({"refusal": event.content}))
                else:
                    out.append(self._chunk({"content": event.content}))
            elif isinstance(event, ReasoningEvent):
                out.append(self._chunk({"reasoning_content": event.content}))
            elif isinstance(event, ToolCallEvent):
                chunk = self._tool_call(event)
                if chunk:
                    out.append(chunk)
            elif isinstance(event, StartEvent):
                out.append(self._chunk({"role": "assistant", "content": "", "refusal": None}))
            elif isinstance(event, FinalEvent):
                out.append(self._end(event))
        return b"".join(out)

    def _tool_call(self, event: ToolCallEvent) -> bytes:
        if not caller_call(self.run, event):
            return b""
        fragment = event.args_fragment
        if fragment:
            self._sent_args.add(event.id)
        elif event.is_final and event.id not in self._sent_args:
            fragment = "{}"  # a call with no arguments still gets a JSON object
        index = self._indexes.get(event.id)
        if index is None:
            index = self._indexes[event.id] = len(self._indexes)
            call = {"index": index, "id": event.id, "type": "function",
                    "function": {"name": event.name, "arguments": fragment}}
        elif fragment:
            call = {"index": index, "function": {"arguments": fragment}}
        else:
            return b""
        return self._chunk({"tool_calls": [call]})

    def _end(self, final: FinalEvent) -> bytes:
        if final.status in ("ok", "blocked"):
            out = self._chunk({}, finish_reason(final, self._refused))
            if self.include_usage:
                out += self._open + b',"choices":[],"usage":' + orjson.dumps(usage(final.usage)) + b"}\n\n"
            return out + _DONE
        code, message = failure(final)
        detail = {"message": message, "type": _ERROR_TYPE.get(code, "server_error"), "param": None, "code": code}
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "error"}
        return (self._open + b',"error":' + orjson.dumps(detail) + b',"choices":[' + orjson.dumps(choice)
                + b"]}\n\n" + _DONE)


def chat_id(run: Run) -> str:
    """`chatcmpl-<stream id>`: the stream's id (for its transcript) inside OpenAI's id shape."""
    return "chatcmpl-" + run.stream_id


def completion(run: Run, model: str, events: list[StreamEvent], final: FinalEvent) -> dict[str, Any]:
    """The non-streaming answer, built from the same released events as the stream."""
    text: list[str] = []
    refusal: list[str] = []
    reasoning: list[str] = []
    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, TokenEvent):
            (refusal if event.refusal else text).append(event.content)
        elif isinstance(event, ReasoningEvent):
            reasoning.append(event.content)
        elif isinstance(event, ToolCallEvent) and event.is_final and caller_call(run, event):
            calls[event.id] = {"id": event.id, "type": "function", "function": {
                "name": event.name, "arguments": orjson.dumps(event.arguments or {}).decode()}}
    message: dict[str, Any] = {"role": "assistant",
                               "content": "".join(text) if text or not (calls or refusal) else None,
                               "refusal": "".join(refusal) if refusal else None}
    if calls:
        message["tool_calls"] = list(calls.values())
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    return {
        "id": chat_id(run), "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(final, bool(refusal))}],
        "usage": usage(final.usage), "system_fingerprint": None,
    }


# -- errors -------------------------------------------------------------------------------------

_ERROR_TYPE = {"rate_limited": "rate_limit_error", "model_not_found": "invalid_request_error",
               "upstream_timeout": "timeout_error", "validation_failed": "content_filter"}
_TYPE_FOR_STATUS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error"}


class OpenAIErrors:
    """`{"error": {"message", "type", "param", "code"}}` with the status the openai SDK maps to
    its exception classes (400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, 429
    RateLimitError with Retry-After, 5xx InternalServerError)."""

    @staticmethod
    def body(status: int, message: str, param: str | None, code: str | None) -> dict[str, Any]:
        kind = _TYPE_FOR_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")
        return {"error": {"message": message, "type": kind, "param": param, "code": code}}

    def request_error(self, message: str, param: str | None, status: int, code: str | None) -> JSON:
        return JSON(self.body(status, message, param, code or "invalid_request"), status_code=status)

    def gateway_error(self, exc: GatewayError) -> JSON:
        status = 400 if exc.status == 422 else exc.status  # OpenAI answers an invalid request with 400
        field = exc.field
        param = field_from_gateway(field) if isinstance(field, str) else None
        headers = {}
        if exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
        return JSON(self.body(status, exc.message, param, exc.code), status_code=status, headers=headers)


def field_from_gateway(field: str) -> str:
    """`validators.0.name` -> `validators[0].name`."""
    out = ""
    for part in field.split("."):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
