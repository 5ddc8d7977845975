"""The normalizer for OpenAI Responses API streams (`event: <type>` + `data: <json>`).

Wire facts it relies on (read off shared/fixtures/openai-responses, see its README):
- Every output item (message, function_call, reasoning, built-in tool call) has its own
  `output_index`; deltas name it, so the block key is the `output_index`.
- A function call has an item `id` (`fc_...`) and a `call_id` (`call_...`): the `call_id` is
  the tool call's id, the one a `function_call_output` answers.
- Reasoning items may have no summary (only `encrypted_content`); one item may stream several
  summary parts (`summary_index`).
- No `[DONE]`: `response.completed` / `response.incomplete` end the stream, usage rides on them.
  An error is an `error` event followed by `response.failed`.

Decisions:
1. Summary parts of one reasoning item are one reasoning block; a new part starts with
   SUMMARY_PART_SEPARATOR (a blank line: each part is a titled paragraph), put in front of the
   part's first delta so no extra event is needed. Reasoning items without a summary give nothing.
2. Built-in tools (web_search_call, file_search_call, code_interpreter_call) are server tool calls
   (`server: true`) followed by their tool result (JSON: status and what the item reports).
   Code interpreter code streams live as the arguments `{"code": "..."}`: the deltas are escaped
   into one JSON string, so the fragments always join to the final arguments.
3. Stop reason: `tool_calls` when the response has function calls, `content_filter` after a
   refusal (surfaced as text, as in openai_chat_stream), `length`/`content_filter` from
   `incomplete_details.reason` on `response.incomplete`, else `stop`.
4. `error` / `response.failed` are recorded and raised from `finish()` (see openai_chat_stream,
   decision 3): the same bytes give the same events however the reads split.
5. A `custom_tool_call` (free-form input, as Codex's code-mode `exec`) is a tool call like a
   function call; its arguments are `{"input": "<the text>"}`, the `custom_tool_call_input.delta`s
   escaped into that JSON string as they arrive (as decision 2's code).
6. A reasoning item's `encrypted_content` becomes its block's signature, spelled
   `reasoning_signature(item id, encrypted_content)` (the API wants the id back with it), so a later
   turn to the same provider sends the item back (`reasoning_input_item`); an item with only
   encrypted content is a block with no text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.core import safejson
from app.core.errors import UpstreamError
from app.core.events import StopReason
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    MessageStart,
    Patch,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    TextEnd,
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
from app.providers.openai_chat_stream import stream_error
from app.providers.sse import SSEEvent

__all__ = ["SERVER_TOOL_NAMES", "SUMMARY_PART_SEPARATOR", "ResponsesNormalizer", "normalizer", "reasoning_input_item",
           "reasoning_signature", "responses_usage"]

SUMMARY_PART_SEPARATOR = "\n\n"

_INCOMPLETE_REASON_MAP: dict[str, StopReason] = {
    "max_output_tokens": "length",
    "max_messages": "length",
    "content_filter": "content_filter",
    "steered": "pause",  # stopped at a safe boundary for a WebSocket steer; a successor follows
}
# Any other incomplete reason is a cut answer: "length".

SERVER_TOOL_NAMES = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
}
"""Built-in tool items the provider runs itself: output item type -> public tool name."""

_CODE_PREFIX = '{"code":"'
_INPUT_PREFIX = '{"input":"'
_CODE_SUFFIX = '"}'
_CALLS = ("function_call", "custom_tool_call")
"""The caller's tool calls (decision 5); the others are the provider's own."""


def reasoning_signature(item_id: str, encrypted_content: str) -> str:
    """A reasoning item's opaque content as its block's signature (decision 6)."""
    return orjson.dumps({"id": item_id, "encrypted_content": encrypted_content}).decode()


def reasoning_input_item(text: str, signature: str) -> dict[str, Any] | None:
    """A signed block of this provider as a `reasoning` input item (None: not one this module spelled)."""
    try:
        data = orjson.loads(signature)
        item_id, opaque = data["id"], data["encrypted_content"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"type": "reasoning", "id": item_id, "summary": summary, "encrypted_content": opaque}


def responses_usage(usage: Any, provider: str) -> UsagePatch | None:
    """Responses `usage` -> canonical usage (cached input tokens are cache reads); every count
    checked (`token_count`)."""
    if not usage:
        return None
    usage = usage_object(usage, "usage", provider=provider)
    inputs = usage_object(usage.get("input_tokens_details"), "input_tokens_details", provider=provider)
    outputs = usage_object(usage.get("output_tokens_details"), "output_tokens_details", provider=provider)

    def count(raw: Mapping[str, Any], name: str) -> int | None:
        return token_count(raw.get(name), name, provider=provider)

    return UsagePatch(
        input_tokens=count(usage, "input_tokens"), output_tokens=count(usage, "output_tokens"),
        total_tokens=count(usage, "total_tokens"), cache_read_tokens=count(inputs, "cached_tokens"),
        cache_write_tokens=count(inputs, "cache_write_tokens"), reasoning_tokens=count(outputs, "reasoning_tokens"),
    )


def _server_call(item: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A built-in tool item -> (call arguments, result payload)."""
    kind = item.get("type")
    result: dict[str, Any] = {"status": item.get("status")}
    if kind == "web_search_call":
        action = dict(item.get("action") or {})
        if "sources" in action:
            result["sources"] = action.pop("sources")
        return action, result
    if kind == "file_search_call":
        result["results"] = item.get("results")
        return {"queries": item.get("queries") or []}, result
    result["outputs"] = item.get("outputs")
    return {"code": item.get("code") or ""}, result


