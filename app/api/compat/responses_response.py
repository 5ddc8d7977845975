"""Canonical events -> the OpenAI Responses API: the SSE event sequence (`event:` lines, each
`data` with its `sequence_number`) and the JSON `response` object, both from one `ResponseWriter`.

- Text goes out as one `message` item per stretch of text (`output_text` part), reasoning as a
  `reasoning` item with one `summary_text` part (a block without text, redacted thinking or a
  provider's encrypted-only reasoning, as a `reasoning` item with an empty summary, before the
  item that follows it), the caller's tool calls as `function_call`
  items (`call_id` = the call's id). The gateway's tools and the provider's server tools run where
  they are and are not shown: their activity is in the stream's transcript.
- The end: `response.completed`; `response.incomplete` for a cut answer (`max_output_tokens`:
  length or max_steps) or a blocked/filtered one (`content_filter`); after a failure an `error`
  event (which the openai SDK raises as `APIError`, as from OpenAI) then `response.failed`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.api.compat.common import caller_call, failure
from app.api.compat.responses_request import encrypted_reasoning
from app.core.events import FinalEvent, ReasoningEvent, StartEvent, StreamEvent, TokenEvent, ToolCallEvent, Usage
from app.run import Run

__all__ = ["ResponseWriter", "response_id", "usage"]

_CUT = {"length": "max_output_tokens", "pause": "max_output_tokens", "content_filter": "content_filter"}


def response_id(stream_id: str) -> str:
    """`resp_<stream id>`: the stream's id (for its transcript and `previous_response_id`)."""
    return "resp_" + stream_id


def usage(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.total_tokens or u.input_tokens + u.output_tokens}


@dataclass(slots=True)
class _Item:
    index: int
    item: dict[str, Any]
    text: list[str] = field(default_factory=list)
    delta: bytes = b""
    """The item's delta event up to its sequence number (deltas are most events: built once)."""


