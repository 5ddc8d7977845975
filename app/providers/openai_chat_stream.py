"""The normalizer for OpenAI Chat Completions streams (`chat.completion.chunk`), and compatibles.

Wire facts it relies on (read off shared/fixtures/openai-chat, see its README):
- text is `delta.content`; tool calls are `delta.tool_calls[]` keyed by `index`, with `id` and
  `function.name` on the first fragment only; Groq sends a whole call in one fragment.
- `delta.reasoning_content` (DeepSeek, vLLM) or `delta.reasoning` (OpenRouter, Groq) is reasoning.
- `finish_reason` comes on choice 0's last chunk; with `stream_options.include_usage` the usage
  follows in a chunk with `choices: []`, and further empty-choice chunks may follow it
  (`moderation-chunk-after-usage`), so usage is taken from any chunk that carries it, never from
  "the last chunk". DeepSeek and Groq put usage on the finish chunk.
- `data: [DONE]` ends the body. An error arrives as an `error` object inside a chunk (OpenRouter,
  HTTP 200, `[DONE]` after it) or as an `event: error` frame (Groq, no `[DONE]`).

Decisions:
1. With `n > 1` only choice 0 is the canonical stream; other choices are dropped (the canonical
   events have no choice index). Usage still covers every choice, as the provider reports it.
2. A refusal (`delta.refusal`) is surfaced as text marked `refusal` (the facades give it back in
   OpenAI's `refusal` field) and the stop reason becomes `content_filter`:
   the refusal is the model's own words to the user (dropping it would leave an empty answer that
   looks like a blank `stop`), and `content_filter` lets a program tell it from an answer.
3. An in-stream error is recorded and raised from `finish()` at the end of the body (the servers
   close it right after): raised from `feed()`, it would discard the patches already produced
   from the same read (the text before it, the usage on the error chunk itself), and the same
   bytes would give different events depending on where the reads split.
4. A body that ends inside an event (the decoder flushes half a JSON chunk) is
   `upstream_incomplete`, like one that ends between events, not a protocol error.
5. Azure's content-filter annotations (`prompt_filter_results` on a chunk, `content_filter_results`
   and `content_filter_offsets` on choice 0) are kept for the final's `content_filter`
   (app/core/content_filter.py); they are no answer, and a chat facade relays them as sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.core import safejson
from app.core.content_filter import ContentFilterData
from app.core.errors import UpstreamError
from app.core.events import StopReason
from app.core.patches import (
    BlockKey,
    MessageDelta,
    MessageEnd,
    MessageStart,
    Patch,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolDelta,
    ToolEnd,
    ToolStart,
    UsagePatch,
    text_delta,
    token_count,
    usage_object,
)
from app.providers.errors import stream_error as shared_stream_error
from app.providers.sse import SSEEvent

__all__ = ["ChatChunkNormalizer", "normalizer", "stream_error", "usage_patch"]

TEXT_KEY = "content"
REASONING_KEY = "reasoning"

_orjson_loads = orjson.loads
_FILTER_RESULTS, _FILTER_OFFSETS = "content_filter_results", "content_filter_offsets"  # Azure's (decision 5)

_FINISH_REASON_MAP: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",  # the deprecated functions API
    "content_filter": "content_filter",
    "eos": "stop",  # some compatible servers (older vLLM, TGI)
}
# Any other finish_reason still means the provider finished: it maps to "stop".



@dataclass(slots=True, kw_only=True)
class _ToolSlot:
    key: BlockKey
    id: str


def usage_patch(usage: Any, provider: str = "openai") -> UsagePatch:
    """OpenAI `usage` -> canonical usage (cached prompt tokens are cache reads; compatible servers
    that report `prompt_tokens_details.cache_write_tokens` give the cache writes). Every count is
    checked (`token_count`): a bad one is an `upstream_protocol_error`."""
    usage = usage_object(usage, "usage", provider=provider)
    prompt_details = usage_object(usage.get("prompt_tokens_details"), "prompt_tokens_details", provider=provider)
    completion_details = usage_object(usage.get("completion_tokens_details"), "completion_tokens_details",
                                      provider=provider)
    cached = token_count(prompt_details.get("cached_tokens"), "cached_tokens", provider=provider)
    if cached is None:
        cached = token_count(usage.get("prompt_cache_hit_tokens"), "prompt_cache_hit_tokens",  # DeepSeek's own
                             provider=provider)
    return UsagePatch(
        input_tokens=token_count(usage.get("prompt_tokens"), "prompt_tokens", provider=provider),
        output_tokens=token_count(usage.get("completion_tokens"), "completion_tokens", provider=provider),
        total_tokens=token_count(usage.get("total_tokens"), "total_tokens", provider=provider),
        cache_read_tokens=cached,
        cache_write_tokens=token_count(prompt_details.get("cache_write_tokens"), "cache_write_tokens",
                                       provider=provider),
        reasoning_tokens=token_count(completion_details.get("reasoning_tokens"), "reasoning_tokens",
                                     provider=provider),
    )


def stream_error(payload: Any, provider: str) -> UpstreamError:
    """An OpenAI error object found in the stream (`{message, type, code, status?}`)."""
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if not isinstance(error, dict):
        return shared_stream_error(provider, f"stream error: {str(error)[:500]}")
    code = error.get("code")
    status = error.get("status_code") or error.get("status")
    if not isinstance(status, int):
        status = code if isinstance(code, int) else None
    kind = error.get("type")
    return shared_stream_error(
        provider, error.get("message") or "error in stream", status=status,
        kind=kind if isinstance(kind, str) else None, upstream_code=code if isinstance(code, str) else None,
    )


def _filter_annotations(choice: dict[str, Any]) -> ContentFilterData | None:
    """Azure's per-choice `content_filter_results` (and its asynchronous filter's offsets), if any."""
    out: ContentFilterData = {}
    results = choice.get(_FILTER_RESULTS)
    if results and isinstance(results, dict):
        out["completion"] = results
    offsets = choice.get(_FILTER_OFFSETS)
    if offsets and isinstance(offsets, dict):
        out["offsets"] = offsets
    return out or None


class ChatChunkNormalizer:
    """`chat.completion.chunk` SSE events -> normalized patches. One instance per response."""

    __slots__ = ("_provider", "_started", "_done", "_finished", "_refused", "_reasoning_open",
                 "_tools", "_failure", "_torn")

    def __init__(self, *, provider: str = "openai") -> None:
        self._provider = provider
        self._started = False
        self._done = False  # [DONE] seen
        self._finished = False  # a finish_reason seen
        self._refused = False
        self._reasoning_open = False
        self._tools: dict[int, _ToolSlot] = {}  # open calls by wire index
        self._failure: UpstreamError | None = None
        self._torn = False  # the last event was cut JSON: if nothing follows, the body was cut

    def feed(self, event: SSEEvent, out: list[Patch]) -> None:
        if self._done or self._failure is not None:
            self._torn = False
            return  # nothing after [DONE] or an error counts (decision 3)
        data = event.data
        if event.event != "message":
            if event.event == "error":
                self._failure = stream_error(self._loads(data, lenient=True), self._provider)
            return  # unknown event types are ignored, like unknown SSE fields
        if data == "[DONE]":
            self._done = True
            self._close(out)
            return
        try:  # orjson at once; safejson's fallback (lone surrogates) and the failure in `_loads`
            chunk = _orjson_loads(data)
        except orjson.JSONDecodeError:
            chunk = self._loads(data)
        if not isinstance(chunk, dict):
            if self._failure is None:
                self._fail("a chunk is not a JSON object")
            return
        try:
            self._chunk(chunk, out)
        except (AttributeError, TypeError, ValueError) as exc:  # a field of the wrong type
            self._fail(f"malformed chunk ({exc})")

    def _chunk(self, chunk: dict[str, Any], out: list[Patch]) -> None:
        if not self._started and (chunk.get("id") or chunk.get("model")):
            self._started = True
            out.append(MessageStart(id=chunk.get("id") or None, model=chunk.get("model") or None))
        choices = chunk.get("choices")
        if choices:
            for choice in choices:
                if not choice.get("index"):  # choice 0 (or a server that omits the index): decision 1
                    self._choice(choice, out)
        usage = chunk.get("usage")
        if usage:
            out.append(MessageDelta(usage=usage_patch(usage, self._provider)))
        prompt_filter = chunk.get("prompt_filter_results")
        if prompt_filter and isinstance(prompt_filter, list):  # Azure: decision 5
            out.append(MessageDelta(content_filter={"prompt": prompt_filter}))
        error = chunk.get("error")
        if error:
            self._failure = stream_error(error, self._provider)

    def finish(self, out: list[Patch]) -> None:
        if self._failure is not None and not self._torn:
            raise self._failure
        if self._done:
            return
        if self._finished and not self._torn:  # a finish_reason without [DONE]: some servers omit it
            self._close(out)
            return
        where = "inside an event" if self._torn else "before [DONE] or a finish_reason"
        raise UpstreamError(f"{self._provider}: the stream ended {where}",
                            code="upstream_incomplete", retryable=True, provider=self._provider)

    # -- one choice ------------------------------------------------------------------------

    def _choice(self, choice: dict[str, Any], out: list[Patch]) -> None:
        delta = choice.get("delta")
        if delta and len(delta) == 1 and "content" in delta:  # a plain text delta, most of a stream
            content = delta["content"]
            if content:
                if content.__class__ is not str:
                    raise TypeError("delta.content is not a string")
                if self._reasoning_open:
                    self._end_reasoning(out)
                out.append(text_delta(TEXT_KEY, content))
        elif delta:
            self._delta(delta, out)
        if _FILTER_RESULTS in choice or _FILTER_OFFSETS in choice:  # no other server sends them
            annotations = _filter_annotations(choice)
            if annotations:
                out.append(MessageDelta(content_filter=annotations))
        finish = choice.get("finish_reason")
        if finish:
            self._finished = True
            self._end_tools(out)
            stop = _FINISH_REASON_MAP.get(finish, "stop")
            if self._refused and stop == "stop":
                stop = "content_filter"
            out.append(MessageDelta(stop_reason=stop))

    def _delta(self, delta: dict[str, Any], out: list[Patch]) -> None:
        """Any other delta: reasoning, text, a refusal, tool-call fragments."""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            self._reasoning_open = True
            out.append(ReasoningDelta(key=REASONING_KEY, text=reasoning))
        content = delta.get("content")
        if content:
            if not isinstance(content, str):
                raise TypeError("delta.content is not a string")
            if self._reasoning_open:
                self._end_reasoning(out)
            out.append(TextDelta(key=TEXT_KEY, text=content))
        refusal = delta.get("refusal")
        if refusal:  # decision 2
            if not isinstance(refusal, str):
                raise TypeError("delta.refusal is not a string")
            self._refused = True
            self._end_reasoning(out)
            out.append(TextDelta(key=TEXT_KEY, text=refusal, refusal=True))
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            self._end_reasoning(out)
            self._tool_deltas(tool_calls, out)

    def _tool_deltas(self, tool_calls: list[dict[str, Any]], out: list[Patch]) -> None:
        for position, call in enumerate(tool_calls):
            index = call.get("index")
            if index is None:  # servers that omit it send one call per list position
                index = position
            function = call.get("function") or {}
            call_id = call.get("id")
            slot = self._tools.get(index)
            if slot is None or (call_id and call_id != slot.id):
                if slot is not None:  # a new call reusing an index (seen on some servers)
                    out.append(ToolEnd(key=slot.key))
                name = function.get("name")
                if not name:
                    self._fail(f"tool call at index {index} starts without a function name")
                    return
                key: BlockKey = index if slot is None else f"{index}:{call_id}"
                slot = self._tools[index] = _ToolSlot(key=key, id=call_id or f"call_{index}")
                out.append(ToolStart(key=key, id=slot.id, name=name))
            arguments = function.get("arguments")
            if arguments:
                if not isinstance(arguments, str):  # a parsed object from a lenient server
                    arguments = orjson.dumps(arguments).decode()
                out.append(ToolDelta(key=slot.key, fragment=arguments))

    # -- closing ---------------------------------------------------------------------------

    def _end_reasoning(self, out: list[Patch]) -> None:
        if self._reasoning_open:
            self._reasoning_open = False
            out.append(ReasoningEnd(key=REASONING_KEY))

    def _end_tools(self, out: list[Patch]) -> None:
        for slot in self._tools.values():
            out.append(ToolEnd(key=slot.key))
        self._tools.clear()

    def _close(self, out: list[Patch]) -> None:
        self._end_reasoning(out)
        self._end_tools(out)
        out.append(MessageEnd())

    def _loads(self, data: str, *, lenient: bool = False) -> Any:
        try:
            return safejson.loads(data)
        except orjson.JSONDecodeError:
            if lenient:
                return data
            self._fail(f"a chunk is not JSON: {data[:200]!r}")
            self._torn = True
            return None

    def _fail(self, reason: str) -> None:
        self._failure = UpstreamError(
            f"{self._provider}: {reason}", code="upstream_protocol_error", provider=self._provider
        )


def normalizer(provider: str) -> ChatChunkNormalizer:
    """A fresh normalizer for one response of `provider` (its descriptor's `normalizer`)."""
    return ChatChunkNormalizer(provider=provider)
