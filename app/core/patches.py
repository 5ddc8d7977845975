"""Normalized patches: the only thing provider normalizers produce and the accumulator reads.

Every block patch carries `key`, the provider's own block key (Anthropic's content block index,
OpenAI's tool-call index, a generated id for Gemini's whole calls), so that interleaved blocks,
parallel tool calls above all, stay apart. Public indexes are the accumulator's business.
Plain slotted dataclasses: these are built once per upstream chunk on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from app.core.content_filter import ContentFilterData
from app.core.errors import UpstreamError
from app.core.events import StopReason

__all__ = [
    "BlockKey",
    "Ignored",
    "MessageDelta",
    "MessageEnd",
    "MessageStart",
    "Patch",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Relay",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "ToolDelta",
    "ToolEnd",
    "ToolResultDelta",
    "ToolResultEnd",
    "ToolResultStart",
    "ToolStart",
    "UsagePatch",
    "MAX_TOKEN_COUNT",
    "text_delta",
    "token_count",
    "usage_object",
]

BlockKey = int | str


@dataclass(slots=True, kw_only=True)
class UsagePatch:
    """Usage as far as the provider reported it; None means "not reported in this patch"."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    """The part of cache_write_tokens written for 1 hour (Anthropic's `cache_creation.ephemeral_1h_input_tokens`)."""

    def check(self, provider: str) -> None:
        """Raise `upstream_protocol_error` unless every count is None or a checked token count."""
        for name in _USAGE_FIELDS:
            token_count(getattr(self, name), name, provider=provider)


_USAGE_FIELDS = tuple(f.name for f in fields(UsagePatch))

MAX_TOKEN_COUNT = 1_000_000_000
"""The largest count one field of one provider response may report. A provider's numbers are
input: a negative count would be a refund, a fraction or 1e300 a cost no budget survives, and the
records' columns are 64-bit. A billion tokens is orders of magnitude past any context window."""


def token_count(value: Any, name: str, *, provider: str) -> int | None:
    """A provider's token count, checked: None when absent (JSON null), else a whole number from 0
    to MAX_TOKEN_COUNT (an integral float such as `12.0` is taken as the integer). Anything else (a
    negative, a fraction, a huge number, a string, a bool, an object) is an `upstream_protocol_error`:
    the count is never guessed, so budgets and rate limits move only by checked numbers."""
    if value is None:
        return None
    kind = value.__class__
    if kind is int and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    if kind is float and value.is_integer() and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    raise UpstreamError(f"{provider}: usage `{name}` is not a token count from 0 to {MAX_TOKEN_COUNT}: "
                        f"{repr(value)[:60]}", code="upstream_protocol_error", provider=provider)


def usage_object(value: Any, name: str, *, provider: str) -> Mapping[str, Any]:
    """A provider's usage object (or a part of it, `prompt_tokens_details`) when it is a JSON
    object, {} when absent; anything else is `upstream_protocol_error` (a string or a list carries
    no count to trust)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise UpstreamError(f"{provider}: usage `{name}` is not an object: {repr(value)[:60]}",
                        code="upstream_protocol_error", provider=provider)


@dataclass(slots=True, kw_only=True)
class MessageStart:
    kind: Literal["message_start"] = "message_start"
    id: str | None = None
    model: str | None = None
    usage: UsagePatch | None = None


@dataclass(slots=True, kw_only=True)
class TextStart:
    kind: Literal["text_start"] = "text_start"
    key: BlockKey = 0


@dataclass(slots=True, kw_only=True)
class TextDelta:
    """Text for block `key`; starts the block implicitly if it is not open."""

    kind: Literal["text_delta"] = "text_delta"
    key: BlockKey = 0
    text: str
    refusal: bool = False
    """The model's refusal (OpenAI `refusal`), surfaced as text and marked as such."""


_new_object = object.__new__


def text_delta(key: BlockKey, text: str) -> TextDelta:
    """`TextDelta(key=key, text=text)` on the hot path (most patches of every answer): the
    dataclass's `__init__` is a keyword call through the type; this sets the same slots from one
    plain frame (the same object)."""
    patch = _new_object(TextDelta)
    patch.kind = "text_delta"
    patch.key = key
    patch.text = text
    patch.refusal = False
    return patch


@dataclass(slots=True, kw_only=True)
class TextEnd:
    kind: Literal["text_end"] = "text_end"
    key: BlockKey = 0


@dataclass(slots=True, kw_only=True)
class ReasoningStart:
    kind: Literal["reasoning_start"] = "reasoning_start"
    key: BlockKey = "reasoning"
    redacted: str | None = None
    """Opaque payload of a redacted reasoning block (Anthropic redacted_thinking)."""


@dataclass(slots=True, kw_only=True)
class ReasoningDelta:
    """Reasoning text and/or its signature for block `key`; opens the block if needed."""

    kind: Literal["reasoning_delta"] = "reasoning_delta"
    key: BlockKey = "reasoning"
    text: str = ""
    signature: str | None = None


@dataclass(slots=True, kw_only=True)
class ReasoningEnd:
    kind: Literal["reasoning_end"] = "reasoning_end"
    key: BlockKey = "reasoning"
    signature: str | None = None


@dataclass(slots=True, kw_only=True)
class ToolStart:
    """A tool call begins. `server` marks tools the provider runs itself (web search, ...)."""

    kind: Literal["tool_start"] = "tool_start"
    key: BlockKey
    id: str
    name: str
    server: bool = False


@dataclass(slots=True, kw_only=True)
class ToolDelta:
    kind: Literal["tool_delta"] = "tool_delta"
    key: BlockKey
    fragment: str


@dataclass(slots=True, kw_only=True)
class ToolEnd:
    """The call is complete. `arguments` is given when the wire delivers a parsed object."""

    kind: Literal["tool_end"] = "tool_end"
    key: BlockKey
    arguments: dict[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class ToolResultStart:
    kind: Literal["tool_result_start"] = "tool_result_start"
    key: BlockKey
    tool_call_id: str
    name: str


@dataclass(slots=True, kw_only=True)
class ToolResultDelta:
    kind: Literal["tool_result_delta"] = "tool_result_delta"
    key: BlockKey
    content: str


@dataclass(slots=True, kw_only=True)
class ToolResultEnd:
    kind: Literal["tool_result_end"] = "tool_result_end"
    key: BlockKey
    is_error: bool = False


@dataclass(slots=True, kw_only=True)
class MessageDelta:
    """Message-level news: the stop reason and/or usage (later values win, field by field), a
    provider's content-filter annotations (merged, app/core/content_filter.py)."""

    kind: Literal["message_delta"] = "message_delta"
    stop_reason: StopReason | None = None
    usage: UsagePatch | None = None
    content_filter: ContentFilterData | None = None


@dataclass(slots=True, kw_only=True)
class MessageEnd:
    """The provider finished the message normally (OpenAI `[DONE]`, Anthropic `message_stop`)."""

    kind: Literal["message_end"] = "message_end"


@dataclass(slots=True, kw_only=True)
class Ignored:
    """Something the provider sent that the normalizer dropped because it does not change the
    answer (an unexpected delta kind for its block, ...): counted, never fatal (DESIGN.md 4)."""

    kind: Literal["ignored"] = "ignored"
    what: str
    """A short, bounded label, e.g. `anthropic:signature_delta_on_text`."""


@dataclass(slots=True, kw_only=True)
class Relay:
    """A provider event as the upstream sent it (its SSE frame), for a facade that speaks the
    provider's own wire to pass on. It follows the patches made from the same event, so it goes
    through the gate behind the text it carries (DESIGN.md section 10)."""

    kind: Literal["relay"] = "relay"
    frame: bytes


Patch = (
    MessageStart
    | TextStart
    | TextDelta
    | TextEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolStart
    | ToolDelta
    | ToolEnd
    | ToolResultStart
    | ToolResultDelta
    | ToolResultEnd
    | MessageDelta
    | MessageEnd
    | Ignored
    | Relay
)
