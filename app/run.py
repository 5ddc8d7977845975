"""One run of the pipeline: its steps, its events, its honest end (see app/pipeline.py).

`Run.frames()` drives the provider's responses through the accumulator, the validation gate and
the stream log; between steps it runs the gateway's tools. Whatever happens (upstream break,
validator block, client disconnect, a bug) the log gets exactly one `final`, open tool calls are
cancelled and the upstream response is closed in `finally`.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError, UpstreamError
from app.core.events import (
    STOP_REASON_FOR_STATUS,
    AssistantMessage,
    FinalEvent,
    StartEvent,
    StopReason,
    StreamEvent,
    Usage,
)
from app.core.messages import Message, ToolCall
from app.core.transcript import Transcript
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest
from app.streams.log import StreamLog
from app.tools import Execution, RunTools

if TYPE_CHECKING:
    from app.pipeline import Gateway

__all__ = ["Gate", "Run"]

_CLOSE_TIMEOUT = 1.0  # DESIGN.md section 6: the upstream is closed within a second
_CONTENT_EVENTS = frozenset({"token", "reasoning", "tool_call", "tool_result"})
_INTERNAL = {"code": "internal_error", "message": "internal gateway error", "retryable": True}
_GONE = {"code": "cancelled", "message": "the client went away", "retryable": False}
_SHUTDOWN = {"code": "shutdown", "message": "the gateway is shutting down; retry", "retryable": True}


class Gate(Protocol):
    """The validation gate as the pipeline uses it (app/validation/gate.py)."""

    async def admit(self, event: StreamEvent) -> list[StreamEvent]: ...

    async def finish(self) -> list[StreamEvent]: ...

    def released_message(self, message: AssistantMessage) -> AssistantMessage: ...

    def summary(self) -> dict[str, Any]: ...



class Run:
    def __init__(
        self,
        *,
        gateway: Gateway,
        log: StreamLog,
        upstream: PatchStream,
        gate: Gate | None,
        provider: str,
        model: str,
        started: float,
        record: dict[str, Any],
        adapter: ProviderAdapter,
        request: ProviderRequest,
        tools: RunTools,
        max_steps: int,
        transcript: Transcript,
    ) -> None:
        self.gateway = gateway
        self.log = log
        self.upstream = upstream
        self.gate = gate
        self.provider = provider
        self.model = model
        self.started = started
        self.record = record
        self.adapter = adapter
        self.request = request
        self.tools = tools
        self.max_steps = max_steps
        self.transcript = transcript
        self.accumulator = Accumulator(model=model, provider=provider)
        self.ttft: float | None = None
        self.error_status = 502
        """HTTP status for a JSON answer when the run ended in error (POST /v1/generate)."""
        self.steps = 1
        self.tools_run = 0
        self.max_steps_reached = False
        self._usage = Usage()  # of the steps that ended
        self._counted = False  # the current step's usage is in _usage
        self._step_message: AssistantMessage | None = None  # the current step's, once it ended with gateway calls
        self._gateway_ids: set[str] = set()  # calls the gateway took on: never the caller's to answer
        self._added: list[Message] = []  # the messages the run appended to the conversation
        self._stop_reason: StopReason | None = None
        self.record["stream_id"] = log.info.stream_id

    @property
    def stream_id(self) -> str:
        return self.log.info.stream_id

    async def frames(self) -> AsyncIterator[bytes]:
        """Drive the run; yield each batch of SSE frames as soon as it is in the log."""
        log, gate = self.log, self.gate
        tally: Counter[str] = Counter()
        final: FinalEvent | None = None
        metrics = self.gateway.metrics
        metrics.active_streams.inc()
        self.gateway.running[self] = asyncio.current_task()  # ended by Gateway.end_runs on shutdown
        try:
            tally["start"] += 1
            yield log.append(StartEvent(stream_id=self.stream_id, model=self.model, provider=self.provider))
            while True:
                acc = self.accumulator
                async for batch in self.upstream:
                    events = acc.push_all(batch)
                    if gate is not None and events:
                        events = await self._through_gate(gate, events)
                    if events:
                        yield self._emit(events, tally)
                if not acc.completed:
                    raise UpstreamError("the provider's stream ended before it finished",
                                        code="upstream_incomplete", retryable=True, provider=self.provider)
                calls = await self._end_step()
                if not calls:
                    break
                execution = self.tools.start(calls)
                try:
                    while not execution.done:
                        results: list[StreamEvent] = list(await execution.wait())
                        if gate is not None:
                            results = await self._through_gate(gate, results)
                        if results:
                            yield self._emit(results, tally)
                finally:
                    await execution.aclose()  # cancelled or failed: nothing keeps running
                if not self._continues(execution):
                    break
                await self._next_step()
            if gate is not None:
                tail = await gate.finish()
                if tail:
                    yield self._emit(tail, tally)
            final = self._ending("ok", None)
        except asyncio.CancelledError:
            if not self.gateway.shutting_down:
                final = self._ending("cancelled", _GONE)
                raise
            # The gateway is stopping (SIGTERM, grace over): an honest end the caller can retry.
            final = self._ending("error", _SHUTDOWN)
            self.error_status = 503
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        except GeneratorExit:
            final = self._ending("cancelled", _GONE)
            raise
        except GatewayError as exc:
            if exc.final_status == "error":
                metrics.upstream_errors.labels(self.provider, exc.code).inc()
                self.error_status = exc.status if exc.status >= 500 else 502
            final = self._ending(exc.final_status, exc.to_dict())
        except Exception as exc:
            # The exception's type only: its text may quote content (DESIGN.md: no content in logs).
            self.gateway.log.error("run_failed", stream_id=self.stream_id, exception=type(exc).__name__,
                                   where=traceback.format_tb(exc.__traceback__)[-3:])
            final = self._ending("error", _INTERNAL)
            self.error_status = 500
        finally:
            try:
                await self._close_upstream()
            finally:
                if final is None:  # unreachable by design; never leave a stream without its final
                    final = self._ending("error", _INTERNAL)
                tally["final"] += 1
                try:
                    frame = log.append(final)
                except Exception:  # the final itself cannot be encoded: a bare one says so
                    self.error_status = 500
                    final = self._bare_final("error", _INTERNAL)
                    frame = log.append(final)
                try:
                    self.transcript.finish(status=final.status, stop_reason=final.stop_reason, usage=final.usage,
                                           steps=self.steps)
                    self._record_end(final, tally)
                finally:
                    metrics.active_streams.dec()
                    self.gateway.running.pop(self, None)
        # Reached only when not cancelled: the last frame goes to the caller.
        yield frame

    async def drain(self) -> FinalEvent:
        """Drive to the end without a live reader (background runs, JSON answers)."""
        async for _ in self.frames():
            pass
        assert self.log.final is not None
        return self.log.final

    async def _through_gate(self, gate: Gate, events: list[StreamEvent]) -> list[StreamEvent]:
        released: list[StreamEvent] = []
        for event in events:
            released.extend(await gate.admit(event))
        return released

    def _emit(self, events: list[StreamEvent], tally: Counter[str]) -> bytes:
        """Append released events to the log (and the transcript); their frames, joined."""
        if self.ttft is None:
            self._mark_first_token(events)
        observe, append = self.transcript.observe, self.log.append
        frames = []
        for event in events:
            tally[event.type] += 1
            observe(event)
            frames.append(append(event))
        return b"".join(frames)

    async def _close_upstream(self) -> None:
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await self.upstream.aclose()

    # -- steps ----------------------------------------------------------------------------

    async def _end_step(self) -> list[ToolCall]:
        """The step's response is complete: release it; the calls the gateway runs (maybe none)."""
        await self._close_upstream()  # nothing stays open while tools run
        acc = self.accumulator
        self._usage.add(acc.usage)
        self._counted = True
        self.transcript.close_turn()
        self.transcript.usage, self.transcript.steps = self._final_usage(), self.steps
        message = acc.message()
        calls = [c for c in message.tool_calls if self.tools.runs(c.name)]
        if not calls:
            return []
        if self.gate is not None:  # run what was released (validators may have rewritten arguments)
            message = self.gate.released_message(message)
            calls = [c for c in message.tool_calls if self.tools.runs(c.name)]
        self._step_message = message
        self._gateway_ids.update(c.id for c in calls)
        self.transcript.mark_gateway(c.id for c in calls)
        return calls

    def _continues(self, execution: Execution) -> bool:
        """Append the turn and its results to the conversation; whether another step follows."""
        message = self._step_message
        assert message is not None
        self._added.extend(self.accumulator.history)
        self._added.append(Message(role="assistant", content=message.content, tool_calls=message.tool_calls,
                                   reasoning=message.reasoning))
        for call in execution.calls:
            result = execution.results[call.id]
            # model_construct: an empty output is a fact to pass on, not caller input to refuse.
            self._added.append(Message.model_construct(role="tool", content=result.content, tool_call_id=call.id,
                                                       name=call.name, tool_calls=(), reasoning=()))
        self.tools_run += len(execution.calls)
        if len(message.tool_calls) > len(execution.calls):
            self._stop_reason = "tool_calls"  # the caller answers the rest (after appending `messages`)
            return False
        if self.steps >= self.max_steps:
            self._stop_reason = "pause"  # send `messages` back to continue, as with a paused turn
            self.max_steps_reached = True
            return False
        return True

    async def _next_step(self) -> None:
        choice = self.request.tool_choice
        if choice not in (None, "auto", "none"):
            choice = None  # "required" or a named tool applies to the first step: it would loop forever
        request = replace(self.request, messages=(*self.request.messages, *self._added), tool_choice=choice)
        self.steps += 1
        self.transcript.step = self.steps
        upstream = await self.adapter.open_stream(request)
        acc = Accumulator(model=self.model, provider=self.provider)
        acc.continue_from(self.accumulator)
        self.upstream, self.accumulator = upstream, acc
        self._counted = False
        self._step_message = None

    # -- the end --------------------------------------------------------------------------

    def _mark_first_token(self, events: list[StreamEvent]) -> None:
        if any(e.type in _CONTENT_EVENTS for e in events):
            self.ttft = time.perf_counter() - self.started

    def _final_usage(self) -> Usage:
        usage = Usage()
        usage.add(self._usage)
        if not self._counted:
            usage.add(self.accumulator.usage)
        return usage

    def _ending(self, status: str, error: dict[str, Any] | None) -> FinalEvent:
        """The final event; a bare one (no message) if building the full one fails."""
        try:
            return self._final(status, error)
        except Exception:
            self.error_status = 500
            return self._bare_final("error", _INTERNAL)

    def _bare_final(self, status: str, error: dict[str, Any]) -> FinalEvent:
        return FinalEvent(status=status, message=AssistantMessage(),  # type: ignore[arg-type]
                          usage=Usage(), stop_reason=STOP_REASON_FOR_STATUS[status], model=self.model,
                          provider=self.provider, error=error, extra={"steps": self.steps, "max_steps_reached": False})

    def _final(self, status: str, error: dict[str, Any] | None = None) -> FinalEvent:
        acc = self.accumulator
        message = self._step_message
        if message is None:
            message = acc.message()
            if self.gate is not None:
                message = self.gate.released_message(message)
        if self._gateway_ids:
            message = AssistantMessage(content=message.content, reasoning=message.reasoning, tool_calls=tuple(
                c for c in message.tool_calls if c.id not in self._gateway_ids))
        stop_reason: StopReason | None
        if status == "ok":
            stop_reason = self._stop_reason or acc.stop_reason
        else:
            stop_reason = STOP_REASON_FOR_STATUS[status]
        extra: dict[str, Any] = {"steps": self.steps, "max_steps_reached": self.max_steps_reached}
        if self._added:
            extra["messages"] = [m.model_dump(mode="json", exclude_defaults=True) for m in self._added]
        if self.gate is not None:
            extra["validation"] = self.gate.summary()
        usage = self._final_usage()
        if status != "ok" and not self._counted and not acc.completed:
            usage.output_unknown = True  # the provider never said how much it produced
        return FinalEvent(status=status, message=message, usage=usage,  # type: ignore[arg-type]
                          stop_reason=stop_reason, model=acc.model, provider=acc.provider, error=error, extra=extra)

    def _record_end(self, final: FinalEvent, tally: Counter[str]) -> None:
        duration = time.perf_counter() - self.started
        metrics = self.gateway.metrics
        metrics.count_events(tally)
        metrics.stream_duration.labels(self.provider, final.status).observe(duration)
        metrics.streams_finished.labels(self.provider, final.status).inc()
        if self.ttft is not None:
            metrics.ttft.labels(self.provider).observe(self.ttft)
        self.record.update(
            stream_status=final.status,
            stop_reason=final.stop_reason,
            ttft_ms=round(self.ttft * 1000, 3) if self.ttft is not None else None,
            run_ms=round(duration * 1000, 3),
            input_tokens=final.usage.input_tokens,
            output_tokens=None if final.usage.output_unknown else final.usage.output_tokens,
            events=sum(tally.values()),
            steps=self.steps,
            tools_run=self.tools_run,
        )
        if final.error:
            self.record["error_code"] = final.error.get("code")
        if self.gate is not None:
            self.record["validation"] = _without_content(final.extra.get("validation"))


def _without_content(validation: dict[str, Any] | None) -> dict[str, Any] | None:
    """The validation summary for the log: a block names the validator and the code, never the
    reason (a reason may quote the matched text; it stays in the response and the transcript)."""
    if not validation or "blocked" not in validation:
        return validation
    blocked = validation["blocked"]
    return {**validation, "blocked": {"validator": blocked.get("validator"), "code": "validation_failed"}}
