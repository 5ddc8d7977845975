"""One accumulator for every provider: normalized patches in, canonical events out.

It assigns the public indexes, keeps interleaved blocks apart by their provider key, parses
tool calls' arguments, and keeps the usage and the stop reason. The message and the turns are
not its business: they are built from the events the gate released (app/core/released.py).
See reference/normalized-stream-accumulator.md for the contract it grew from; unlike that
reference, patches carry the provider's block key, so interleaved blocks need no buffering.

A tool call's fragments are released one behind: a fragment goes out when the next one arrives,
and the last goes out with `is_final: true` and the parsed arguments when the call ends. So every
call gives at least one `tool_call` event and exactly one final one, with no empty trailer: that
final event is what a tool call is past this point (the gate, the transcript, the released
message read it). Calls come out one after another, in the order the upstream started them: the
fragments of a call that starts while an earlier one is still open wait until that one ended
(OpenAI ends every call only with the response), so a call's fragments are contiguous and a client
that concatenates them per index in arrival order gets each call's exact arguments.
A tool result in the stream that answers a completed call of the response the model does not run
itself (not a server tool) says so (`ToolResultEvent.closes_turn`): the turn rule, decided here once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import orjson

from app.core import safejson, secrets
from app.core.content_filter import ContentFilterData, merge_content_filter
from app.core.errors import UpstreamError
from app.core.events import (
    ReasoningBlockEnd,
    ReasoningEvent,
    RelayedFrame,
    StopReason,
    StreamEvent,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
    token_event,
)
from app.core.messages import ReasoningBlock, freeze
from app.core.patches import (
    BlockKey,
    Ignored,
    MessageDelta,
    MessageEnd,
    MessageStart,
    Patch,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Relay,
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
)
from app.core.secrets import HeldText

__all__ = ["Accumulator", "StreamProtocolError"]


class StreamProtocolError(UpstreamError):
    """The provider's stream broke the patch contract (a delta for an unknown block, ...)."""

    code = "upstream_protocol_error"


@dataclass(slots=True, kw_only=True)
class _ToolState:
    """A tool block being assembled; it ends as one final `ToolCallEvent`."""

    id: str
    name: str
    index: int
    server: bool
    fragments: list[str] = field(default_factory=list)
    held: str | None = None  # the fragment not yet released (released one behind)
    done: bool = False
    waiting: list[ToolCallEvent] = field(default_factory=list)  # its events while an earlier call is open


@dataclass(slots=True, kw_only=True)
class _ReasoningState:
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted: str | None = None


@dataclass(slots=True, kw_only=True)
class _ResultState:
    tool_call_id: str
    name: str
    parts: list[str] = field(default_factory=list)


_USAGE_FIELDS = tuple(f.name for f in fields(UsagePatch))


