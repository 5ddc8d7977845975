"""One run of the pipeline: its steps, its events, its honest end, its report.

A run is the body of one asyncio task that the gateway owns (app/pipeline.py). It writes its
events to its stream log and nothing else: every response (the SSE stream, a JSON answer, a
subscription, a facade) is a reader of that log. `Run.execute()` is three parts:
- the step pump (`_pump`): one provider response, upstream -> accumulator -> gate -> stream log;
- the tool loop (`_run_tools`, `_continues`, `_next_step`): between steps, the gateway's tools
  run and their results go out, then the provider is called again, up to `max_steps`;
- the end (`_end`): exactly one `final` in the log whatever happened (upstream break, validator
  block, the task cancelled, a bug), the upstream closed, and a `RunReport` (app/core/ending.py)
  handed to the observers: metrics, records, key accounting and the request log read it.
The task is cancelled only by its owner, with a reason (`CancelReason`) that decides the final.
The run knows no HTTP: how an error answers over HTTP is the API layer's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import anyio

from app.core.accumulator import Accumulator
from app.core.cost import Rates
from app.core.ending import RunEnding, final_event
from app.core.errors import ErrorData, GatewayError
from app.core.events import (
    AssistantMessage,
    FinalEvent,
    FinalStatus,
    ReasoningBlockEnd,
    RelayedFrame,
    StartEvent,
    StopReason,
    StreamEvent,
    Usage,
)
from app.core.messages import ToolCall
from app.core.released import Released
from app.core.report import RunReport
from app.core.transcript import Transcript
from app.observability import get_logger
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, response_events
from app.streams.errors import CANCELLED_BY_REQUEST
from app.streams.log import StreamLog
from app.streams.relay import Relay
from app.tools import Execution, RunTools
from app.validation import Blocked, Gate

if TYPE_CHECKING:
    from app.routing.router import RouteSession

__all__ = ["CANCEL_ERRORS", "CancelReason", "Run", "RunPlan"]

CancelReason = Literal["client_gone", "cancel_request", "shutdown", "key_revoked"]
"""Why a run's task was cancelled: its reader's client left (`on_disconnect: "cancel"`), the API's
`POST /v1/stream/{id}/cancel`, the gateway's drain, or the revocation of the key that started it."""

_CLOSE_TIMEOUT = 1.0  # DESIGN.md section 6: the upstream is closed within a second
_CONTENT_EVENTS = frozenset({"token", "reasoning", "tool_call", "tool_result"})
_INTERNAL: ErrorData = {"code": "internal_error", "message": "internal gateway error", "retryable": True}
CANCEL_ERRORS: dict[CancelReason, tuple[FinalStatus, ErrorData]] = {
    "client_gone": ("cancelled", {"code": "cancelled", "message": "the client went away", "retryable": False}),
    "cancel_request": ("cancelled", CANCELLED_BY_REQUEST),
    "shutdown": ("error", {"code": "shutdown", "message": "the gateway is shutting down; retry", "retryable": True}),
    "key_revoked": ("error", {"code": "key_revoked", "message": "the API key that started this run was revoked",
                              "retryable": False}),
}
"""The final's status and error for each way a run's task is cancelled. A cancel with no reason
(the event loop itself going away) is a shutdown."""

_log = get_logger("foundry.run")


@dataclass(slots=True, frozen=True, kw_only=True)
class RunPlan(RunEnding):
    """What the opener resolved for a run, before any event existed; as a `RunEnding`, what its
    end names (its model, provider, request, key, start and observers)."""

    adapter: ProviderAdapter
    request: ProviderRequest
    """The first step's request; later steps append the turns and tool results."""
    max_steps: int
    price: Rates | None = None
    """The model's rates (app/accounting.py `PriceBook`): `final.usage.cost` when known."""
    route: RouteSession | None = None
    """The run's route (app/routing, also its `adapter`): its attempts go in `final`."""


@dataclass(slots=True, kw_only=True)
class _Progress:
    """What the steps so far added up to."""

    steps: int = 1
    tools_run: int = 0
    max_steps_reached: bool = False
    usage: Usage = field(default_factory=Usage)  # of the steps that ended
    counted: bool = False  # the current step's usage is in `usage`
    final_message: AssistantMessage | None = None  # the step's, less the gateway's calls, once it ran tools
    stop_reason: StopReason | None = None
    events: dict[str, int] = field(default_factory=dict)  # by type; a plain dict: counted once per event
    ignored: Counter[str] = field(default_factory=Counter)  # what the steps' normalizers ignored as harmless