class ResponsesNormalizer:
    """Responses API typed events -> normalized patches; block key = `output_index`."""

    __slots__ = ("_provider", "_started", "_terminal", "_failure", "_seen_tools", "_open_tools",
                 "_streamed_args", "_summary_index", "_function_calls", "_refused")

    def __init__(self, *, provider: str = "openai-responses") -> None:
        self._provider = provider
        self._started = False
        self._terminal = False  # response.completed / response.incomplete seen
        self._failure: UpstreamError | None = None
        self._seen_tools: set[int] = set()
        self._open_tools: set[int] = set()
        self._streamed_args: set[int] = set()
        self._summary_index: dict[int, int] = {}
        self._function_calls = 0
        self._refused = False

    def feed(self, event: SSEEvent, out: list[Patch]) -> None:
        if self._terminal or self._failure is not None:
            return
        try:
            data = safejson.loads(event.data)
            self._event(data.get("type") or event.event, data, out)
        except (AttributeError, TypeError, ValueError) as exc:  # not JSON, or a field of the wrong type
            self._fail(f"malformed {event.event!r} event ({exc}): {event.data[:200]!r}")

    def finish(self, out: list[Patch]) -> None:
        if self._failure is not None:
            raise self._failure
        if not self._terminal:
            raise UpstreamError(f"{self._provider}: the stream ended before response.completed",
                                code="upstream_incomplete", retryable=True, provider=self._provider)

    def _event(self, kind: str, data: dict[str, Any], out: list[Patch]) -> None:
        index = data.get("output_index", 0)
        if kind == "response.output_text.delta":
            out.append(TextDelta(key=index, text=data.get("delta", "")))
        elif kind == "response.function_call_arguments.delta":
            if index in self._open_tools:
                self._streamed_args.add(index)
                out.append(ToolDelta(key=index, fragment=data.get("delta", "")))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._reasoning_delta(index, data, out)
        elif kind == "response.code_interpreter_call_code.delta":
            self._string_delta(index, _CODE_PREFIX, data, out)  # decision 2
        elif kind == "response.custom_tool_call_input.delta":
            self._string_delta(index, _INPUT_PREFIX, data, out)  # decision 5
        elif kind == "response.refusal.delta":
            self._refused = True
            out.append(TextDelta(key=index, text=data.get("delta", ""), refusal=True))
        else:
            self._lifecycle(kind, index, data, out)

    def _lifecycle(self, kind: str, index: int, data: dict[str, Any], out: list[Patch]) -> None:
        """The events around the deltas: items opening and closing, the response's start and end."""
        if kind == "response.output_item.added":
            self._item_added(index, data.get("item") or {}, out)
        elif kind == "response.output_item.done":
            self._item_done(index, data.get("item") or {}, out)
        elif kind == "response.function_call_arguments.done":
            self._end_function_call(index, data.get("arguments"), out)
        elif kind == "response.created":
            response = data.get("response") or {}
            self._started = True
            out.append(MessageStart(id=response.get("id"), model=response.get("model")))
        elif kind in ("response.completed", "response.incomplete"):
            self._finish_response(data.get("response") or {}, out)
        elif kind == "response.failed":
            response = data.get("response") or {}
            if response.get("usage"):  # what the provider counted before it failed is billed
                out.append(MessageDelta(usage=responses_usage(response.get("usage"), self._provider)))
            self._failure = stream_error(response.get("error") or {"message": "response failed"}, self._provider)
        elif kind == "error":
            self._failure = stream_error(data, self._provider)
        # Other events (in_progress, content_part.*, *.done echoes, tool progress) add nothing.

    def _string_delta(self, index: int, prefix: str, data: dict[str, Any], out: list[Patch]) -> None:
        """A fragment of a tool's one string argument, JSON-escaped (decisions 2 and 5)."""
        if index in self._open_tools:
            head = "" if index in self._streamed_args else prefix
            self._streamed_args.add(index)
            out.append(ToolDelta(key=index, fragment=head + orjson.dumps(data.get("delta", "")).decode()[1:-1]))

    def _reasoning_delta(self, index: int, data: dict[str, Any], out: list[Patch]) -> None:
        text = data.get("delta", "")
        part = data.get("summary_index", data.get("content_index", 0))
        previous = self._summary_index.get(index)
        if previous is not None and previous != part:  # decision 1
            text = SUMMARY_PART_SEPARATOR + text
        self._summary_index[index] = part
        out.append(ReasoningDelta(key=index, text=text))

    def _item_added(self, index: int, item: Mapping[str, Any], out: list[Patch]) -> None:
        kind = item.get("type")
        if kind not in _CALLS and kind not in SERVER_TOOL_NAMES or index in self._seen_tools:
            return
        self._seen_tools.add(index)
        self._open_tools.add(index)
        if kind in _CALLS:
            self._function_calls += 1
            out.append(ToolStart(key=index, id=item.get("call_id") or item.get("id") or f"call_{index}",
                                 name=item.get("name") or ""))
        else:
            out.append(ToolStart(key=index, id=item.get("id") or f"{kind}_{index}",
                                 name=SERVER_TOOL_NAMES[kind], server=True))

    def _end_function_call(self, index: int, arguments: str | None, out: list[Patch]) -> None:
        if index not in self._open_tools:
            return
        self._open_tools.discard(index)
        if index not in self._streamed_args and arguments:
            out.append(ToolDelta(key=index, fragment=arguments))
        out.append(ToolEnd(key=index))

    def _item_done(self, index: int, item: Mapping[str, Any], out: list[Patch]) -> None:
        kind = item.get("type")
        if kind == "message":
            out.append(TextEnd(key=index))
        elif kind == "reasoning":
            self._end_reasoning(index, item, out)
        elif kind == "function_call":
            self._item_added(index, item, out)  # a no-op unless the added event was missing
            self._end_function_call(index, item.get("arguments"), out)
        elif kind == "custom_tool_call":
            self._item_added(index, item, out)
            self._end_custom_call(index, item.get("input"), out)
        elif kind in SERVER_TOOL_NAMES:
            self._item_added(index, item, out)
            if index in self._open_tools:
                self._end_server_call(index, kind, item, out)

    def _end_reasoning(self, index: int, item: Mapping[str, Any], out: list[Patch]) -> None:
        opaque, item_id = item.get("encrypted_content"), item.get("id")
        signature = reasoning_signature(item_id, opaque) if opaque and isinstance(item_id, str) else None
        if index in self._summary_index:
            out.append(ReasoningEnd(key=index, signature=signature))
        elif signature is not None:  # decision 6: no summary, the opaque reasoning alone
            out += [ReasoningDelta(key=index, signature=signature), ReasoningEnd(key=index)]

    def _end_custom_call(self, index: int, text: Any, out: list[Patch]) -> None:
        if index not in self._open_tools:
            return
        self._open_tools.discard(index)
        if index in self._streamed_args:  # the input streamed as a JSON string: close it
            out.append(ToolDelta(key=index, fragment=_CODE_SUFFIX))
        else:
            out.append(ToolDelta(key=index, fragment=orjson.dumps({"input": text or ""}).decode()))
        out.append(ToolEnd(key=index))

    def _end_server_call(self, index: int, kind: str, item: Mapping[str, Any], out: list[Patch]) -> None:
        self._open_tools.discard(index)
        arguments, result = _server_call(item)
        if index in self._streamed_args:  # the code streamed as a JSON string: close it
            out.append(ToolDelta(key=index, fragment=_CODE_SUFFIX))
        else:
            out.append(ToolDelta(key=index, fragment=orjson.dumps(arguments).decode()))
        out.append(ToolEnd(key=index))
        key = f"result:{index}"
        out.append(ToolResultStart(key=key, tool_call_id=item.get("id") or f"{kind}_{index}",
                                   name=SERVER_TOOL_NAMES[kind]))
        out.append(ToolResultDelta(key=key, content=orjson.dumps(result).decode()))
        out.append(ToolResultEnd(key=key, is_error=item.get("status") == "failed"))

    def _finish_response(self, response: Mapping[str, Any], out: list[Patch]) -> None:
        stop: StopReason
        if response.get("status") == "incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason") or ""
            stop = _INCOMPLETE_REASON_MAP.get(reason, "length")
        elif self._refused:
            stop = "content_filter"
        else:
            stop = "tool_calls" if self._function_calls else "stop"
        if not self._started:
            self._started = True
            out.append(MessageStart(id=response.get("id"), model=response.get("model")))
        out.append(MessageDelta(stop_reason=stop, usage=responses_usage(response.get("usage"), self._provider)))
        out.append(MessageEnd())
        self._terminal = True

    def _fail(self, reason: str) -> None:
        self._failure = UpstreamError(f"{self._provider}: {reason}", code="upstream_protocol_error",
                                      provider=self._provider)


def normalizer(provider: str) -> ResponsesNormalizer:
    """A fresh normalizer for one response of `provider` (its descriptor's `normalizer`)."""
    return ResponsesNormalizer(provider=provider)