class Accumulator:
    """Turns one provider response's patches into canonical events, usage and a stop reason."""

    def __init__(self, *, model: str, provider: str, block_ends: bool = False) -> None:
        self.model = model
        self.block_ends = block_ends
        """Emit a `ReasoningBlockEnd` marker (internal, never SSE) when a reasoning block ends."""
        self.provider = provider
        self.response_id: str | None = None
        self.stop_reason: StopReason | None = None
        self.completed = False
        self.content_filter: ContentFilterData | None = None  # the provider's filter annotations
        self._usage = UsagePatch()
        self.start_usage: Usage | None = None
        """The usage the provider reported as the response began (Anthropic's input tokens), if it did."""
        self._token_index = 0
        self._reasoning_index = 0
        self._tool_index = 0
        self._open_text: set[BlockKey] = set()
        self._held: dict[BlockKey, HeldText] | None = {} if secrets.guarding() else None
        """Per text block, the text kept back while it could be the start of a configured secret."""
        self._relay_held: list[bytes] = []  # relayed provider events kept back behind held text
        self._reasoning: dict[BlockKey, _ReasoningState] = {}
        self._tools: dict[BlockKey, _ToolState] = {}
        # calls not wholly out yet, in start order; the first is out now. A list: an answer has a few
        # calls at most, and most none (an empty deque takes a 64-slot block, ~670 bytes per run)
        self._calls: list[_ToolState] = []
        self._answerable: set[str] = set()  # completed calls of this response the model does not run
        self._results: dict[BlockKey, _ResultState] = {}
        self.ignored: Counter[str] = Counter()
        """What the normalizer dropped as harmless (Ignored patches), by label."""

    # -- the contract ---------------------------------------------------------------------

    def push(self, patch: Patch, out: list[StreamEvent]) -> None:
        """Apply one patch; append the canonical events it releases to `out`."""
        self._HANDLERS[patch.kind](self, patch, out)

    def push_all(self, patches: list[Patch], out: list[StreamEvent] | None = None) -> list[StreamEvent]:
        """Apply a batch; the events it releases (appended to `out` when given: if a patch
        raises, `out` keeps the events of the patches before it)."""
        if out is None:
            out = []
        handlers = self._HANDLERS
        for patch in patches:
            handlers[patch.kind](self, patch, out)
        return out

    def continue_from(self, previous: Accumulator) -> None:
        """Continue the public indexes of an earlier response of the same stream (the next step
        of a run with gateway-executed tools): one stream, one sequence of token/tool indexes."""
        self._token_index = previous._token_index
        self._reasoning_index = previous._reasoning_index
        self._tool_index = previous._tool_index

    @property
    def output_reported(self) -> bool:
        """The provider reported its output count (even on a response that then failed)."""
        return self._usage.output_tokens is not None

    @property
    def usage(self) -> Usage:
        u = self._usage
        usage = Usage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0,
                      cache_read_tokens=u.cache_read_tokens or 0, cache_write_tokens=u.cache_write_tokens or 0,
                      reasoning_tokens=u.reasoning_tokens or 0, cache_write_1h_tokens=u.cache_write_1h_tokens or 0)
        usage.total_tokens = (
            u.total_tokens if u.total_tokens is not None else usage.input_tokens + usage.output_tokens
        )
        return usage

    # -- handlers -------------------------------------------------------------------------

    def _message_start(self, p: MessageStart, out: list[StreamEvent]) -> None:
        if p.id:
            self.response_id = p.id
        if p.model:
            self.model = p.model
        if p.usage is not None:
            self._merge_usage(p.usage)
            self.start_usage = self.usage

    def _text_start(self, p: TextStart, out: list[StreamEvent]) -> None:
        self._open_text.add(p.key)

    def _text_delta(self, p: TextDelta, out: list[StreamEvent]) -> None:
        if p.key in self._tools or p.key in self._reasoning:
            raise StreamProtocolError(f"text delta for non-text block {p.key!r}")
        self._open_text.add(p.key)
        text = p.text
        if self._held is not None and text:  # the gateway's own credentials never reach a client
            held = self._held.get(p.key)
            if held is None:
                held = self._held[p.key] = HeldText()
            text = held.feed(text)
        if text:
            out.append(token_event(self._token_index, text, p.refusal))
            self._token_index += 1

    def _text_end(self, p: TextEnd, out: list[StreamEvent]) -> None:
        self._open_text.discard(p.key)
        self._release_held(out)

    def _release_held(self, out: list[StreamEvent]) -> None:
        """Text kept back (HeldText) goes out before anything that follows it in the answer."""
        if self._held:
            for held in self._held.values():
                if text := held.flush():
                    out.append(token_event(self._token_index, text))
                    self._token_index += 1

    def _reasoning_start(self, p: ReasoningStart, out: list[StreamEvent]) -> None:
        self._release_held(out)
        self._reasoning[p.key] = _ReasoningState(redacted=p.redacted)

    def _reasoning_delta(self, p: ReasoningDelta, out: list[StreamEvent]) -> None:
        state = self._reasoning.get(p.key)
        if state is None:
            if p.key in self._tools or p.key in self._open_text:
                raise StreamProtocolError(f"reasoning delta for non-reasoning block {p.key!r}")
            state = self._reasoning[p.key] = _ReasoningState()
        if p.signature:
            state.signature = (state.signature or "") + p.signature
        if p.text:
            state.parts.append(p.text)
            out.append(ReasoningEvent(index=self._reasoning_index, content=p.text))
            self._reasoning_index += 1

    def _reasoning_end(self, p: ReasoningEnd, out: list[StreamEvent]) -> None:
        state = self._reasoning.pop(p.key, None)
        if state is None:
            return
        if p.signature:
            state.signature = p.signature
        if self.block_ends:
            out.append(ReasoningBlockEnd(block=self._reasoning_block(state)))

    def _reasoning_block(self, state: _ReasoningState) -> ReasoningBlock:
        return ReasoningBlock(
            text="".join(state.parts), signature=state.signature, redacted=state.redacted,
            provider=self.provider,
        )

    def _tool_start(self, p: ToolStart, out: list[StreamEvent]) -> None:
        self._release_held(out)
        if p.key in self._tools and not self._tools[p.key].done:
            raise StreamProtocolError(f"tool block {p.key!r} started twice")
        self._tools[p.key] = record = _ToolState(id=p.id, name=p.name, index=self._tool_index, server=p.server)
        self._calls.append(record)
        self._tool_index += 1

    def _send(self, record: _ToolState, event: ToolCallEvent, out: list[StreamEvent]) -> None:
        """Out now when no earlier call is still open, else after it (calls never interleave)."""
        calls = self._calls
        if calls[0] is not record:
            record.waiting.append(event)
            return
        out.append(event)
        if not event.is_final:
            return
        del calls[0]
        while calls:  # the next calls' waiting events follow, each call whole while it is done
            following = calls[0]
            out.extend(following.waiting)
            following.waiting.clear()
            if not following.done:
                break
            del calls[0]

    def _open_tool(self, key: BlockKey) -> _ToolState:
        record = self._tools.get(key)
        if record is None or record.done:
            raise StreamProtocolError(f"tool delta for unknown or ended tool block {key!r}")
        return record

    def _tool_delta(self, p: ToolDelta, out: list[StreamEvent]) -> None:
        record = self._open_tool(p.key)
        if not p.fragment:
            return
        record.fragments.append(p.fragment)
        if record.held is not None:
            self._send(record, ToolCallEvent(id=record.id, name=record.name, index=record.index,
                                             args_fragment=record.held, server=record.server), out)
        record.held = p.fragment

    def _tool_end(self, p: ToolEnd, out: list[StreamEvent]) -> None:
        record = self._open_tool(p.key)
        self._finish_tool(record, p.arguments, out)

    def _finish_tool(self, record: _ToolState, given: dict[str, Any] | None, out: list[StreamEvent]) -> None:
        if given is not None:
            arguments = given
            if not record.fragments:
                record.held = orjson.dumps(given).decode()
                record.fragments.append(record.held)
        else:
            raw = "".join(record.fragments)
            try:
                arguments = safejson.loads(raw) if raw.strip() else {}
            except orjson.JSONDecodeError as exc:
                raise UpstreamError(
                    f"tool call {record.id} ({record.name}) arguments are not valid JSON: {exc}",
                    code="invalid_tool_arguments",
                ) from None
            if not isinstance(arguments, dict):
                raise UpstreamError(
                    f"tool call {record.id} ({record.name}) arguments are not a JSON object",
                    code="invalid_tool_arguments",
                )
        record.done = True
        if not record.server:
            self._answerable.add(record.id)
        final = ToolCallEvent(id=record.id, name=record.name, index=record.index, args_fragment=record.held or "",
                              is_final=True, arguments=freeze(arguments), server=record.server)
        record.held = None
        self._send(record, final, out)

    def _result_start(self, p: ToolResultStart, out: list[StreamEvent]) -> None:
        self._release_held(out)
        self._results[p.key] = _ResultState(tool_call_id=p.tool_call_id, name=p.name)

    def _result_delta(self, p: ToolResultDelta, out: list[StreamEvent]) -> None:
        state = self._results.get(p.key)
        if state is None:
            raise StreamProtocolError(f"tool result delta for unknown block {p.key!r}")
        state.parts.append(p.content)

    def _result_end(self, p: ToolResultEnd, out: list[StreamEvent]) -> None:
        state = self._results.pop(p.key, None)
        if state is None:
            raise StreamProtocolError(f"tool result end for unknown block {p.key!r}")
        out.append(
            ToolResultEvent(tool_call_id=state.tool_call_id, name=state.name, content="".join(state.parts),
                            is_error=p.is_error, closes_turn=state.tool_call_id in self._answerable)
        )

    def _message_delta(self, p: MessageDelta, out: list[StreamEvent]) -> None:
        if p.stop_reason is not None:
            self.stop_reason = p.stop_reason
        if p.usage is not None:
            self._merge_usage(p.usage)
        if p.content_filter is not None:
            self.content_filter = merge_content_filter(self.content_filter, p.content_filter)

    def _message_end(self, p: MessageEnd, out: list[StreamEvent]) -> None:
        self._release_held(out)
        for record in list(self._tools.values()):
            if not record.done:
                self._finish_tool(record, None, out)
        if self.block_ends:  # blocks the provider never closed end with the response
            out.extend(ReasoningBlockEnd(block=self._reasoning_block(state)) for state in self._reasoning.values())
        self.completed = True

    def _relay(self, p: Relay, out: list[StreamEvent]) -> None:
        """A provider event relayed as sent waits with its held text (it could begin a secret); one
        carrying the gateway's own credentials ends the run (relayed bytes cannot be scrubbed)."""
        if self._held:
            if any(held.scrubbed for held in self._held.values()):
                raise StreamProtocolError("the provider's answer carried the gateway's own credentials")
            if any(held.holding for held in self._held.values()):
                self._relay_held.append(p.frame)
                return
        if self._relay_held:
            out.extend(RelayedFrame(frame=frame) for frame in self._relay_held)
            self._relay_held.clear()
        out.append(RelayedFrame(frame=p.frame))

    def _ignored(self, p: Ignored, out: list[StreamEvent]) -> None:
        self.ignored[p.what] += 1

    def _merge_usage(self, patch: UsagePatch) -> None:
        patch.check(self.provider)  # the normalizers check what they read; this holds for every patch source
        usage = self._usage
        for name in _USAGE_FIELDS:
            value = getattr(patch, name)
            if value is not None:
                setattr(usage, name, value)

    # Each patch kind's handler, once per class (not bound per instance: one Accumulator per response).
    _HANDLERS: ClassVar[dict[str, Callable[[Accumulator, Any, list[StreamEvent]], None]]] = {
        "message_start": _message_start, "text_start": _text_start, "text_delta": _text_delta, "text_end": _text_end,
        "reasoning_start": _reasoning_start, "reasoning_delta": _reasoning_delta, "reasoning_end": _reasoning_end,
        "tool_start": _tool_start, "tool_delta": _tool_delta, "tool_end": _tool_end,
        "tool_result_start": _result_start, "tool_result_delta": _result_delta, "tool_result_end": _result_end,
        "message_delta": _message_delta, "message_end": _message_end, "ignored": _ignored, "relay": _relay,
    }
