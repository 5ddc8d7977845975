"""Anthropic Messages stream events -> normalized patches.

Block keys are the wire's content block `index`. What each event becomes:
- `message_start`: MessageStart (id, model, usage); `message_delta`: stop reason and usage;
  `message_stop`: MessageEnd, the only proof the message completed; `ping`: nothing.
- `text`, `thinking`/`redacted_thinking`, `tool_use` blocks: text, reasoning (text and
  `signature_delta`, kept for the round trip) and tool patches. A tool block's arguments are its
  `input_json_delta` fragments, or the `input` of `content_block_start` when none arrive.
- Server tools (`server_tool_use`, `mcp_tool_use`) are ToolStart(server=True); their result blocks
  (`*_tool_result`) are one tool result whose content is the block's `content` as JSON.
- `citations_delta` is dropped: the canonical events have no citation type, and the cited text
  itself arrives in ordinary `text_delta`s. Blocks of unknown type (`compaction`, ...) and their
  deltas are ignored, as are unknown event types (Anthropic's versioning policy adds new ones).
- `event: error` raises UpstreamError (retryable for overload and server errors); a body that ends
  before `message_stop` raises `upstream_incomplete`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from app.core import safejson
from app.core.errors import UpstreamError
from app.core.events import StopReason
from app.core.patches import (
    Ignored,
    MessageDelta,
    MessageEnd,
    MessageStart,
    Patch,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolDelta,
    ToolEnd,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    ToolStart,
    UsagePatch,
    token_count,
    usage_object,
)
from app.providers.errors import stream_error as shared_stream_error
from app.providers.sse import SSEEvent

__all__ = [
    "normalizer",
    "AnthropicNormalizer",
    "STOP_REASON_MAP",
    "UsageTally",
    "is_error_content",
    "is_server_tool_result",
    "is_server_tool_use",
]

# https://docs.claude.com/en/api/handling-stop-reasons ; unknown values end as "stop".
STOP_REASON_MAP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "pause",
    "compaction": "pause",  # context management with pause_after_compaction
}



def is_server_tool_use(block_type: str) -> bool:
    """A tool the provider runs itself (web search, code execution, tool search, MCP)."""
    return block_type == "server_tool_use" or block_type == "mcp_tool_use"


def is_server_tool_result(block_type: str) -> bool:
    """The result block of a server tool: `web_search_tool_result`, `mcp_tool_result`, ..."""
    return block_type.endswith("_tool_result")


def is_error_content(block: Mapping[str, Any]) -> bool:
    """A server tool result that reports failure (`*_tool_result_error` content, or is_error)."""
    if block.get("is_error"):
        return True
    content = block.get("content")
    return isinstance(content, Mapping) and str(content.get("type", "")).endswith("_error")


@dataclass(slots=True)
class UsageTally:
    """Anthropic usage as last reported, field by field, turned into canonical usage.

    Canonical `input_tokens` counts every prompt token, cached or not: Anthropic's own
    `input_tokens` excludes cache reads and writes ("total input tokens is the sum of
    input_tokens, cache_creation_input_tokens and cache_read_input_tokens"), while OpenAI's
    prompt_tokens includes cached tokens; the cache fields are the breakdown, so the same
    conversation reads the same on both. `total_tokens` = input (with cache) + output.
    `reasoning_tokens` is `output_tokens_details.thinking_tokens`, a part of output_tokens.
    When compaction ran (`usage.iterations`), the top-level numbers cover only the last
    iteration; the iterations are summed so the compaction step's tokens are not lost.
    """

    input: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None
    thinking: int | None = None
    write_1h: int | None = None
    """`cache_creation.ephemeral_1h_input_tokens`: the 1-hour part of the cache writes (the rest are 5-minute)."""
    provider: str = "anthropic"
    """Named in the errors of a bad count (`bedrock`, `vertex` for Claude on those clouds)."""

    def update(self, raw: Mapping[str, Any]) -> UsagePatch:
        """Take a `usage` object's counts, each checked (`token_count`): a bad one is an
        `upstream_protocol_error`, and nothing of that object is taken."""
        iterations = raw.get("iterations")
        provider = self.provider
        if isinstance(iterations, list) and iterations:
            raw = {**raw, **_sum_iterations(iterations, provider)}
        details = usage_object(raw.get("output_tokens_details"), "output_tokens_details", provider=provider)
        created = usage_object(raw.get("cache_creation"), "cache_creation", provider=provider)
        counts = [_count(raw, name, provider) for name in ("input_tokens", "cache_read_input_tokens",
                                                           "cache_creation_input_tokens", "output_tokens")]
        counts += [_count(details, "thinking_tokens", provider), _count(created, "ephemeral_1h_input_tokens", provider)]
        for attr, value in zip(("input", "cache_read", "cache_write", "output", "thinking", "write_1h"), counts,
                               strict=True):
            if value is not None:
                setattr(self, attr, value)
        return self.patch()

    def patch(self) -> UsagePatch:
        parts = (self.input, self.cache_read, self.cache_write)
        inputs = None if all(p is None for p in parts) else sum(p or 0 for p in parts)
        total = None if inputs is None and self.output is None else (inputs or 0) + (self.output or 0)
        return UsagePatch(
            input_tokens=inputs, output_tokens=self.output, total_tokens=total,
            cache_read_tokens=self.cache_read, cache_write_tokens=self.cache_write,
            reasoning_tokens=self.thinking,
            cache_write_1h_tokens=None if self.write_1h is None else min(self.write_1h, self.cache_write or 0),
        )


def _count(raw: Mapping[str, Any], name: str, provider: str) -> int | None:
    return token_count(raw.get(name), name, provider=provider)


def _sum_iterations(iterations: list[Any], provider: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in iterations:
        item = usage_object(item, "iterations", provider=provider)
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            if (v := _count(item, name, provider)) is not None:
                out[name] = out.get(name, 0) + v
    return out


BlockKind = Literal["text", "reasoning", "tool", "result", "ignored"]
_DELTA_BLOCK: dict[str, BlockKind] = {
    "text_delta": "text", "input_json_delta": "tool", "thinking_delta": "reasoning", "signature_delta": "reasoning",
}
"""The block kind each known delta belongs to."""
_NO_INDEX = -1
_DELTA_CONTENT = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking",
                  "signature_delta": "signature"}


@dataclass(slots=True, kw_only=True)
class _Block:
    kind: BlockKind
    start_input: Any = None
    """tool: the `input` of content_block_start, used when no input_json_delta arrives."""
    streamed: bool = False
    is_error: bool = False


@dataclass(slots=True, kw_only=True)
class AnthropicNormalizer:
    """One Messages stream's SSE events -> patches (the StreamNormalizer contract). `provider` is
    named in its errors: `anthropic`, or `bedrock` / `vertex` for Claude on those clouds."""

    provider: str = "anthropic"
    usage: UsageTally = field(default_factory=UsageTally)
    stop_sequence: str | None = None
    _blocks: dict[int, _Block] = field(default_factory=dict)
    _tool_names: dict[str, str] = field(default_factory=dict)
    _done: bool = False
    _error: UpstreamError | None = None

    def __post_init__(self) -> None:
        self.usage.provider = self.provider

    def feed(self, event: SSEEvent, out: list[Patch]) -> None:
        if self._error is not None:
            self._raise_error(out)
        if event.event == "ping" or self._done:
            return
        try:
            data = safejson.loads(event.data)
        except orjson.JSONDecodeError:
            raise UpstreamError(
                f"{self.provider}: undecodable stream event {event.event!r}", code="upstream_protocol_error",
                provider=self.provider,
            ) from None
        if not isinstance(data, dict):
            raise UpstreamError(f"{self.provider}: stream event is not a JSON object",
                                code="upstream_protocol_error", provider=self.provider)
        kind = data.get("type", event.event)
        if kind == "content_block_delta":
            self._block_delta(data, out)
        elif kind == "content_block_start":
            self._block_start(data, out)
        elif kind == "content_block_stop":
            self._block_stop(data, out)
        elif kind == "message_start":
            message = data.get("message") or {}
            usage = message.get("usage")
            out.append(MessageStart(
                id=message.get("id"), model=message.get("model"),
                usage=None if usage is None else self.usage.update(usage_object(usage, "usage", provider=self.provider)),
            ))
        elif kind == "message_delta":
            self._message_delta(data, out)
        elif kind == "message_stop":
            self._done = True
            out.append(MessageEnd())
        elif kind == "error":
            self._done = True
            self._error = stream_error(data.get("error"), data.get("request_id"), self.provider)
            self._raise_error(out)
        # ping and event types added later: nothing to do.

    def _raise_error(self, out: list[Patch]) -> None:
        # Raising drops the patches already in this batch (the text before the error, read in
        # the same chunk), so the error waits for an empty batch: the next chunk, or finish().
        if not out and self._error is not None:
            raise self._error

    def finish(self, out: list[Patch]) -> None:
        if self._error is not None:
            raise self._error
        if not self._done:
            raise UpstreamError(
                f"{self.provider}: stream ended before message_stop", code="upstream_incomplete",
                retryable=True, provider=self.provider,
            )

    # -- blocks ----------------------------------------------------------------------------

    def _block_start(self, data: dict[str, Any], out: list[Patch]) -> None:
        key = data.get("index")
        block = data.get("content_block") or {}
        btype = str(block.get("type", ""))
        if not isinstance(key, int):
            raise UpstreamError(f"{self.provider}: content block without an index",
                                code="upstream_protocol_error", provider=self.provider)
        if btype == "text":
            self._blocks[key] = _Block(kind="text")
            out.append(TextStart(key=key))
            if block.get("text"):
                out.append(TextDelta(key=key, text=block["text"]))
        elif btype == "thinking":
            self._blocks[key] = _Block(kind="reasoning")
            out.append(ReasoningStart(key=key))
            if block.get("thinking") or block.get("signature"):
                out.append(ReasoningDelta(key=key, text=block.get("thinking") or "",
                                          signature=block.get("signature") or None))
        elif btype == "redacted_thinking":
            self._blocks[key] = _Block(kind="reasoning")
            out.append(ReasoningStart(key=key, redacted=block.get("data") or ""))
        elif btype == "tool_use" or is_server_tool_use(btype):
            server = btype != "tool_use"
            call_id, name = str(block.get("id", "")), str(block.get("name", ""))
            self._tool_names[call_id] = name
            self._blocks[key] = _Block(kind="tool", start_input=block.get("input"))
            out.append(ToolStart(key=key, id=call_id, name=name, server=server))
        elif is_server_tool_result(btype):
            call_id = str(block.get("tool_use_id", ""))
            self._blocks[key] = _Block(kind="result", is_error=is_error_content(block))
            out.append(ToolResultStart(key=key, tool_call_id=call_id, name=self._tool_names.get(call_id, btype)))
            out.append(ToolResultDelta(key=key, content=orjson.dumps(block.get("content")).decode()))
        else:
            self._blocks[key] = _Block(kind="ignored")  # compaction, container_upload, ...

    def _block_delta(self, data: dict[str, Any], out: list[Patch]) -> None:
        key = data.get("index")
        if not isinstance(key, int):
            key = _NO_INDEX  # as before: a delta without an index still counts (its block auto-opens)
        delta = data.get("delta") or {}
        dtype = str(delta.get("type", ""))
        block = self._blocks.get(key)
        if block is not None and block.kind == "ignored":
            return
        expected = _DELTA_BLOCK.get(dtype)
        if expected is None:
            return  # citations_delta and delta types added later are dropped (module docstring)
        if block is not None and block.kind != expected:
            out.append(_misplaced(dtype, delta, block.kind, self.provider))
            return
        if dtype == "text_delta":
            out.append(TextDelta(key=key, text=delta.get("text", "")))
        elif dtype == "input_json_delta":
            fragment = delta.get("partial_json", "")
            if fragment:
                if block is not None:
                    block.streamed = True
                out.append(ToolDelta(key=key, fragment=fragment))
        elif dtype == "thinking_delta":
            if delta.get("thinking"):
                out.append(ReasoningDelta(key=key, text=delta["thinking"]))
        elif delta.get("signature"):  # signature_delta
            out.append(ReasoningDelta(key=key, signature=delta["signature"]))

    def _block_stop(self, data: dict[str, Any], out: list[Patch]) -> None:
        key = data.get("index")
        block = self._blocks.pop(key, None) if isinstance(key, int) else None
        if block is None or not isinstance(key, int):
            return
        if block.kind == "text":
            out.append(TextEnd(key=key))
        elif block.kind == "reasoning":
            out.append(ReasoningEnd(key=key))
        elif block.kind == "tool":
            given = None
            if not block.streamed and isinstance(block.start_input, dict):
                given = block.start_input
            out.append(ToolEnd(key=key, arguments=given))
        elif block.kind == "result":
            out.append(ToolResultEnd(key=key, is_error=block.is_error))

    # -- message ---------------------------------------------------------------------------

    def _message_delta(self, data: dict[str, Any], out: list[Patch]) -> None:
        delta = data.get("delta") or {}
        reason = delta.get("stop_reason")
        if delta.get("stop_sequence"):
            self.stop_sequence = delta["stop_sequence"]
        usage = data.get("usage")
        out.append(MessageDelta(
            stop_reason=STOP_REASON_MAP.get(reason, "stop") if reason else None,
            usage=None if usage is None else self.usage.update(usage_object(usage, "usage", provider=self.provider)),
        ))


def stream_error(error: Any, request_id: Any = None, provider: str = "anthropic") -> UpstreamError:
    """An in-stream `event: error` as the UpstreamError that ends the stream."""
    error = error if isinstance(error, Mapping) else {}
    kind = str(error.get("type") or "error")
    return shared_stream_error(provider, f"{kind}: {error.get('message') or 'error event in stream'}",
                               kind=kind, request_id=request_id if isinstance(request_id, str) else None)


def _misplaced(dtype: str, delta: dict[str, Any], kind: str, provider: str) -> Ignored:
    """A delta aimed at a block of another kind: fatal when it carries text, thinking or arguments
    with nowhere to go (the answer would be wrong); else (a signature_delta on a text block, an
    empty delta) ignored and counted, never fatal (DESIGN.md section 4)."""
    if delta.get(_DELTA_CONTENT[dtype]) and dtype != "signature_delta":
        raise UpstreamError(f"{provider}: {dtype} for a {kind} block", code="upstream_protocol_error",
                            provider=provider)
    return Ignored(what=f"anthropic:{dtype}_on_{kind}")


def normalizer(provider: str) -> AnthropicNormalizer:
    """A fresh normalizer for one response (its descriptor's `normalizer`)."""
    return AnthropicNormalizer(provider=provider)
