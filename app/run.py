"""One run of the pipeline: its steps, its events, its honest end, its report.

`Run.frames()` is three parts:
- the step pump (`_pump`): one provider response, upstream -> accumulator -> gate -> stream log;
- the tool loop (`_run_tools`, `_continues`, `_next_step`): between steps, the gateway's tools
  run and their results go out, then the provider is called again, up to `max_steps`;
- the end (`_end`): exactly one `final` in the log whatever happened (upstream break, validator
  block, client disconnect, a bug), the upstream closed, metrics counted, and a `RunReport`
  (app/core/report.py) handed to the observers.
The run knows no HTTP: how an error answers over HTTP is the API layer's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio

from app.auth.policy import Price
from app.core.accumulator import Accumulator
from app.core.errors import ErrorData, GatewayError
from app.core.events import (
    STOP_REASON_FOR_STATUS,
    AssistantMessage,
    FinalEvent,
    FinalStatus,
    ReasoningBlockEnd,
    StartEvent,
    StopReason,
    StreamEvent,
    Usage,
)
from app.core.messages import ToolCall
from app.core.released import Released
from app.core.report import RunObserver, RunReport, notify
from app.core.transcript import Transcript
from app.observability import Metrics
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, response_events
from app.streams.log import CANCELLED_BY_REQUEST, StreamLog
from app.tools import Execution, RunTools
from app.validation import Gate, PassThroughGate

if TYPE_CHECKING:
    from app.routing.router import RouteSession

__all__ = ["Run", "RunPlan", "RunningRuns"]

_CLOSE_TIMEOUT = 1.0  # DESIGN.md section 6: the upstream is closed within a second
_CONTENT_EVENTS = frozenset({"token", "reasoning", "tool_call", "tool_result"})
_INTERNAL: ErrorData = {"code": "internal_error", "message": "internal gateway error", "retryable": True}
_GONE: ErrorData = {"code": "cancelled", "message": "the client went away", "retryable": False}
_SHUTDOWN: ErrorData = {"code": "shutdown", "message": "the gateway is shutting down; retry", "retryable": True}


class RunningRuns:
    """The runs in progress and the task driving each, for a bounded shutdown."""

    def __init__(self) -> None:
        self.running: dict[Run, asyncio.Task[Any] | None] = {}
        self.shutting_down = False

    async def end(self, grace: float) -> None:
        """Let running runs finish for `grace` seconds, then cancel the rest: each ends with
        `final{status: "error", error.code: "shutdown", retryable: true}`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.running and loop.time() < deadline:  # noqa: ASYNC110 (runs leave from their own tasks)
            await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
        self.shutting_down = True
        for task in list(self.running.values()):
            if task is not None and not task.done():
                task.cancel()


@dataclass(slots=True, frozen=True, kw_only=True)
class RunPlan:
    """What `Gateway.open` resolved for a run, before any event existed."""

    model: str
    """As the caller asked for it."""
    provider: str
    adapter: ProviderAdapter
    request: ProviderRequest
    """The first step's request; later steps append the turns and tool results."""
    max_steps: int
    request_id: str | None = None
    owner: str | None = None
    """The API key id that started the run (app/auth)."""
    price: Price | None = None
    """The model's price: `final.usage.cost_usd` when known."""
    started: float = field(default_factory=time.perf_counter)
    started_at: float = field(default_factory=time.time)
    route: RouteSession | None = None
    """The run's route (app/routing, also its `adapter`): its attempts go in `final`; told when the run ended."""


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
    events: Counter[str] = field(default_factory=Counter)