class Run:
    def __init__(self, plan: RunPlan, *, log: StreamLog, upstream: PatchStream, gate: Gate, tools: RunTools,
                 transcript: Transcript, relay: Relay | None = None) -> None:
        self.plan = plan
        self.log = log
        self.relay = relay
        """The provider's own events for a same-wire facade (app/streams/relay.py), when it relays."""
        self.gate = gate
        self.tools = tools
        self.transcript = transcript
        self.upstream = upstream
        self._closed: PatchStream | None = None
        """The response `_close_upstream` closed last (a stream's `aclose` ends it at its first call)."""
        self.accumulator = Accumulator(model=plan.model, provider=plan.provider, block_ends=True)
        self.released = Released(provider=plan.provider)
        """What was released: the final message and the turns are built from it alone."""
        self.ttft: float | None = None
        self.report: RunReport | None = None
        """Set once the run ended (its final is in the log)."""
        self._progress = _Progress()

    @property
    def stream_id(self) -> str:
        return self.log.info.stream_id

    @property
    def model(self) -> str:
        return self.plan.model

    @property
    def provider(self) -> str:
        return self.plan.provider

    async def execute(self, reason: Callable[[], CancelReason | None]) -> FinalEvent:
        """The task's body: every event into the log, then exactly one final, whatever happens.
        When the task is cancelled, `reason()` says why (None: the loop itself is going away)."""
        # unless the run says otherwise below (a bug anywhere: never a stream without its final)
        status: FinalStatus = "error"
        error: ErrorData | None = _INTERNAL
        try:
            await self._steps()
            status, error = "ok", None
        except asyncio.CancelledError:
            status, error = CANCEL_ERRORS[reason() or "shutdown"]
        except GatewayError as exc:
            if isinstance(exc, Blocked) and exc.released:
                self._emit(exc.released)  # validated before the failing chunk
            status, error = exc.final_status, exc.to_dict()
        except Exception as exc:
            # The exception's type only: its text may quote content (DESIGN.md: no content in logs).
            _log.error("run_failed", stream_id=self.stream_id, exception=type(exc).__name__,
                       where=traceback.format_tb(exc.__traceback__)[-3:])
        finally:
            final = await self._end(status, error)
        return final

    async def _steps(self) -> None:
        """`start`, then each step's response and the gateway's tools between steps, then the
        validators' last word."""
        self._emit([StartEvent(stream_id=self.stream_id, model=self.plan.model, provider=self.plan.provider)])
        while True:
            await self._pump()
            calls = self._gateway_calls()
            if calls:  # the text after the step's last call is over: checked and out before the tools run
                self._emit(await self.gate.close_text())
            await self._end_step(calls)
            if not calls:
                break
            execution = self.tools.start(calls)
            await self._run_tools(execution)
            if not self._continues(execution):
                break
            await self._next_step()
        self._emit(await self.gate.finish())

    # -- the step pump ----------------------------------------------------------------------

    async def _pump(self) -> None:
        """One provider response: upstream -> accumulator -> gate -> log. `start` and the first
        batch reach the log before the first wait, so a reader takes them in one send, and the run
        hands them over (`StreamLog.hand_over`) before it reads on. A lagging reader that holds the
        log pauses the run here (flow control, `StreamLog.room`)."""
        admit, emit, log, relay = self.gate.admit_all, self._emit, self.log, self.relay
        async with contextlib.aclosing(response_events(self.upstream, self.accumulator)) as batches:
            async for events in batches:
                released = await admit(events)
                if released:
                    opening = self.ttft is None
                    emit(released)
                    if opening and self.ttft is not None:  # its first content: the client sends it first
                        await log.hand_over()
                        if relay is not None:
                            await relay.hand_over()
                    if log.lagging:  # the reader that owns the run lags: wait for it, not the upstream
                        await log.room()
                    if relay is not None and relay.lagging:
                        await relay.room()
                del events, released  # not held while the next read waits (app/routing/stream.py)

    def _emit(self, events: list[StreamEvent]) -> None:
        """Append released events to the log (and the transcript, and what was released). A
        `ReasoningBlockEnd` marker goes to `released` only, never to the log."""
        tally, observe, append, keep = self._progress.events, self.transcript.observe, self.log.append, \
            self.released.observe
        for event in events:
            if event.__class__ is RelayedFrame:
                if self.relay is not None:
                    self.relay.push(event.frame)
                continue
            if event.__class__ is ReasoningBlockEnd:
                keep(event)
                continue
            append(event)  # first: an event the log refuses (EventTooLarge) was never released
            keep(event)
            kind = event.type
            if self.ttft is None and kind in _CONTENT_EVENTS:
                self.ttft = time.perf_counter() - self.plan.started
            tally[kind] = tally.get(kind, 0) + 1
            observe(event)

    async def _close_upstream(self) -> None:
        """Close the step's response, once: the end closes it again only if no step end did."""
        upstream = self.upstream
        if upstream is self._closed:
            return
        self._closed = upstream
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await upstream.aclose()

    # -- the tool loop ----------------------------------------------------------------------

    def _gateway_calls(self) -> list[ToolCall]:
        """The step's calls the gateway runs (maybe none), as released: validators may have
        rewritten their arguments (a call is released whole, once its last fragment passed). A run
        with no gateway tools (most) has none: its message is built once, for its final."""
        if not self.tools:
            return []
        return [c for c in self.released.message().tool_calls if self.tools.runs(c.name)]

    async def _end_step(self, calls: list[ToolCall]) -> None:
        """The step's response is complete and released; `calls` are the gateway's to run."""
        await self._close_upstream()  # nothing stays open while tools run
        progress, acc = self._progress, self.accumulator
        progress.usage.add(self._step_usage())
        progress.counted = True
        progress.ignored.update(acc.ignored)
        self.transcript.usage, self.transcript.steps = self._usage(), progress.steps
        if calls:
            message = self.released.message()
            progress.final_message = replace(message, tool_calls=tuple(c for c in message.tool_calls if c not in calls))
            self.transcript.mark_gateway(c.id for c in calls)

    async def _run_tools(self, execution: Execution) -> None:
        """The step's gateway calls, in parallel; their results go out as they come."""
        try:
            while not execution.done:
                results = await self.gate.admit_all(list(await execution.wait()))
                if results:
                    self._emit(results)
        finally:
            await execution.aclose()  # cancelled or failed: nothing keeps running

    def _continues(self, execution: Execution) -> bool:
        """The turn and its results (which closed it) join the conversation; whether another step follows."""
        progress = self._progress
        self.released.end_turn()
        progress.tools_run += len(execution.calls)
        assert progress.final_message is not None
        if progress.final_message.tool_calls:
            progress.stop_reason = "tool_calls"  # the caller answers the rest (after appending `messages`)
            return False
        if progress.steps >= self.plan.max_steps:
            progress.stop_reason = "pause"  # send `messages` back to continue, as with a paused turn
            progress.max_steps_reached = True
            return False
        return True

    async def _next_step(self) -> None:
        first, progress = self.plan.request, self._progress
        choice = first.tool_choice
        if choice not in (None, "auto", "none"):
            choice = None  # "required" or a named tool applies to the first step: it would loop forever
        # a later step is the gateway's own request (the conversation grew): never the client's as sent
        request = replace(first, messages=(*first.messages, *self.released.added), tool_choice=choice,
                          passthrough=None)
        progress.steps += 1
        self.transcript.step = progress.steps
        upstream = await self.plan.adapter.open_stream(request)
        acc = Accumulator(model=self.plan.model, provider=self.plan.provider, block_ends=True)
        acc.continue_from(self.accumulator)
        self.upstream, self.accumulator = upstream, acc
        progress.counted = False
        progress.final_message = None

    # -- the end ----------------------------------------------------------------------------

    def _usage(self) -> Usage:
        usage = Usage()
        usage.add(self._progress.usage)
        if not self._progress.counted:
            usage.add(self._step_usage())
        return usage

    def _step_usage(self) -> Usage:
        """The current step's usage, priced on its own (a long-context tier is one call's prompt, not the run's)."""
        usage = self.accumulator.usage
        if self.plan.price is not None:
            usage.cost = self.plan.price.of(usage)
            usage.cost_usd = usage.cost.total_usd
        return usage

    def _final(self, status: FinalStatus, error: ErrorData | None = None) -> FinalEvent:
        """The run's final as it got it: the message and turns as released, the usage of every step."""
        acc, progress = self.accumulator, self._progress
        usage = self._usage()
        if status != "ok" and not progress.counted and not acc.completed and not acc.output_reported:
            usage.output_unknown = True  # the provider never said how much it produced
        route = self.plan.route
        return final_event(status, error, model=acc.model, provider=acc.provider,
                           message=progress.final_message or self.released.message(), usage=usage,
                           stop_reason=progress.stop_reason or acc.stop_reason, steps=progress.steps,
                           max_steps_reached=progress.max_steps_reached, messages=self.released.added,
                           validation=self.gate.summary(), route=route.outcome() if route is not None else None,
                           content_filter=acc.content_filter)

    def _bare(self) -> FinalEvent:
        """The failed end's final: the run's own could not be built or encoded."""
        return self.plan.bare_final("error", _INTERNAL, steps=self._progress.steps)

    async def _end(self, status: FinalStatus, error: ErrorData | None) -> FinalEvent:
        """The run's final (or the bare one), the upstream closed, the final appended, the report
        handed to the observers; the final as appended. Each part runs whatever the one before
        did: the stream always gets its final."""
        self.gate.close()  # checks still in flight (a cancel, an error) end with the run
        try:
            final = self._final(status, error)
        except Exception:
            final = self._bare()
        progress = self._progress
        try:
            await self._close_upstream()
        finally:
            progress.events["final"] = progress.events.get("final", 0) + 1
            if not progress.counted:
                progress.ignored.update(self.accumulator.ignored)
            try:
                self.log.append(final)
            except Exception:  # the final itself cannot be encoded: a bare one says so
                final = self._bare()
                self.log.append(final)
            if self.relay is not None:
                self.relay.finish(final)
            self.transcript.finish(status=final.status, stop_reason=final.stop_reason, usage=final.usage,
                                   steps=progress.steps)
            self.report = self.plan.end(final, stream_id=self.stream_id, transcript=self.transcript, logger=_log,
                                        events=progress.events, ignored=progress.ignored,
                                        tools_run=progress.tools_run, ttft=self.ttft,
                                        response_id=self.accumulator.response_id)
        return final
