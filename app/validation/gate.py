"""The validation gate: holds events until their chunk passed every validator (DESIGN.md section 5).

Token and reasoning events are two lanes of text, chunked and validated apart; an event is
released once the whole of its text was validated (a token straddling a boundary waits for the
next chunk), always whole and in arrival order. A tool call's fragments are held until its final
fragment (which carries the arguments the accumulator parsed) passed. An event of another kind
ends the pending fragment of a lane (its text block is over), so an answer never waits on a
reasoning chunk that cannot end. A tool result that closes the turn (`closes_turn`, the one turn
rule) starts a new turn in both lanes: the final checks judge the last turn.
The first `fail` raises `Blocked`; what is held is dropped and never comes out.

Memory: held text is bounded by the chunker's size cap, and `admit` does not return before the
event's chunks were checked, so a slow validator stalls the caller's upstream read. Validators
that only judge (`Validator.pipelined`, the `llm_judge`) are the exception, up to `max_pending`
chunks: their checks of a chunk run as a task while the next chunks are read (and checked by the
inline validators); text is still released in order once every check of its chunk passed, and
`admit` waits when `max_pending` checks are in flight.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson

from app.core.errors import GatewayError
from app.core.events import (
    JudgeUsageData,
    ReasoningBlockEnd,
    ReasoningEvent,
    RelayedFrame,
    StreamEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
    ValidationData,
)
from app.core.messages import ToolSpec, freeze, thaw
from app.validation.checks import Blocked, Member, Observer, Stats, run_checks
from app.validation.chunking import DEFAULT_CHUNKING, DEFAULT_MAX_CHARS, build_chunker
from app.validation.lanes import TextLane
from app.validation.specs import Registry, ValidatorSpec, check_specs, invalid_validator, parse_spec
from app.validation.validators.base import CheckContext, GateEnv, Judge, ToolCallCheck, Verdict

__all__ = ["ValidationGate", "build_gate"]


@dataclass(slots=True)
class _Held:
    event: StreamEvent
    lane: TextLane | None
    """Set for token and reasoning events (`event` is then one of them)."""
    start: int = 0
    end: int = 0


_PIPELINE_TAIL = 20_000
"""A pipelined check's context: the last this many characters before its chunk (`before` too)."""


@dataclass(slots=True)
class _InFlight:
    task: asyncio.Task[list[Verdict]]
    lane: TextLane
    end: int


