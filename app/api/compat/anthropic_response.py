"""Canonical events -> Anthropic Messages: the event stream (`message_start`, `ping`,
`content_block_start/delta/stop`, `message_delta`, `message_stop`; `error` after a failure), the
JSON `message`, and errors in Anthropic's format.

- Reasoning is a `thinking` block (`thinking_delta`s, then the provider's `signature_delta` when it
  signed it), redacted thinking a whole `redacted_thinking` block; text a `text` block; each
  caller tool call a `tool_use` block sent when the call is complete (start, one
  `input_json_delta` with the whole arguments, stop), so blocks never interleave even when a
  provider streams parallel calls' fragments mixed.
- The gateway's tools and the provider's server tools are not shown (as in the OpenAI facade);
  their activity is in the transcript of the stream named by `x-stream-id`.
- `input_tokens` is Anthropic's: the input beyond cache reads and writes (canonical input counts them).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.api.compat.common import caller_call, failure
from app.api.compat.responses_request import messages_signature
from app.api.responses import JSON
from app.core.errors import GatewayError
from app.core.events import FinalEvent, ReasoningEvent, StartEvent, StreamEvent, TokenEvent, ToolCallEvent, Usage
from app.run import Run

__all__ = ["AnthropicErrors", "MessageWriter", "message", "stop_reason", "usage"]

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal",
         "pause": "pause_turn"}


def stop_reason(final: FinalEvent) -> str:
    if final.status == "blocked":
        return "refusal"
    return _STOP.get(final.stop_reason or "stop", "end_turn")


def usage(u: Usage) -> dict[str, int]:
    return {"input_tokens": max(0, u.input_tokens - u.cache_read_tokens - u.cache_write_tokens),
            "output_tokens": u.output_tokens, "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cache_read_tokens}


def message_id(run: Run) -> str:
    """`msg_<stream id>`: the stream's id (for its transcript) inside Anthropic's id shape."""
    return "msg_" + run.stream_id


def _frame(kind: bytes, data: dict[str, Any]) -> bytes:
    return b"event: " + kind + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessageWriter:
    """One stream's events. `feed()` takes released events, gives the bytes to send."""

    __slots__ = ("run", "model", "_index", "_open", "_thinking", "_redacted", "_starting", "_sent_args")

    def __init__(self, run: Run, *, model: str) -> None:
        self.run = run
        self.model = model
        self._index = -1  # the open (or last) block's index
        self._open: str | None = None  # "text" | "thinking" | "tool_use:<id>" | None
        self._thinking: list[str] = []  # the open thinking block's text, to find its signature
        self._redacted: set[str] = set()  # redacted thinking already sent (it has no events of its own)
        self._starting = False  # `start` seen, `message_start` not sent yet (it waits for the upstream's usage)
        self._sent_args = False  # the open tool_use block sent argument text

    def feed(self, events: list[StreamEvent]) -> bytes:
        out: list[bytes] = []
        for event in events:
            if self._starting and not isinstance(event, StartEvent):
                self._message_start(out)
            if isinstance(event, TokenEvent):
                if self._open != "text":
                    self._start(out, "text", {"type": "text", "text": ""})
                out.append(_frame(b"content_block_delta", {"type": "content_block_delta", "index": self._index,
                           "delta": {"type": "text_delta", "text": event.content}}))
            elif isinstance(event, ReasoningEvent):
                if self._open != "thinking":
                    self._start(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
                self._thinking.append(event.content)
                out.append(_frame(b"content_block_delta", {"type": "content_block_delta", "index": self._index,
                           "delta": {"type": "thinking_delta", "thinking": event.content}}))
            elif isinstance(event, ToolCallEvent):
                self._tool_use(out, event)
            elif isinstance(event, StartEvent):
                self._starting = True
            elif isinstance(event, FinalEvent):
                self._end(out, event)
        return b"".join(out)

    def _message_start(self, out: list[bytes]) -> None:
        """Sent with the first event after `start`, by when the upstream's own message start (with
        the input tokens, as Anthropic reports them there) has been read; zeros when it had none."""
        self._starting = False
        start = self.run.accumulator.start_usage
        counts = usage(start) if start is not None else {"input_tokens": 0, "output_tokens": 0}
        out.append(_frame(b"message_start", {"type": "message_start", "message": {
            "id": message_id(self.run), "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": counts}}))
        out.append(_frame(b"ping", {"type": "ping"}))

    def _start(self, out: list[bytes], kind: str | None, block: dict[str, Any]) -> None:
        self._close(out)
        self._send_redacted(out)
        self._index += 1
        self._open = kind
        out.append(_frame(b"content_block_start", {"type": "content_block_start", "index": self._index,
                                                    "content_block": block}))

    def _close(self, out: list[bytes]) -> None:
        if self._open is None:
            return
        if self._open == "thinking":
            signature = self._signature("".join(self._thinking))
            self._thinking = []
            if signature:
                out.append(_frame(b"content_block_delta", {"type": "content_block_delta", "index": self._index,
                                                            "delta": {"type": "signature_delta",
                                                                      "signature": signature}}))
        out.append(_frame(b"content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None

    def _send_redacted(self, out: list[bytes]) -> None:
        """Redacted thinking the provider sent so far, as whole blocks: it must go back unchanged
        with the next turn, and no canonical event carries it."""
        for block in self.run.released.message().reasoning:
            if block.redacted and block.redacted not in self._redacted:
                self._redacted.add(block.redacted)
                self._index += 1
                out.append(_frame(b"content_block_start", {"type": "content_block_start", "index": self._index,
                           "content_block": {"type": "redacted_thinking", "data": block.redacted}}))
                out.append(_frame(b"content_block_stop", {"type": "content_block_stop", "index": self._index}))

    def _signature(self, text: str) -> str | None:
        """The provider's signature of this thinking, from the run's message so far (the events
        carry only the text; the signature comes with the block's end marker, before any later event)."""
        for block in self.run.released.message().reasoning:
            if block.signature and block.text == text:
                return messages_signature(block)
        return None

    def _tool_use(self, out: list[bytes], event: ToolCallEvent) -> None:
        """Each fragment as it is released (a call's fragments come together, in order), so a
        client sees a long argument grow; an empty call's arguments as `{}`."""
        if not caller_call(self.run, event):
            return
        if self._open != "tool_use:" + event.id:
            self._start(out, "tool_use:" + event.id, {"type": "tool_use", "id": event.id, "name": event.name,
                                                      "input": {}})
            self._sent_args = False
        fragment = event.args_fragment
        if event.is_final and not self._sent_args and not fragment:
            fragment = orjson.dumps(event.arguments or {}).decode()
        if fragment:
            self._sent_args = True
            out.append(_frame(b"content_block_delta", {"type": "content_block_delta", "index": self._index,
                                                        "delta": {"type": "input_json_delta", "partial_json": fragment}}))
        if event.is_final:
            self._close(out)

    def _end(self, out: list[bytes], final: FinalEvent) -> None:
        self._close(out)
        self._send_redacted(out)
        if final.status in ("ok", "blocked"):
            out.append(_frame(b"message_delta", {"type": "message_delta",
                                                 "delta": {"stop_reason": stop_reason(final), "stop_sequence": None},
                                                 "usage": usage(final.usage)}))
            out.append(_frame(b"message_stop", {"type": "message_stop"}))
            return
        code, message = failure(final)
        out.append(_frame(b"error", {"type": "error", "error": {"type": _ERROR_TYPE.get(code, "api_error"),
                                                                "message": message}}))


def message(run: Run, model: str, events: list[StreamEvent], final: FinalEvent) -> dict[str, Any]:
    """The non-streaming answer, built from the same released events as the stream."""
    signatures = {b.text: messages_signature(b) for b in final.message.reasoning if b.signature and not b.redacted}
    content: list[dict[str, Any]] = [{"type": "redacted_thinking", "data": b.redacted}
                                     for b in final.message.reasoning if b.redacted]
    for event in events:
        last = content[-1] if content else None
        if isinstance(event, TokenEvent):
            if last is not None and last["type"] == "text":
                last["text"] += event.content
            else:
                content.append({"type": "text", "text": event.content})
        elif isinstance(event, ReasoningEvent):
            if last is not None and last["type"] == "thinking":
                last["thinking"] += event.content
            else:
                content.append({"type": "thinking", "thinking": event.content, "signature": ""})
        elif isinstance(event, ToolCallEvent) and event.is_final and caller_call(run, event):
            content.append({"type": "tool_use", "id": event.id, "name": event.name, "input": event.arguments or {}})
    for block in content:
        if block["type"] == "thinking":
            block["signature"] = signatures.get(block["thinking"]) or ""
    return {"id": message_id(run), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(final), "stop_sequence": None, "usage": usage(final.usage)}


# -- errors -------------------------------------------------------------------------------------

_ERROR_TYPE = {"rate_limited": "rate_limit_error", "model_not_found": "not_found_error",
               "upstream_timeout": "timeout_error", "overloaded": "overloaded_error"}
_TYPE_FOR_STATUS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}


class AnthropicErrors:
    """`{"type": "error", "error": {"type", "message"}}` with the status the anthropic SDK maps to
    its exception classes (400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, 429
    RateLimitError with Retry-After, 5xx InternalServerError)."""

    @staticmethod
    def body(status: int, message: str) -> dict[str, Any]:
        kind = _TYPE_FOR_STATUS.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def request_error(self, message: str, param: str | None, status: int, code: str | None) -> JSON:
        return JSON(self.body(status, message), status_code=status)

    def gateway_error(self, exc: GatewayError) -> JSON:
        status = 400 if exc.status == 422 else exc.status  # Anthropic answers an invalid request with 400
        field = exc.field
        text = exc.message if not isinstance(field, str) or exc.message.startswith(field) else f"{field}: {exc.message}"
        headers = {}
        if exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
        return JSON(self.body(status, text), status_code=status, headers=headers)