class ResponseWriter:
    """One response: `feed()` takes released events and gives the SSE bytes (when streaming);
    `response` is the Response object so far (the JSON answer once the final was fed)."""

    def __init__(self, run: Run, *, echo: dict[str, Any], stream: bool, encrypted: bool = False) -> None:
        self.run = run
        self.stream = stream
        self.encrypted = encrypted
        """`include: ["reasoning.encrypted_content"]`: a signed reasoning item carries its signature."""
        self.response: dict[str, Any] = {
            "id": response_id(run.stream_id), "object": "response", "created_at": int(time.time()),
            "status": "in_progress", "error": None, "incomplete_details": None, **echo, "output": [], "usage": None}
        self._seq = 0
        self._open: _Item | None = None  # the text or reasoning item being written
        self._calls: dict[str, _Item] = {}  # caller call id -> its function_call item, until its last fragment
        self._shown: set[tuple[str | None, str | None]] = set()  # blocks without text given an item
        self._out: list[bytes] = []

    def feed(self, events: list[StreamEvent]) -> bytes:
        for event in events:
            if isinstance(event, TokenEvent):
                self._text("message", event.content)
            elif isinstance(event, ReasoningEvent):
                self._text("reasoning", event.content)
            elif isinstance(event, ToolCallEvent):
                if caller_call(self.run, event):
                    self._call(event)
            elif isinstance(event, StartEvent):
                self._emit("response.created", response=self._snapshot())
                self._emit("response.in_progress", response=self._snapshot())
            elif isinstance(event, FinalEvent):
                self._end(event)
        out, self._out = b"".join(self._out), []
        return out

    def _emit(self, kind: str, **data: Any) -> None:
        if self.stream:
            body = orjson.dumps({"type": kind, "sequence_number": self._seq, **data})
            self._out.append(b"event: " + kind.encode() + b"\ndata: " + body + b"\n\n")
        self._seq += 1

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.response["output"])}

    def _add(self, item: dict[str, Any]) -> _Item:
        entry = _Item(len(self.response["output"]), item)
        self.response["output"].append(item)
        self._emit("response.output_item.added", output_index=entry.index, item=item)
        return entry

    def _done(self, entry: _Item, item: dict[str, Any]) -> None:
        self.response["output"][entry.index] = item
        self._emit("response.output_item.done", output_index=entry.index, item=item)

    # -- text and reasoning -------------------------------------------------------------------

    def _text(self, kind: str, delta: str) -> None:
        entry = self._open
        if entry is None or entry.item["type"] != kind:
            self._close()
            self._textless()
            n = len(self.response["output"])
            if kind == "message":
                entry = self._add({"id": f"msg_{n}_{self.run.stream_id}", "type": "message", "status": "in_progress",
                                   "role": "assistant", "content": []})
                self._emit("response.content_part.added", item_id=entry.item["id"], output_index=entry.index,
                           content_index=0, part=_text_part(""))
            else:
                entry = self._add({"id": f"rs_{n}_{self.run.stream_id}", "type": "reasoning", "summary": []})
                self._emit("response.reasoning_summary_part.added", item_id=entry.item["id"],
                           output_index=entry.index, summary_index=0, part={"type": "summary_text", "text": ""})
            self._open = entry
            entry.delta = _delta_head(entry, kind)
        entry.text.append(delta)
        if self.stream:
            self._out.append(entry.delta + str(self._seq).encode() + b',"delta":' + orjson.dumps(delta) + b"}\n\n")
        self._seq += 1

    def _close(self) -> None:
        entry, self._open = self._open, None
        if entry is None:
            return
        text = "".join(entry.text)
        where = {"item_id": entry.item["id"], "output_index": entry.index}
        if entry.item["type"] == "message":
            self._emit("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            self._emit("response.content_part.done", **where, content_index=0, part=_text_part(text))
            self._done(entry, {**entry.item, "status": "completed", "content": [_text_part(text)]})
        else:
            part = {"type": "summary_text", "text": text}
            self._emit("response.reasoning_summary_text.done", **where, summary_index=0, text=text)
            self._emit("response.reasoning_summary_part.done", **where, summary_index=0, part=part)
            self._done(entry, {**entry.item, "summary": [part], **self._opaque(text)})

    def _opaque(self, text: str) -> dict[str, str]:
        """The signed block's `encrypted_content` (the signature came with the block's end, before
        any later event), when the request included it."""
        if self.encrypted:
            for block in self.run.released.message().reasoning:
                if block.text == text and (opaque := encrypted_reasoning(block)) is not None:
                    return {"encrypted_content": opaque}
        return {}

    def _textless(self) -> None:
        """A reasoning item for each released block without text (redacted thinking, encrypted-only
        reasoning) not shown yet: its `encrypted_content` when the request included it."""
        for block in self.run.released.message().reasoning:
            if block.text or not (block.signature or block.redacted) or (block.signature, block.redacted) in self._shown:
                continue
            self._shown.add((block.signature, block.redacted))
            n = len(self.response["output"])
            item: dict[str, Any] = {"id": f"rs_{n}_{self.run.stream_id}", "type": "reasoning", "summary": []}
            entry = self._add(item)
            opaque = encrypted_reasoning(block) if self.encrypted else None
            self._done(entry, item if opaque is None else {**item, "encrypted_content": opaque})

    # -- the caller's tool calls --------------------------------------------------------------

    def _call(self, event: ToolCallEvent) -> None:
        entry = self._calls.get(event.id)
        if entry is None:
            self._close()
            self._textless()
            n = len(self.response["output"])
            entry = self._calls[event.id] = self._add({
                "id": f"fc_{n}_{self.run.stream_id}", "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": event.id, "name": event.name})
        where = {"item_id": entry.item["id"], "output_index": entry.index}
        if event.args_fragment:
            entry.text.append(event.args_fragment)
            self._emit("response.function_call_arguments.delta", **where, delta=event.args_fragment)
        if event.is_final:
            del self._calls[event.id]
            arguments = "".join(entry.text) or orjson.dumps(event.arguments or {}).decode()
            self._emit("response.function_call_arguments.done", **where, name=event.name, arguments=arguments)
            self._done(entry, {**entry.item, "status": "completed", "arguments": arguments})

    # -- the end ------------------------------------------------------------------------------

    def _end(self, final: FinalEvent) -> None:
        self._close()
        self._textless()
        for entry in self._calls.values():  # cut before its last fragment
            self._done(entry, {**entry.item, "status": "incomplete", "arguments": "".join(entry.text)})
        self._calls.clear()
        self.response["usage"] = usage(final.usage)
        if final.status in ("ok", "blocked"):
            cut = "content_filter" if final.status == "blocked" else _CUT.get(final.stop_reason or "stop")
            if cut is None:
                self.response["status"] = "completed"
                self._emit("response.completed", response=self._snapshot())
            else:
                self.response["status"] = "incomplete"
                self.response["incomplete_details"] = {"reason": cut}
                self._emit("response.incomplete", response=self._snapshot())
            return
        code, message = failure(final)
        self.response["status"] = "failed"
        # The Response's error code is one of OpenAI's (the SDK's type is a closed list); the
        # gateway's own code is in the `error` event.
        self.response["error"] = {"code": "rate_limit_exceeded" if code == "rate_limited" else "server_error",
                                   "message": message}
        # OpenAI's ResponseErrorEvent fields, and `error` as the upstream sends it (the SDK raises on it)
        self._emit("error", code=code, message=message, param=None,
                   error={"type": code, "code": code, "message": message, "param": None})
        self._emit("response.failed", response=self._snapshot())


def _delta_head(entry: _Item, kind: str) -> bytes:
    if kind == "message":
        name, fields = "response.output_text.delta", {"content_index": 0, "logprobs": []}
    else:
        name, fields = "response.reasoning_summary_text.delta", {"summary_index": 0}
    head = orjson.dumps({"type": name, "item_id": entry.item["id"], "output_index": entry.index, **fields})
    return b"event: " + name.encode() + b"\ndata: " + head[:-1] + b',"sequence_number":'


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
