"""Bedrock `ConverseStream` events (AWS event-stream frames) -> normalized patches.

Each frame's `:event-type` names the event, its payload is one JSON object
(https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html):
- `messageStart`: MessageStart; `messageStop`: the stop reason; `metadata` (usage, metrics):
  usage, then MessageEnd. Bedrock sends `metadata` after `messageStop`, so a stream that ends
  right after `messageStop` still completed (MessageEnd at finish).
- `contentBlockStart` / `contentBlockDelta` / `contentBlockStop` keyed by `contentBlockIndex`:
  `delta.text` -> text; `start.toolUse` + `delta.toolUse.input` fragments -> a tool call (the
  call's own `toolUseId`, never an index-made one, so parallel calls keep their ids);
  `delta.reasoningContent` `text` / `signature` / `redactedContent` -> a reasoning block whose
  signature is kept for the round trip. A delta for a block never started opens it by its kind.
- Exceptions arrive as frames with `:message-type: exception` and `:exception-type`; they end
  the stream through the shared mapping (app/providers/errors.py) with the HTTP status AWS
  documents for each, so `throttlingException` is a 429 (retryable, before output an HTTP 429).
- The `p` padding field, `trace`, `performanceConfig` and event types added later are ignored.
Canonical `input_tokens` counts the whole prompt: Bedrock's `inputTokens` excludes cache reads
and writes (as Anthropic's does), so they are added back, as app/providers/anthropic_stream.py does.
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
    ToolDelta,
    ToolEnd,
    ToolStart,
    UsagePatch,
    token_count,
    usage_object,
)
from app.providers.errors import stream_error
from app.providers.eventstream import EventFrame

__all__ = ["EXCEPTION_STATUS", "STOP_REASON_MAP", "ConverseNormalizer", "exception_error", "normalizer"]

# https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_MessageStopEvent.html
STOP_REASON_MAP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}

# The HTTP status AWS documents for each exception of ConverseStream / InvokeModelWithResponseStream.
EXCEPTION_STATUS: dict[str, int] = {
    "throttlingException": 429,
    "serviceQuotaExceededException": 429,
    "validationException": 400,
    "accessDeniedException": 403,
    "resourceNotFoundException": 404,
    "modelTimeoutException": 408,
    "modelNotReadyException": 503,
    "serviceUnavailableException": 503,
    "internalServerException": 500,
    "modelStreamErrorException": 502,
    "modelErrorException": 502,
}


def exception_error(provider: str, frame: EventFrame) -> UpstreamError:
    """An `exception` (or `error`) frame as the UpstreamError that ends the stream."""
    kind = frame.exception_type or frame.error_code or frame.event_type or "exception"
    message = frame.error_message or ""
    try:
        data = safejson.loads(frame.payload) if frame.payload else {}
        if isinstance(data, Mapping):
            message = str(data.get("message") or data.get("Message") or message)
    except orjson.JSONDecodeError:
        pass
    status = EXCEPTION_STATUS.get(kind[:1].lower() + kind[1:], 502)
    return stream_error(provider, f"{kind}: {message or 'exception in stream'}", status=status, kind=kind)


BlockKind = Literal["text", "tool", "reasoning"]


@dataclass(slots=True, kw_only=True)
class _Block:
    kind: BlockKind
    streamed: bool = False


@dataclass(slots=True, kw_only=True)
class ConverseNormalizer:
    """One ConverseStream response's frames -> patches (the StreamNormalizer contract, for frames)."""

    provider: str = "bedrock"
    model: str | None = None
    usage: dict[str, Any] | None = None
    """The last `metadata.usage` as sent (its counts checked)."""
    _blocks: dict[int, _Block] = field(default_factory=dict)
    _stopped: bool = False
    _done: bool = False

    def feed(self, frame: EventFrame, out: list[Patch]) -> None:
        if frame.message_type != "event":
            self._done = True
            raise exception_error(self.provider, frame)
        if self._done:
            return
        data = self._json(frame)
        kind = frame.event_type
        if kind == "contentBlockDelta":
            self._delta(data, out)
        elif kind == "contentBlockStart":
            self._start(data, out)
        elif kind == "contentBlockStop":
            self._stop(data, out)
        elif kind == "messageStart":
            out.append(MessageStart(model=self.model))
        elif kind == "messageStop":
            self._stopped = True
            reason = data.get("stopReason")
            out.append(MessageDelta(stop_reason=STOP_REASON_MAP.get(reason, "stop") if isinstance(reason, str) else None))
        elif kind == "metadata":
            usage = usage_object(data.get("usage"), "usage", provider=self.provider)
            if usage:
                out.append(MessageDelta(usage=self._usage(usage)))
            self._end(out)
        else:
            out.append(Ignored(what=f"{self.provider}:{kind[:40]}"))

    def finish(self, out: list[Patch]) -> None:
        if self._stopped and not self._done:
            self._end(out)
        if not self._done:
            raise UpstreamError(f"{self.provider}: the stream ended before messageStop", code="upstream_incomplete",
                                retryable=True, provider=self.provider)

    def _end(self, out: list[Patch]) -> None:
        self._done = True
        out.append(MessageEnd())

    def _json(self, frame: EventFrame) -> dict[str, Any]:
        try:
            data = safejson.loads(frame.payload)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise UpstreamError(f"{self.provider}: event {frame.event_type[:40]!r} is not a JSON object",
                                code="upstream_protocol_error", provider=self.provider)
        return data

    def _index(self, data: Mapping[str, Any]) -> int:
        index = data.get("contentBlockIndex")
        if not isinstance(index, int) or isinstance(index, bool):
            raise UpstreamError(f"{self.provider}: content block event without a contentBlockIndex",
                                code="upstream_protocol_error", provider=self.provider)
        return index

    def _start(self, data: Mapping[str, Any], out: list[Patch]) -> None:
        key = self._index(data)
        start = data.get("start") or {}
        tool = start.get("toolUse") if isinstance(start, Mapping) else None
        if isinstance(tool, Mapping):
            self._blocks[key] = _Block(kind="tool")
            out.append(ToolStart(key=key, id=str(tool.get("toolUseId") or f"tooluse_{key}"),
                                 name=str(tool.get("name") or "")))
        else:  # a start of another kind (image, toolResult, ...) opens nothing the answer carries
            out.append(Ignored(what=f"{self.provider}:block_start"))

    def _delta(self, data: Mapping[str, Any], out: list[Patch]) -> None:
        key = self._index(data)
        delta = data.get("delta")
        if not isinstance(delta, Mapping):
            return
        block = self._blocks.get(key)
        if "text" in delta:
            self._open(key, "text", block)
            if delta["text"]:
                out.append(TextDelta(key=key, text=str(delta["text"])))
        elif "toolUse" in delta:
            if block is None or block.kind != "tool":
                raise UpstreamError(f"{self.provider}: toolUse input for block {key}, which is not a tool call",
                                    code="upstream_protocol_error", provider=self.provider)
            fragment = (delta.get("toolUse") or {}).get("input")
            if isinstance(fragment, str) and fragment:
                block.streamed = True
                out.append(ToolDelta(key=key, fragment=fragment))
        elif "reasoningContent" in delta:
            self._reasoning(key, delta.get("reasoningContent") or {}, block, out)
        else:
            out.append(Ignored(what=f"{self.provider}:delta_{next(iter(delta), '')[:30]}"))

    def _open(self, key: int, kind: BlockKind, block: _Block | None) -> None:
        if block is None:
            self._blocks[key] = _Block(kind=kind)
        elif block.kind != kind:
            raise UpstreamError(f"{self.provider}: {kind} delta for a {block.kind} block",
                                code="upstream_protocol_error", provider=self.provider)

    def _reasoning(self, key: int, content: Mapping[str, Any], block: _Block | None, out: list[Patch]) -> None:
        redacted = content.get("redactedContent")
        if block is None and redacted is not None:
            self._blocks[key] = _Block(kind="reasoning")
            # redactedContent is a blob: base64 in the JSON payload, kept as sent for the round trip
            out.append(ReasoningStart(key=key, redacted=str(redacted)))
            return
        self._open(key, "reasoning", block)
        if block is None:
            out.append(ReasoningStart(key=key))
        text, signature = content.get("text"), content.get("signature")
        if text or signature:
            out.append(ReasoningDelta(key=key, text=str(text or ""), signature=str(signature) if signature else None))

    def _stop(self, data: Mapping[str, Any], out: list[Patch]) -> None:
        key = self._index(data)
        block = self._blocks.pop(key, None)
        if block is None:
            return
        if block.kind == "text":
            out.append(TextEnd(key=key))
        elif block.kind == "reasoning":
            out.append(ReasoningEnd(key=key))
        else:
            out.append(ToolEnd(key=key, arguments=None if block.streamed else {}))

    def _usage(self, usage: Mapping[str, Any]) -> UsagePatch:
        def count(name: str) -> int | None:
            return token_count(usage.get(name), name, provider=self.provider)

        inputs, output = count("inputTokens"), count("outputTokens")
        read, write = count("cacheReadInputTokens"), count("cacheWriteInputTokens")
        count("totalTokens")
        self.usage = dict(usage)
        prompt = None if inputs is None and read is None and write is None else (inputs or 0) + (read or 0) + (write or 0)
        total = None if prompt is None and output is None else (prompt or 0) + (output or 0)
        return UsagePatch(input_tokens=prompt, output_tokens=output, total_tokens=total,
                          cache_read_tokens=read, cache_write_tokens=write)


def normalizer(provider: str) -> ConverseNormalizer:
    """A fresh normalizer for one response (its descriptor's `normalizer`)."""
    return ConverseNormalizer(provider=provider)