class Run:
    def __init__(
        self,
        plan: RunPlan,
        *,
        log: StreamLog,
        upstream: PatchStream,
        gate: Gate,
        tools: RunTools,
        transcript: Transcript,
        metrics: Metrics,
        logger: Any,
        observers: Sequence[RunObserver] = (),
        runs: RunningRuns | None = None,
    ) -> None:
        self.plan = plan
        self.log = log
        self.gate = gate
        self.tools = tools
        self.transcript = transcript
        self.metrics = metrics
        self.logger = logger
        self.observers = observers
        self.runs = runs if runs is not None else RunningRuns()
        self.upstream = upstream
        self.accumulator = Accumulator(model=plan.model, provider=plan.provider, block_ends=True)
        self.released = Released(provider=plan.provider)
        """What was released: the final message and the turns are built from it alone."""
        self.ttft: float | None = None
        self.report: RunReport | None = None
        """Set once the run ended (its final is in the log)."""
        self._progress = _Progress()
        self.listener: Callable[[StreamEvent], None] | None = None
        """Given each event as it enters the log, final included: the seam through which the
        drop-in facades (app/api/compat) translate the canonical events into a client's format."""

    @property
    def stream_id(self) -> str:
        return self.log.info.stream_id

    @property
    def model(self) -> str:
        return self.plan.model

    @property
    def provider(self) -> str:
        return self.plan.provider

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """Drive the run; yield each batch of SSE frames as soon as it is in the log."""
        final: FinalEvent | None = None
        self.metrics.active_streams.inc()
        self.runs.running[self] = asyncio.current_task()  # ended by RunningRuns.end on shutdown
        # `start` goes out in one write with the first batch when that batch is already in hand
        # (no validator, and routing read the upstream up to its first content): one send and one
        # client wake-up less before the first token. A gate may hold text a while: start goes alone.
        start = self._emit([StartEvent(stream_id=self.stream_id, model=self.plan.model,
                                       provider=self.plan.provider)])
        try:
            if self.gate.__class__ is not PassThroughGate:
                yield start
                start = b""
            while True:
                async with contextlib.aclosing(self._pump()) as frames:
                    async for batch in frames:
                        if start:
                            batch, start = start + batch, b""
                        yield batch
                if start:
                    yield start
                    start = b""
                calls = self._gateway_calls()
                if calls:  # the text after the step's last call is over: checked and out before the tools run
                    held = await self.gate.close_text()
                    if held:
                        yield self._emit(held)
                await self._end_step(calls)
                if not calls:
                    break
                execution = self.tools.start(calls)
                async with contextlib.aclosing(self._run_tools(execution)) as frames:
                    async for batch in frames:
                        yield batch
                if not self._continues(execution):
                    break
                await self._next_step()
            tail = await self.gate.finish()
            if tail:
                yield self._emit(tail)
            final = self._ending("ok", None)
        except asyncio.CancelledError:
            if not self.runs.shutting_down:
                final = self._ending("cancelled", self._cancelled_by())
                raise
            # The gateway is stopping (SIGTERM, grace over): an honest end the caller can retry.
            final = self._ending("error", _SHUTDOWN)
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        except GeneratorExit:
            final = self._ending("cancelled", self._cancelled_by())
            raise
        except GatewayError as exc:
            if exc.final_status == "error":
                self.metrics.upstream_errors.labels(self.plan.provider, exc.code).inc()
            final = self._ending(exc.final_status, exc.to_dict())
        except Exception as exc:
            # The exception's type only: its text may quote content (DESIGN.md: no content in logs).
            self.logger.error("run_failed", stream_id=self.stream_id, exception=type(exc).__name__,
                              where=traceback.format_tb(exc.__traceback__)[-3:])
            final = self._ending("error", _INTERNAL)
        finally:
            if final is None:  # unreachable by design; never leave a stream without its final
                final = self._ending("error", _INTERNAL)
            frame = await self._end(final)
        # Reached only when not cancelled: the last frame goes to the caller (after `start` if
        # the first response failed before releasing anything).
        yield start + frame

    async def drain(self) -> FinalEvent:
        """Drive to the end without a live reader (background runs, JSON answers); supervised, so
        POST /v1/stream/{id}/cancel can end it (app/streams/log.py)."""
        async with contextlib.aclosing(self.log.supervise(self.frames())) as frames:
            async for _ in frames:
                pass
        assert self.log.final is not None
        return self.log.final

    # -- the step pump ----------------------------------------------------------------------

    async def _pump(self) -> AsyncGenerator[bytes, None]:
        """One provider response: upstream -> accumulator -> gate -> log."""
        admit = self.gate.admit_all
        async with contextlib.aclosing(response_events(self.upstream, self.accumulator)) as batches:
            async for events in batches:
                released = await admit(events)
                if released:
                    yield self._emit(released)

    def _emit(self, events: list[StreamEvent]) -> bytes:
        """Append released events to the log (and the transcript, and what was released); their
        frames, joined. A `ReasoningBlockEnd` marker goes to `released` only, never to SSE nor
        to the listener."""
        tally, observe, append, keep = self._progress.events, self.transcript.observe, self.log.append, \
            self.released.observe
        listener = self.listener
        frames = []
        for event in events:
            keep(event)
            if event.__class__ is ReasoningBlockEnd:
                continue
            if self.ttft is None and event.type in _CONTENT_EVENTS:
                self.ttft = time.perf_counter() - self.plan.started
            tally[event.type] += 1
            observe(event)
            frames.append(append(event))
            if listener is not None:
                listener(event)
        return b"".join(frames)

    async def _close_upstream(self) -> None:
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await self.upstream.aclose()

    # -- the tool loop ----------------------------------------------------------------------

    def _gateway_calls(self) -> list[ToolCall]:
        """The step's calls the gateway runs (maybe none), as released: validators may have
        rewritten their arguments (a call is released whole, once its last fragment passed)."""
        return [c for c in self.released.message().tool_calls if self.tools.runs(c.name)]

    async def _end_step(self, calls: list[ToolCall]) -> None:
        """The step's response is complete and released; `calls` are the gateway's to run."""
        await self._close_upstream()  # nothing stays open while tools run
        progress, acc = self._progress, self.accumulator
        progress.usage.add(acc.usage)
        progress.counted = True
        self.transcript.usage, self.transcript.steps = self._usage(), progress.steps
        if calls:
            message = self.released.message()
            progress.final_message = replace(message, tool_calls=tuple(c for c in message.tool_calls if c not in calls))
            self.transcript.mark_gateway(c.id for c in calls)

    async def _run_tools(self, execution: Execution) -> AsyncGenerator[bytes, None]:
        """The step's gateway calls, in parallel; their results go out as they come."""
        try:
            while not execution.done:
                results = await self.gate.admit_all(list(await execution.wait()))
                if results:
                    yield self._emit(results)
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
        request = replace(first, messages=(*first.messages, *self.released.added), tool_choice=choice)
        progress.steps += 1
        self.transcript.step = progress.steps
        upstream = await self.plan.adapter.open_stream(request)
        self._count_ignored()
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
            usage.add(self.accumulator.usage)
        return usage

    def _cancelled_by(self) -> ErrorData:
        """Why a cancelled run ended: the API's cancel, or its client went away."""
        return CANCELLED_BY_REQUEST if self.log.cancel_requested else _GONE

    def _ending(self, status: FinalStatus, error: ErrorData | None) -> FinalEvent:
        """The final event; a bare one (no message) if building the full one fails."""
        try:
            return self._final(status, error)
        except Exception:
            return self._bare_final("error", _INTERNAL)

    def _bare_final(self, status: FinalStatus, error: ErrorData) -> FinalEvent:
        return FinalEvent(status=status, message=AssistantMessage(), usage=Usage(),
                          stop_reason=STOP_REASON_FOR_STATUS[status], model=self.plan.model,
                          provider=self.plan.provider, error=error, steps=self._progress.steps)

    def _final(self, status: FinalStatus, error: ErrorData | None = None) -> FinalEvent:
        acc, progress = self.accumulator, self._progress
        message = progress.final_message or self.released.message()
        stop_reason = (progress.stop_reason or acc.stop_reason) if status == "ok" else STOP_REASON_FOR_STATUS[status]
        usage = self._usage()
        if status != "ok" and not progress.counted and not acc.completed:
            usage.output_unknown = True  # the provider never said how much it produced
        if self.plan.price is not None:
            usage.cost_usd = self.plan.price.cost(usage)
        route = self.plan.route
        return FinalEvent(status=status, message=message, usage=usage, stop_reason=stop_reason,
                          model=acc.model, provider=acc.provider, error=error, steps=progress.steps,
                          max_steps_reached=progress.max_steps_reached,
                          messages=self.released.added,
                          validation=self.gate.summary(), **(route.final_fields() if route is not None else {}))

    async def _end(self, final: FinalEvent) -> bytes:
        """Close the upstream, append the final, count, report; the final's frame. Each part
        runs whatever the one before did: the stream always gets its final."""
        progress = self._progress
        try:
            await self._close_upstream()
        finally:
            progress.events["final"] += 1
            try:
                frame = self.log.append(final)
            except Exception:  # the final itself cannot be encoded: a bare one says so
                final = self._bare_final("error", _INTERNAL)
                frame = self.log.append(final)
            if self.listener is not None:
                self.listener(final)
            try:
                self.transcript.finish(status=final.status, stop_reason=final.stop_reason, usage=final.usage,
                                       steps=progress.steps)
                duration = time.perf_counter() - self.plan.started
                self._count(final, duration)
                self._report(final, duration)
            finally:
                self.metrics.active_streams.dec()
                self.runs.running.pop(self, None)
                if self.plan.route is not None:
                    self.plan.route.close()
        return frame

    def _report(self, final: FinalEvent, duration: float) -> None:
        progress = self._progress
        self.report = report = RunReport(
            stream_id=self.stream_id, request_id=self.plan.request_id, owner=self.plan.owner, model=self.plan.model,
            served_model=final.model, provider=self.plan.provider, status=final.status,
            stop_reason=final.stop_reason, error=final.error, usage=final.usage, steps=final.steps,
            max_steps_reached=final.max_steps_reached, tools_run=progress.tools_run,
            events=sum(progress.events.values()), validation=final.validation, ttft=self.ttft,
            duration=duration, started_at=self.plan.started_at, final=final, transcript=self.transcript,
        )
        notify(self.observers, report, self.logger)

    def _count_ignored(self) -> None:
        """What the step's normalizer ignored as harmless: counted and logged (debug), per step."""
        for what, n in self.accumulator.ignored.items():
            self.metrics.upstream_ignored.labels(self.plan.provider, what).inc(n)
            self.logger.debug("upstream_ignored", stream_id=self.stream_id, what=what, count=n)

    def _count(self, final: FinalEvent, duration: float) -> None:
        self._count_ignored()
        metrics, provider = self.metrics, self.plan.provider
        metrics.count_events(self._progress.events)
        metrics.stream_duration.labels(provider, final.status).observe(duration)
        metrics.streams_finished.labels(provider, final.status).inc()
        if self.ttft is not None:
            metrics.ttft.labels(provider).observe(self.ttft)
