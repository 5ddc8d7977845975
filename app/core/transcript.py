"""The record of one stream for redisplay: tool calls tracked by id, reasoning apart from answers.

After ../shared/reference/streaming-parser-prd.md (its StreamingParser): every tool call is kept
by its id with name, input, the fragments received, output, timestamps and state
(in_progress -> complete -> has_output); an output is matched to its call by the shared id
whether the provider, the gateway or the caller (a `tool` message in the request) produced it,
and in any order (an output that comes before its call waits for it). Messages are classified
as the reference does: an assistant turn that calls tools (the caller's or the gateway's) and
tool outputs are *reasoning* messages; the text of a turn that calls none is a *response*
message. Model thinking is a reasoning message too. Turns end by the one turn rule: a result
that closes the turn (`ToolResultEvent.closes_turn`) ends the open one, unless it said nothing
yet (as app/core/released.py), and the end of the run ends the last. Per-tool processors (app/core/processors.py)
shape a tool's input and output for display (`ProcessorRegistry.register_processor`).

The transcript sees the events as released to clients (after the validation gate), so it holds
what readers saw. Memory is bounded: past `max_chars` of text or `max_items` records nothing
more is stored and `truncated` is set. Request messages are kept as sent (bounded by the
request body limit) and their tool calls and outputs are tracked with `origin: "request"`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from app.core.events import ReasoningEvent, StreamEvent, TokenEvent, ToolCallEvent, ToolResultEvent, Usage
from app.core.messages import Message, thaw
from app.core.parts import part_summary
from app.core.processors import Processor, ProcessorRegistry

__all__ = [
    "ProcessedMessage",
    "Processor",
    "ProcessorRegistry",
    "ToolCallInfo",
    "Transcript",
    "TranscriptLimits",
]

ToolCallState = Literal["in_progress", "complete", "has_output"]
OutputSource = Literal["provider", "gateway", "caller"]
_COMPACT_PARTS = 256  # text deltas joined into one string past this many


@dataclass(slots=True, frozen=True, kw_only=True)
class TranscriptLimits:
    max_chars: int = 1_000_000
    """Characters of text (answers, thinking, fragments, inputs, outputs) kept per stream."""
    max_items: int = 2_000
    """Records (tool calls, messages, turn parts) kept per stream."""
    keep_media_bytes: bool = False
    """Keep image and document bytes in the request messages (else kind, media type, size, SHA-256)."""


@dataclass(slots=True, kw_only=True)
class ToolCallInfo:
    """One tool call, tracked by its id (the reference's ToolCallInfo)."""

    id: str
    name: str
    step: int
    origin: Literal["stream", "request"] = "stream"
    server: bool = False
    gateway: bool = False
    input: dict[str, Any] | None = None
    fragments: list[str] = field(default_factory=list)
    fragment_count: int = 0
    output: str | None = None
    is_error: bool = False
    output_source: OutputSource | None = None
    state: ToolCallState = "in_progress"
    created_at: float
    completed_at: float | None = None
    output_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "state": self.state, "step": self.step, "origin": self.origin,
            "server": self.server, "gateway": self.gateway,
            "input": thaw(self.input) if self.input is not None else None,
            "fragments": list(self.fragments), "fragment_count": self.fragment_count,
            "output": self.output, "is_error": self.is_error, "output_source": self.output_source,
            "created_at": self.created_at, "completed_at": self.completed_at, "output_at": self.output_at,
        }


@dataclass(slots=True, kw_only=True)
class ProcessedMessage:
    """One classified message: `type` is thinking, assistant_text, tool_call or tool_output
    (reasoning messages) or response."""

    id: str
    type: str
    step: int
    turn: int
    content: Any
    timestamp: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "step": self.step, "turn": self.turn, "content": self.content,
                "timestamp": self.timestamp}


@dataclass(slots=True)
class _Part:
    """One piece of a turn, in arrival order: text, thinking, a call, an output."""

    kind: Literal["text", "thinking", "call", "output"]
    value: Any  # list[str] for text and thinking (one string once the turn closed), else the call id
    at: float
    step: int
    seq: int = 0  # the part's number in the stream: text messages are `msg_<seq>`
    turn: int = 0
    response: bool = False  # text of a turn that called no tool the model does not run itself


