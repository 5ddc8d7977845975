"""The canonical events every stream is made of (DESIGN.md section 1).

`start` first, then `token`, `reasoning`, `tool_call`, `tool_result` in any order, and exactly
one `final` last. Events are frozen (many readers share them); `data()` is the SSE payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.messages import ReasoningBlock, ToolCall, thaw

__all__ = [
    "FINAL_STATUSES",
    "STOP_REASONS",
    "STOP_REASON_FOR_STATUS",
    "AssistantMessage",
    "FinalEvent",
    "FinalStatus",
    "ReasoningEvent",
    "StartEvent",
    "StopReason",
    "StreamEvent",
    "TokenEvent",
    "ToolCallEvent",
    "ToolResultEvent",
    "Usage",
]

StopReason = Literal["stop", "length", "tool_calls", "content_filter", "pause", "error", "cancelled"]
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]
FinalStatus = Literal["ok", "blocked", "error", "cancelled"]
FINAL_STATUSES: tuple[str, ...] = FinalStatus.__args__  # type: ignore[attr-defined]
STOP_REASON_FOR_STATUS: dict[str, StopReason] = {"blocked": "content_filter", "error": "error", "cancelled": "cancelled"}
"""The stop reason of a run that did not end ok. A block (a validator or the provider refused the
content) is a content filter, as providers themselves report it."""


@dataclass(slots=True, kw_only=True)
class Usage:
    """Token usage, whatever the provider reported; zeros where it reported nothing."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    output_unknown: bool = False
    """The stream ended before the provider reported its output (cancelled, broken): the output
    and total counts are unknown, `null` on the wire rather than a false 0."""

    def to_dict(self) -> dict[str, int | None]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": None if self.output_unknown else self.output_tokens,
            "total_tokens": None if self.output_unknown else self.total_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    def add(self, other: Usage) -> None:
        """Sum another step's usage into this one (multi-step tool runs)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.total_tokens += other.total_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.output_unknown = self.output_unknown or other.output_unknown


@dataclass(slots=True, frozen=True, kw_only=True)
class AssistantMessage:
    """The assistant message as released: text, the calls the caller must answer, reasoning."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[ReasoningBlock, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "role": "assistant",
            "content": self.content,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": thaw(c.arguments)} for c in self.tool_calls
            ],
        }
        if self.reasoning:
            out["reasoning"] = [b.model_dump(exclude_none=True) for b in self.reasoning]
        return out


@dataclass(slots=True, frozen=True, kw_only=True)
class StartEvent:
    type: Literal["start"] = "start"
    stream_id: str
    model: str
    provider: str

    def data(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "model": self.model, "provider": self.provider}


@dataclass(slots=True, frozen=True, kw_only=True)
class TokenEvent:
    """A text delta; `index` counts token events of the stream from 0."""

    type: Literal["token"] = "token"
    index: int
    content: str

    def data(self) -> dict[str, Any]:
        return {"index": self.index, "content": self.content}


@dataclass(slots=True, frozen=True, kw_only=True)
class ReasoningEvent:
    """A reasoning (thinking) delta, kept apart from the answer; `index` counts from 0."""

    type: Literal["reasoning"] = "reasoning"
    index: int
    content: str

    def data(self) -> dict[str, Any]:
        return {"index": self.index, "content": self.content}


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolCallEvent:
    """A fragment of one call's JSON arguments; the last has is_final and the parsed arguments.

    `index` is the call's position among the stream's tool calls, from 0.
    """

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    index: int
    args_fragment: str
    is_final: bool = False
    arguments: dict[str, Any] | None = None
    server: bool = False

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "index": self.index,
            "args_fragment": self.args_fragment,
            "is_final": self.is_final,
        }
        if self.is_final:
            out["arguments"] = thaw(self.arguments) if self.arguments is not None else None
        if self.server:
            out["server"] = True
        return out


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolResultEvent:
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False

    def data(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "content": self.content,
            "is_error": self.is_error,
        }


@dataclass(slots=True, frozen=True, kw_only=True)
class FinalEvent:
    """Always last, exactly once. `error` is set unless status is "ok"."""

    type: Literal["final"] = "final"
    status: FinalStatus
    message: AssistantMessage
    usage: Usage
    stop_reason: StopReason | None
    model: str
    provider: str
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Further fields of the payload (validation summary, steps, ...), kept flat in `data()`."""

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "message": self.message.to_dict(),
            "usage": self.usage.to_dict(),
            "stop_reason": self.stop_reason,
            "model": self.model,
            "provider": self.provider,
        }
        if self.error is not None:
            out["error"] = self.error
        out.update(self.extra)
        return out


StreamEvent = StartEvent | TokenEvent | ReasoningEvent | ToolCallEvent | ToolResultEvent | FinalEvent