class ValidationGate:
    """One request's gate; build it with `build_gate` (fresh validator instances every time)."""

    def __init__(self, *, text: TextLane, reasoning: TextLane, chunking: str, stats: dict[str, Stats],
                 observer: Observer | None = None, max_pending: int = 1,
                 judge_usage: Callable[[], dict[str, JudgeUsageData]] | None = None) -> None:
        self._text = text
        self._reasoning = reasoning
        self._chunking = chunking
        self._stats = stats
        self._observer = observer
        self._held: deque[_Held] = deque()
        self._passed: dict[str, dict[str, Any] | None] = {}
        """Calls whose final fragment passed, by id: the redacted arguments to release instead, or None."""
        self._tool_calls = 0
        self._blocked: Blocked | None = None
        self._max_pending = max_pending
        self._in_flight: deque[_InFlight] = deque()
        self._judge_usage = judge_usage

    # -- the contract ---------------------------------------------------------------------

    async def admit(self, event: StreamEvent) -> list[StreamEvent]:
        """Take the next event; return the events it releases (whole, in order; maybe none)."""
        return await self.admit_all([event])

    async def admit_all(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """Take a batch of events (one upstream read's); return the events it releases. They are
        released once, after the whole batch: a fail at any event of it raises `Blocked` with every
        event validated before it (`released`), so the text that passed comes out before the final
        however the reads were cut. A text delta, most of every batch, is taken inline (no
        coroutine of its own per event)."""
        if self._blocked is not None:
            raise self._blocked
        held, text, reasoning = self._held, self._text, self._reasoning
        try:
            for event in events:
                kind = event.__class__
                if kind is not TokenEvent and kind is not ReasoningEvent:
                    await self._take(event)
                    continue
                lane, other = (text, reasoning) if kind is TokenEvent else (reasoning, text)
                if other.pending:
                    await self._flush(other)
                content = event.content  # type: ignore[union-attr]
                start, end = lane.admit(content)
                held.append(_Held(event, lane, start, end))
                if not lane.members:
                    lane.pass_through()
                else:
                    for chunk in lane.chunker.feed(content):
                        await self._check_chunk(lane, chunk)
            self._reap()
            return self._release()
        except Blocked as blocked:
            self._block(blocked)
            raise

    async def _take(self, event: StreamEvent) -> None:
        """An event other than a text delta: a reasoning block's end or a relayed frame goes out after
        the text before it; any other ends the pending fragments of both lanes."""
        if event.__class__ in (RelayedFrame, ReasoningBlockEnd):  # out right after the text before it
            self._held.append(_Held(event, None))
            return
        await self._flush(self._text)
        await self._flush(self._reasoning)
        self._held.append(_Held(event, None))
        if isinstance(event, ToolCallEvent):
            if event.is_final:
                await self._check_call(event)
        elif isinstance(event, ToolResultEvent) and event.closes_turn:
            await self._settle(0)  # the turn's text is judged before the next turn's
            self._text.new_turn()
            self._reasoning.new_turn()

    @property
    def rewrites(self) -> bool:  # app/validation/validators/base.py
        return any(m.validator.rewrites for lane in (self._text, self._reasoning) for m in lane.members)

    async def close_text(self) -> list[StreamEvent]:
        """The response's text is over (its calls run next): check the trailing fragments and
        release what they held, as the admission of a tool result would."""
        if self._blocked is not None:
            raise self._blocked
        try:
            await self._flush(self._text)
            await self._flush(self._reasoning)
            await self._settle(0)
            return self._release()
        except Blocked as blocked:
            self._block(blocked)
            raise

    async def finish(self) -> list[StreamEvent]:
        """End of stream: check the trailing fragments, run every final check, release the rest."""
        if self._blocked is not None:
            raise self._blocked
        try:
            await self._flush(self._text)
            await self._flush(self._reasoning)
            await self._settle(0)
            for lane in (self._text, self._reasoning):
                if not lane.members or (lane is self._reasoning and not lane.fed):
                    continue
                text = lane.turn_text()  # the lambda below is awaited within this iteration
                ctx = lane.final_context(self._tool_calls)
                await run_checks(lane.members, "final", lambda v: v.check_final(text, ctx), self._observer)  # noqa: B023
            out = self._release()
            self._held.clear()  # fragments of calls that never completed: never validated, never sent
            return out
        except Blocked as blocked:
            self._block(blocked)
            raise

    def summary(self) -> ValidationData:
        """Verdict counts per validator, for `final.validation` and the request log."""
        out: ValidationData = {
            "chunking": self._chunking,
            "chunks": {"text": self._text.chunks, "reasoning": self._reasoning.chunks},
            "redactions": self._text.redactions + self._reasoning.redactions,
            "validators": {label: stats.to_dict() for label, stats in self._stats.items()},
        }
        if self._blocked is not None:
            out["blocked"] = {"validator": self._blocked.label, "reason": self._blocked.why}
        judged = self._judge_usage() if self._judge_usage is not None else None
        if judged:
            out["judge"] = judged
        return out

    def close(self) -> None:
        for item in self._in_flight:
            task = item.task
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: a fail after the first is not logged as lost
        self._in_flight.clear()

    # -- internals ------------------------------------------------------------------------

    def _block(self, blocked: Blocked) -> None:
        blocked.released = self._release()  # validated before the failing chunk: out before the final
        self._blocked = blocked
        self._held.clear()  # what is held is dropped: it never comes out
        self.close()

    def _reap(self) -> None:
        """Chunks at the head whose pipelined checks ended count as validated, in order; a fail
        raises Blocked when its chunk is at the head: the chunks before it are judged first,
        as if checked one at a time (the same verdicts, sooner)."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].task.done():
            item = in_flight.popleft()
            item.task.result()  # raises Blocked
            item.lane.validated = item.end

    async def _settle(self, room: int) -> None:
        """Wait until at most `room` pipelined checks are in flight (0: every one ended)."""
        self._reap()
        while len(self._in_flight) > room:
            await asyncio.wait([i.task for i in self._in_flight], return_when=asyncio.FIRST_COMPLETED)
            self._reap()

    async def _flush(self, lane: TextLane) -> None:
        if lane.pending:
            for chunk in lane.chunker.flush():
                await self._check_chunk(lane, chunk)

    async def _check_chunk(self, lane: TextLane, chunk: str) -> None:
        start = lane.chunked
        end = lane.chunked = start + len(chunk)
        ctx = lane.context(end, self._tool_calls)
        pipelined = [m for m in lane.members if m.validator.pipelined] if self._max_pending > 1 else []
        if not pipelined:
            verdicts = await run_checks(lane.members, "chunk", lambda v: v.check_chunk(chunk, ctx), self._observer)
            lane.accept(chunk, start, verdicts)
            return
        others = [m for m in lane.members if not m.validator.pipelined]
        verdicts = await run_checks(others, "chunk", lambda v: v.check_chunk(chunk, ctx), self._observer)
        frozen = CheckContext(lane=ctx.lane, index=ctx.index, tokens=ctx.tokens, tool_calls=ctx.tool_calls,
                              parts=[ctx.tail(_PIPELINE_TAIL)], chars=ctx.before_chars)
        lane.accept(chunk, start, verdicts, validated=False)
        task = asyncio.get_running_loop().create_task(
            run_checks(pipelined, "chunk", lambda v: v.check_chunk(chunk, frozen), self._observer))
        self._in_flight.append(_InFlight(task, lane, end))
        await self._settle(self._max_pending - 1)

    async def _check_call(self, event: ToolCallEvent) -> None:
        """The call is complete (its final fragment): judge it; its fragments may go out."""
        self._tool_calls += 1
        call = ToolCallCheck(id=event.id, name=event.name, arguments=thaw(event.arguments or {}), server=event.server)
        ctx = self._text.context(self._text.fed, self._tool_calls)
        verdicts = await run_checks(
            self._text.members, "tool_call", lambda v: v.check_tool_call(call, ctx), self._observer
        )
        self._passed[event.id] = next((v.arguments for v in verdicts if v.arguments is not None), None)

    def _release(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        held = self._held
        while held:
            item = held[0]
            lane = item.lane
            if lane is not None:
                if item.end > lane.validated:
                    break
                held.popleft()
                released = lane.emit(cast(TokenEvent | ReasoningEvent, item.event), item.start)
                if released is not None:
                    out.append(released)
                continue
            event = item.event
            if event.type == "tool_call":
                if event.id not in self._passed:  # its final fragment has not passed (yet)
                    break
                held.popleft()
                self._release_call(event, out)
                continue
            held.popleft()
            out.append(event)
        return out

    def _release_call(self, event: ToolCallEvent, out: list[StreamEvent]) -> None:
        redacted = self._passed[event.id]
        if redacted is None:
            out.append(event)
        elif event.is_final:  # redacted: the rewritten arguments go out whole, with the last fragment
            text = orjson.dumps(redacted).decode()
            out.append(replace(event, args_fragment=text, arguments=freeze(redacted)))
        if event.is_final:
            del self._passed[event.id]


def _members(specs: Sequence[ValidatorSpec], env: GateEnv, *, operator: bool, registry: Registry | None,
             names: Counter[str], stats: dict[str, Stats], lanes: dict[str, list[Member]]) -> None:
    for index, spec in enumerate(specs):
        try:
            cls, config = parse_spec(index, spec, registry)
        except GatewayError as exc:
            if not operator:
                raise
            raise GatewayError(f"operator validator policy: {exc.message}", code="invalid_validator_config") from None
        names[cls.name] += 1
        label = cls.name if names[cls.name] == 1 else f"{cls.name}#{names[cls.name]}"
        stats[label] = shared = Stats()
        for lane in cls.lanes:
            try:
                validator = cls(config, env)
            except ValueError as exc:
                raise invalid_validator(str(exc), f"validators.{index}") from None
            lanes[lane].append(
                Member(label=label, name=cls.name, validator=validator, timeout=config.timeout,
                       fail_on_error=config.on_error == "fail", stats=shared)
            )


def build_gate(
    *,
    request_specs: Sequence[ValidatorSpec],
    operator_specs: Sequence[ValidatorSpec],
    chunking: str | None,
    tools: Sequence[ToolSpec],
    judge: Judge | None,
    observer: Observer | None = None,
    max_chunk_chars: int = DEFAULT_MAX_CHARS,
    registry: Registry | None = None,
    max_pending: int = 1,
    judge_usage: Callable[[], dict[str, JudgeUsageData]] | None = None,
) -> ValidationGate | None:
    """A gate with fresh validator instances: the operator's (always) then the request's.

    None when no validator applies: the pipeline then skips the gate (no added latency).
    `max_pending`: chunks whose pipelined checks (the judge's) may be in flight at once;
    `judge_usage`: the run judge's usage lines, for the summary.
    """
    if not request_specs and not operator_specs:
        return None
    check_specs([], chunking)
    chunking = chunking or DEFAULT_CHUNKING
    env = GateEnv(tools={t.name: t for t in tools}, judge=judge)
    names: Counter[str] = Counter()
    stats: dict[str, Stats] = {}
    lanes: dict[str, list[Member]] = {"text": [], "reasoning": []}
    _members(operator_specs, env, operator=True, registry=registry, names=names, stats=stats, lanes=lanes)
    _members(request_specs, env, operator=False, registry=registry, names=names, stats=stats, lanes=lanes)
    return ValidationGate(
        text=TextLane("text", build_chunker(chunking, max_chunk_chars), lanes["text"]),
        reasoning=TextLane("reasoning", build_chunker(chunking, max_chunk_chars), lanes["reasoning"]),
        chunking=chunking, stats=stats, observer=observer, max_pending=max_pending, judge_usage=judge_usage,
    )
