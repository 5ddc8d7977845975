"""The normalizer for Gemini `streamGenerateContent?alt=sse` (Gemini API and Vertex AI).

Wire facts it relies on (read off shared/fixtures/gemini, see its README):
- Each `data:` frame (CRLF-framed) is a whole GenerateContentResponse: `candidates[0].content
  .parts`, a `usageMetadata` snapshot (cumulative, not a delta), `modelVersion`, `responseId`.
  There is no `[DONE]`: the last chunk carries `finishReason`.
- Text parts continue across chunks; parts with `thought: true` are reasoning.
- A `functionCall` part is a whole call (`name`, `args`), with no id. Vertex AI may stream one:
  `{name, willContinue: true}`, then `{partialArgs: [{jsonPath, stringValue, willContinue}]}`
  parts, then a part without `willContinue` ends it.
- `thoughtSignature` rides on the first part after the thoughts (text or functionCall).
- `executableCode` / `codeExecutionResult` parts are the code execution tool, matched by `id`.

Decisions:
1. Call ids: Gemini gives none (or an `id` we keep when present), so the gateway assigns stable
   ones, `call_<responseId>_<n>` (n counts the response's calls from 0). Requests map function
   responses back by name and order (gemini.py), so the id never goes upstream.
2. A call is emitted complete: ToolStart, then ToolEnd with the parsed `args`. Vertex partial
   args are assembled by `jsonPath` and emitted when the call ends.
3. Each `thoughtSignature` becomes a reasoning block of its own (empty text, the signature),
   so the next request can send it back (gemini.py puts it on the first call or text part).
4. Usage: input = promptTokenCount + toolUsePromptTokenCount; output = candidatesTokenCount +
   thoughtsTokenCount (thoughts are output tokens, as OpenAI counts reasoning); reasoning =
   thoughtsTokenCount; cache reads = cachedContentTokenCount; total as reported.
5. Google Search grounding (`groundingMetadata`, repeated on every chunk) becomes one server
   call `google_search` with the queries, and its result (the web sources), at the end.
6. `promptFeedback.blockReason` raises UpstreamBlocked (final status "blocked"); an `error`
   object and a failed tool-call finish raise UpstreamError. Both are recorded and raised from
   `finish()`, so the same bytes give the same events however the reads split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.core import safejson
from app.core.errors import GatewayError, UpstreamBlocked, UpstreamError
from app.core.events import StopReason
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    MessageStart,
    Patch,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolEnd,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    ToolStart,
    UsagePatch,
    token_count,
    usage_object,
)
from app.providers.errors import stream_error
from app.providers.sse import SSEEvent

__all__ = ["GeminiNormalizer", "gemini_error", "gemini_usage", "normalizer"]

TEXT_KEY = "text"
THOUGHT_KEY = "thought"

_FINISH_REASON_MAP: dict[str, StopReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
}
# Any other finish reason (OTHER, FINISH_REASON_UNSPECIFIED, new ones) still means "finished": stop.
_FAILED_TOOL_CALL_REASONS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})
_PATH_STEP_RE = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]")


def gemini_usage(usage: Any, provider: str = "gemini") -> UsagePatch | None:
    """A usageMetadata snapshot -> canonical usage (decision 4); None when it has no counts. Every
    count checked (`token_count`) before any sum."""
    usage = usage_object(usage, "usageMetadata", provider=provider)
    if "promptTokenCount" not in usage and "totalTokenCount" not in usage:
        return None  # Vertex sends {"trafficType": ...} alone mid-stream

    def count(name: str) -> int:
        return token_count(usage.get(name), name, provider=provider) or 0

    thoughts = count("thoughtsTokenCount")
    return UsagePatch(
        input_tokens=count("promptTokenCount") + count("toolUsePromptTokenCount"),
        output_tokens=count("candidatesTokenCount") + thoughts,
        total_tokens=token_count(usage.get("totalTokenCount"), "totalTokenCount", provider=provider),
        cache_read_tokens=count("cachedContentTokenCount"),
        reasoning_tokens=thoughts,
    )


def gemini_error(error: Any, provider: str) -> UpstreamError:
    """A Google API error object (`{code, message, status}`) found in the stream."""
    if not isinstance(error, dict):
        return stream_error(provider, f"stream error: {str(error)[:500]}")
    code, status = error.get("code"), error.get("status")
    return stream_error(provider, error.get("message") or "error in stream",
                        status=code if isinstance(code, int) else None,
                        upstream_code=status if isinstance(status, str) else None)


def _set_path(args: dict[str, Any], path: str, value: Any, *, append: bool) -> None:
    """Set `$.a.b[0]` in `args` (Vertex partialArgs); a string streamed in pieces is appended."""
    matches = list(_PATH_STEP_RE.finditer(path, 1))
    if not path.startswith("$") or not matches or "".join(m[0] for m in matches) != path[1:]:
        raise ValueError(f"unsupported jsonPath {path!r}")
    steps: list[str | int] = [int(m[2]) if m[2] else (m[1] if m[1] is not None else m[3]) for m in matches]
    node: Any = args
    for step, following in zip(steps, steps[1:], strict=False):
        node = _child(node, step, [] if isinstance(following, int) else {})
    last = steps[-1]
    current = _child(node, last, None)
    node[last] = current + value if append and isinstance(current, str) else value


def _child(node: Any, step: str | int, default: Any) -> Any:
    if isinstance(step, int):
        node.extend([None] * (step + 1 - len(node)))
        if node[step] is None:
            node[step] = default
        return node[step]
    return node.setdefault(step, default)


@dataclass(slots=True, kw_only=True)
class _OpenCall:
    key: str
    args: dict[str, Any] = field(default_factory=dict)


class GeminiNormalizer:
    """GenerateContentResponse chunks -> normalized patches (candidate 0 only)."""

    __slots__ = ("_provider", "_started", "_response_id", "_finish", "_failure", "_thought_open",
                 "_calls", "_open_call", "_signatures", "_code_calls", "_last_code_id", "_grounding")

    def __init__(self, *, provider: str = "gemini") -> None:
        self._provider = provider
        self._started = False
        self._response_id = "gemini"
        self._finish: str | None = None
        self._failure: GatewayError | None = None
        self._thought_open = False
        self._calls = 0  # function calls the caller must answer
        self._open_call: _OpenCall | None = None
        self._signatures = 0
        self._code_calls = 0
        self._last_code_id: str | None = None
        self._grounding: dict[str, Any] | None = None

    def feed(self, event: SSEEvent, out: list[Patch]) -> None:
        if self._failure is not None:
            return
        try:
            self._chunk(safejson.loads(event.data), out)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:  # not JSON, or not the shape
            self._fail(f"malformed chunk ({exc}): {event.data[:200]!r}")

    def finish(self, out: list[Patch]) -> None:
        if self._failure is not None:
            raise self._failure
        if self._finish is None:
            raise UpstreamError(f"{self._provider}: the stream ended before a finishReason",
                                code="upstream_incomplete", retryable=True, provider=self._provider)
        self._end_thought(out)
        if self._open_call is not None:  # a streamed call the last chunk did not close
            out.append(ToolEnd(key=self._open_call.key, arguments=self._open_call.args))
            self._open_call = None
        if self._grounding is not None:
            self._grounding_call(self._grounding, out)
        stop = _FINISH_REASON_MAP.get(self._finish, "stop")
        if stop == "stop" and self._calls:
            stop = "tool_calls"
        out.append(MessageDelta(stop_reason=stop))
        out.append(MessageEnd())

    def _chunk(self, chunk: dict[str, Any], out: list[Patch]) -> None:
        if "error" in chunk:
            self._failure = gemini_error(chunk["error"], self._provider)
            return
        if not self._started:
            self._started = True
            self._response_id = chunk.get("responseId") or self._response_id
            out.append(MessageStart(id=chunk.get("responseId"), model=chunk.get("modelVersion")))
        block = (chunk.get("promptFeedback") or {}).get("blockReason")
        if block:
            self._failure = UpstreamBlocked(f"{self._provider}: the provider blocked the prompt ({block})",
                                            provider=self._provider, block_reason=block)
            return
        for candidate in chunk.get("candidates") or ():
            if candidate.get("index", 0) == 0:
                self._candidate(candidate, out)
        usage = chunk.get("usageMetadata")
        if usage and (patch := gemini_usage(usage, self._provider)) is not None:
            out.append(MessageDelta(usage=patch))

    def _candidate(self, candidate: dict[str, Any], out: list[Patch]) -> None:
        for part in (candidate.get("content") or {}).get("parts") or ():
            self._part(part, out)
        if candidate.get("groundingMetadata"):
            self._grounding = candidate["groundingMetadata"]
        finish = candidate.get("finishReason")
        if finish:
            self._finish = finish
            if finish in _FAILED_TOOL_CALL_REASONS:
                self._failure = UpstreamError(
                    f"{self._provider}: the model produced an unusable tool call ({finish}): "
                    f"{candidate.get('finishMessage') or 'no details'}",
                    code="upstream_tool_call_failed", provider=self._provider, upstream_code=finish)

    def _part(self, part: dict[str, Any], out: list[Patch]) -> None:
        if "text" in part:
            text = part["text"]
            if part.get("thought"):
                if text:
                    self._thought_open = True
                    out.append(ReasoningDelta(key=THOUGHT_KEY, text=text))
            else:
                self._end_thought(out)
                if text:
                    out.append(TextDelta(key=TEXT_KEY, text=text))
        elif "functionCall" in part:
            self._end_thought(out)
            self._function_call(part["functionCall"], out)
        elif "executableCode" in part:
            self._end_thought(out)
            self._code(part["executableCode"], out)
        elif "codeExecutionResult" in part:
            self._code_result(part["codeExecutionResult"], out)
        signature = part.get("thoughtSignature")
        if signature:  # decision 3
            key = f"signature:{self._signatures}"
            self._signatures += 1
            out.append(ReasoningDelta(key=key, signature=signature))
            out.append(ReasoningEnd(key=key))

    def _function_call(self, call: dict[str, Any], out: list[Patch]) -> None:
        current = self._open_call
        if current is None:
            name = call.get("name")
            if not name:
                raise ValueError("a functionCall starts without a name")
            current = _OpenCall(key=f"call:{self._calls}")
            call_id = call.get("id") or f"call_{self._response_id}_{self._calls}"  # decision 1
            self._calls += 1
            out.append(ToolStart(key=current.key, id=call_id, name=name))
        args = call.get("args")
        if args:
            current.args.update(args)
        for piece in call.get("partialArgs") or ():
            string = "stringValue" in piece
            value = piece["stringValue"] if string else next(
                (piece[k] for k in ("numberValue", "boolValue") if k in piece), None)
            _set_path(current.args, piece["jsonPath"], value, append=string)
        if call.get("willContinue"):
            self._open_call = current
        else:
            self._open_call = None
            out.append(ToolEnd(key=current.key, arguments=current.args))

    def _code(self, code: dict[str, Any], out: list[Patch]) -> None:
        key = f"code:{self._code_calls}"
        call_id = code.get("id") or f"code_{self._response_id}_{self._code_calls}"
        self._code_calls += 1
        self._last_code_id = call_id
        out.append(ToolStart(key=key, id=call_id, name="code_execution", server=True))
        out.append(ToolEnd(key=key, arguments={"language": code.get("language"), "code": code.get("code", "")}))

    def _code_result(self, result: dict[str, Any], out: list[Patch]) -> None:
        call_id = result.get("id") or self._last_code_id or f"code_{self._response_id}_{self._code_calls}"
        key = f"result:{call_id}"
        out.append(ToolResultStart(key=key, tool_call_id=call_id, name="code_execution"))
        out.append(ToolResultDelta(key=key, content=result.get("output") or ""))
        out.append(ToolResultEnd(key=key, is_error=result.get("outcome") != "OUTCOME_OK"))

    def _grounding_call(self, grounding: dict[str, Any], out: list[Patch]) -> None:
        call_id = f"search_{self._response_id}"
        queries = grounding.get("webSearchQueries") or []
        sources = [chunk["web"] for chunk in grounding.get("groundingChunks") or () if "web" in chunk]
        out.append(ToolStart(key="grounding", id=call_id, name="google_search", server=True))
        out.append(ToolEnd(key="grounding", arguments={"queries": queries}))
        out.append(ToolResultStart(key="grounding:result", tool_call_id=call_id, name="google_search"))
        out.append(ToolResultDelta(key="grounding:result", content=orjson.dumps({"sources": sources}).decode()))
        out.append(ToolResultEnd(key="grounding:result"))

    def _end_thought(self, out: list[Patch]) -> None:
        if self._thought_open:
            self._thought_open = False
            out.append(ReasoningEnd(key=THOUGHT_KEY))

    def _fail(self, reason: str) -> None:
        self._failure = UpstreamError(f"{self._provider}: {reason}", code="upstream_protocol_error",
                                      provider=self._provider)


def normalizer(provider: str) -> GeminiNormalizer:
    """A fresh normalizer for one response of `provider` (its descriptor's `normalizer`)."""
    return GeminiNormalizer(provider=provider)