class Transcript:
    """The stream's record (the reference's StreamingParser), fed the released canonical events.

    Closed turns keep their parts; messages are rendered (processors applied) when read, so the
    stream's hot path only appends.
    """

    def __init__(
        self,
        *,
        processors: ProcessorRegistry | None = None,
        limits: TranscriptLimits = TranscriptLimits(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.processors = processors or ProcessorRegistry()
        self.limits = limits
        self._max_chars = limits.max_chars
        self._clock = clock
        self.request_messages: tuple[Message, ...] = ()
        self.tool_calls: dict[str, ToolCallInfo] = {}
        self.unmatched_outputs: dict[str, dict[str, Any]] = {}
        self.step = 1
        self.steps = 0
        self.usage = Usage()
        self.status: str = "running"
        self.stop_reason: str | None = None
        self.truncated = False
        self._parts: list[_Part] = []  # parts of closed turns
        self._turn: list[_Part] = []  # the open turn
        self._calling = False  # the open turn calls a tool the model does not run itself
        self._turns = 0
        self._seq = 0
        self._chars = 0
        self._items = 0

    # -- size -----------------------------------------------------------------------------

    @property
    def size(self) -> tuple[int, int]:
        """(characters, records) held: never above the limits."""
        return self._chars, self._items

    def _room(self, chars: int, items: int = 0) -> bool:
        """Charge the budget; False (and `truncated`) when that would pass a limit."""
        if self._chars + chars > self.limits.max_chars or self._items + items > self.limits.max_items:
            self.truncated = True
            return False
        self._chars += chars
        self._items += items
        return True

    # -- feeding --------------------------------------------------------------------------

    def add_request(self, messages: Iterable[Message]) -> None:
        """The request's messages, as sent; their tool calls and outputs are tracked by id."""
        self.request_messages = tuple(messages)
        now = self._clock()
        for message in self.request_messages:
            if message.role == "assistant":
                for call in message.tool_calls:
                    info = self._new_call(call.id, call.name, origin="request", now=now)
                    if info is not None:
                        text = orjson.dumps(thaw(call.arguments)).decode()
                        info.fragment_count = 1
                        if self._room(len(text)):
                            info.fragments.append(text)
                        self._complete(info, call.arguments, now)
            elif message.role == "tool" and message.tool_call_id:
                self._output(message.tool_call_id, message.name or "", message.text, False, "caller", now)

    def observe(self, event: StreamEvent) -> None:
        """One released canonical event (start and final are the pipeline's business)."""
        if isinstance(event, TokenEvent):
            # Hot path (every answer token): extend the open text part in place.
            turn, text = self._turn, event.content
            chars = self._chars + len(text)
            if turn and turn[-1].kind == "text" and chars <= self._max_chars:
                self._chars = chars
                parts = turn[-1].value
                parts.append(text)
                if len(parts) > _COMPACT_PARTS:
                    parts[:] = ["".join(parts)]
            else:
                self._text("text", text)
        elif isinstance(event, ReasoningEvent):
            self._text("thinking", event.content)
        elif isinstance(event, ToolCallEvent):
            self._call_event(event)
        elif isinstance(event, ToolResultEvent):
            if event.closes_turn and (self._calling or any(p.kind == "text" for p in self._turn)):
                self._close_turn()
            self._output(event.tool_call_id, event.name, event.content, event.is_error,
                         None, self._clock())

    def mark_gateway(self, call_ids: Iterable[str]) -> None:
        """These calls are run by the gateway (their outputs are the gateway's)."""
        for call_id in call_ids:
            info = self.tool_calls.get(call_id)
            if info is not None:
                info.gateway = True

    def _close_turn(self) -> None:
        calling, self._calling = self._calling, False
        if not self._turn:
            return
        self._turns += 1
        for part in self._turn:
            part.turn = self._turns
            if part.kind == "text" or part.kind == "thinking":
                part.value = ["".join(part.value)]
                part.response = part.kind == "text" and not calling
        self._parts.extend(self._turn)
        self._turn = []

    def finish(self, *, status: str, stop_reason: str | None, usage: Usage, steps: int) -> None:
        self._close_turn()
        self.status, self.stop_reason, self.usage, self.steps = status, stop_reason, usage, steps

    # -- reading (the reference's getters) ------------------------------------------------

    def get_tool_call(self, call_id: str) -> ToolCallInfo | None:
        return self.tool_calls.get(call_id)

    def get_tool_calls(self) -> dict[str, ToolCallInfo]:
        return self.tool_calls

    def get_reasoning_messages(self) -> list[ProcessedMessage]:
        return [m for part in self._all_parts() if (m := self._render(part)) is not None and m.type != "response"]

    def get_response_messages(self) -> list[ProcessedMessage]:
        return [m for part in self._all_parts() if (m := self._render(part)) is not None and m.type == "response"]

    def snapshot(self) -> dict[str, Any]:
        """The record as JSON-ready data; an open turn is shown as if it ended now."""
        reasoning: list[dict[str, Any]] = []
        response: list[dict[str, Any]] = []
        for part in self._all_parts():
            message = self._render(part)
            if message is not None:
                (response if message.type == "response" else reasoning).append(message.to_dict())
        return {
            "status": self.status,
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "usage": self.usage.to_dict(),
            "request_messages": [_recorded(m, self.limits.keep_media_bytes) for m in self.request_messages],
            "reasoning_messages": reasoning,
            "response_messages": response,
            "tool_calls": [c.to_dict() for c in self.tool_calls.values()],
            "unmatched_outputs": [{k: v for k, v in o.items() if k != "at"} for o in self.unmatched_outputs.values()],
            "truncated": self.truncated,
        }

    # -- internals ------------------------------------------------------------------------

    def _all_parts(self) -> list[_Part]:
        """Closed parts, then the open turn's classified as if it closed now (not stored)."""
        if not self._turn:
            return self._parts
        open_parts = [
            _Part(p.kind, p.value, p.at, p.step, p.seq, self._turns + 1, p.kind == "text" and not self._calling)
            for p in self._turn
        ]
        return [*self._parts, *open_parts]

    def _render(self, part: _Part) -> ProcessedMessage | None:
        if part.kind == "text" or part.kind == "thinking":
            kind = "response" if part.response else ("thinking" if part.kind == "thinking" else "assistant_text")
            return ProcessedMessage(id=f"msg_{part.seq}", type=kind, step=part.step, turn=part.turn,
                                    content="".join(part.value), timestamp=part.at)
        info = self.tool_calls.get(part.value)
        if info is None:
            return None
        if part.kind == "call":
            shown = self.processors.display_input(info.name, thaw(info.input)) if info.input is not None else None
            content = {"name": info.name, "input": shown, "server": info.server}
            return ProcessedMessage(id=info.id, type="tool_call", step=part.step, turn=part.turn, content=content,
                                    timestamp=part.at)
        shown = self.processors.display_output(info.name, info.output) if info.output is not None else None
        content = {"name": info.name, "output": shown, "is_error": info.is_error, "source": info.output_source}
        return ProcessedMessage(id=info.id, type="tool_output", step=part.step, turn=part.turn, content=content,
                                timestamp=part.at)

    def _text(self, kind: Literal["text", "thinking"], text: str) -> None:
        turn = self._turn
        if turn and turn[-1].kind == kind:
            if not self._room(len(text)):
                return
            parts = turn[-1].value
            parts.append(text)
            if len(parts) > _COMPACT_PARTS:
                parts[:] = ["".join(parts)]
        elif self._room(len(text), 1):
            self._seq += 1
            turn.append(_Part(kind, [text], self._clock(), self.step, self._seq))

    def _call_event(self, event: ToolCallEvent) -> None:
        if not event.server:  # recorded or not (limits), the turn calls a tool the model does not run
            self._calling = True
        now = self._clock()
        info = self.tool_calls.get(event.id)
        if info is None or info.origin == "request":
            info = self._new_call(event.id, event.name, origin="stream", now=now, server=event.server)
            if info is None:
                return
        if event.args_fragment:
            info.fragment_count += 1
            if self._room(len(event.args_fragment)):
                info.fragments.append(event.args_fragment)
        if event.is_final:
            self._complete(info, event.arguments or {}, now)

    def _new_call(self, call_id: str, name: str, *, origin: Literal["stream", "request"], now: float,
                  server: bool = False) -> ToolCallInfo | None:
        replaced = self.tool_calls.pop(call_id, None)  # a request's call whose id the stream reuses
        items = 2 if origin == "stream" else 1  # the record, and its place in the turn
        if replaced is None and not self._room(len(call_id) + len(name), items):
            return None
        info = ToolCallInfo(id=call_id, name=name, step=self.step, origin=origin, server=server, created_at=now)
        self.tool_calls[call_id] = info
        if origin == "stream":
            self._turn.append(_Part("call", call_id, now, self.step))
        waiting = self.unmatched_outputs.pop(call_id, None)
        if waiting is not None:  # its output came first: matched now, by the shared id
            self._set_output(info, waiting["content"], waiting["is_error"], waiting["source"], waiting["at"])
            if origin == "stream":
                self._turn.append(_Part("output", call_id, now, self.step))
        return info

    def _complete(self, info: ToolCallInfo, arguments: dict[str, Any], now: float) -> None:
        if self._room(len(orjson.dumps(thaw(arguments))) if arguments else 2):
            info.input = arguments
        if info.state == "in_progress":
            info.state = "complete"
        info.completed_at = now

    def _output(self, call_id: str, name: str, content: str, is_error: bool, source: OutputSource | None,
                now: float) -> None:
        info = self.tool_calls.get(call_id)
        if info is None:
            if self._room(len(content) + len(call_id), 1):
                self.unmatched_outputs[call_id] = {"tool_call_id": call_id, "name": name, "content": content,
                                                   "is_error": is_error, "source": source or "provider", "at": now}
            return
        from_stream = source != "caller"
        if source is None:
            source = "gateway" if info.gateway else "provider"
        if self._room(len(content)):
            self._set_output(info, content, is_error, source, now)
        else:  # no room for the text: the match is still recorded
            info.state, info.is_error, info.output_source, info.output_at = "has_output", is_error, source, now
        if from_stream and self._room(0, 1):
            self._turn.append(_Part("output", call_id, now, self.step))

    @staticmethod
    def _set_output(info: ToolCallInfo, content: str, is_error: bool, source: OutputSource, at: float) -> None:
        info.output, info.is_error, info.output_source, info.output_at = content, is_error, source, at
        info.state = "has_output"


def _recorded(message: Message, keep_media_bytes: bool) -> dict[str, Any]:
    """A request message as the transcript keeps it: media parts without their bytes, unless asked."""
    out: dict[str, Any] = message.model_dump(mode="json", exclude_defaults=True, exclude={"content"})
    content = message.content
    if content:
        out["content"] = content if isinstance(content, str) else [
            part_summary(part, keep_bytes=keep_media_bytes) for part in content]
    return out
