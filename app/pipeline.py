"""One run, end to end: provider adapter -> accumulator -> validation gate -> stream log.

`Gateway.open()` does everything that can fail before the first event (model resolution,
validator configuration, the upstream request) and raises `GatewayError`, which the API turns
into an HTTP error. `Run.frames()` then drives the run and yields SSE frames; whatever happens
(upstream break, validator block, client disconnect, a bug) the log gets exactly one `final`,
and the upstream response is closed in `finally`. The caller of `frames()` owns cancellation:
closing the generator (client gone) cancels the run.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError, UpstreamError
from app.core.events import AssistantMessage, FinalEvent, StartEvent, StreamEvent
from app.core.messages import Message, ToolSpec
from app.observability import Metrics, get_logger
from app.providers.base import PatchStream, ProviderRequest, ToolChoice
from app.providers.registry import ProviderRegistry
from app.settings import Settings
from app.streams.log import StreamLog, StreamStore
from app.validation import build_gate

__all__ = ["Gateway", "Run", "RunSpec"]

_CLOSE_TIMEOUT = 1.0  # DESIGN.md section 6: the upstream is closed within a second
_CONTENT_EVENTS = frozenset({"token", "reasoning", "tool_call", "tool_result"})


class Gate(Protocol):
    """The validation gate as the pipeline uses it (app/validation/gate.py)."""

    async def admit(self, event: StreamEvent) -> list[StreamEvent]: ...

    async def finish(self) -> list[StreamEvent]: ...

    def released_message(self, message: AssistantMessage) -> AssistantMessage: ...

    def summary(self) -> dict[str, Any]: ...


GateFactory = Callable[["Gateway", "RunSpec"], "Gate | None"]


@dataclass(slots=True, kw_only=True)
class RunSpec:
    """A request, checked at the edge, as the pipeline needs it."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    validators: Sequence[Any] = ()
    chunking: str | None = None


class Gateway:
    """The service behind the HTTP API: providers, the stream store, metrics."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: ProviderRegistry,
        store: StreamStore,
        metrics: Metrics,
        gate_factory: GateFactory | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.store = store
        self.metrics = metrics
        self.gate_factory = gate_factory or Gateway.build_gate
        self.log = get_logger("foundry.pipeline")
        self._background: set[asyncio.Task[Any]] = set()

    async def open(self, spec: RunSpec, *, record: dict[str, Any] | None = None) -> Run:
        """Resolve, configure and start one run; raise GatewayError before any event exists."""
        started = time.perf_counter()
        adapter, provider, upstream_model = self.registry.resolve(spec.model)
        gate = self.gate_factory(self, spec)
        request = ProviderRequest(
            model=upstream_model, messages=spec.messages, tools=spec.tools, tool_choice=spec.tool_choice,
            temperature=spec.temperature, max_tokens=spec.max_tokens, options=spec.options,
        )
        if record is not None:
            record.update(model=spec.model, provider=provider)
        try:
            upstream = await adapter.open_stream(request)
        except GatewayError as exc:
            self.metrics.upstream_errors.labels(provider, exc.code).inc()
            raise
        log = self.store.create(model=spec.model, provider=provider)
        return Run(
            gateway=self, log=log, upstream=upstream, gate=gate, provider=provider, model=spec.model,
            started=started, record=record if record is not None else {},
        )

    def build_gate(self, spec: RunSpec) -> Gate | None:
        """The run's validation gate: operator validators always, the request's added; None
        (a pass-through, no added latency) when there are none."""
        return build_gate(
            request_specs=spec.validators, operator_specs=self.settings.validators,
            chunking=spec.chunking or self.settings.default_chunking, tools=spec.tools,
            judge=self.judge, observer=self.metrics.observe_check,
        )

    async def judge(self, model: str, prompt: str) -> str:
        """One short, deterministic completion from `provider/model` (the llm_judge backend)."""
        adapter, provider, name = self.registry.resolve(model)
        request = ProviderRequest(model=name, messages=(Message(role="user", content=prompt),),
                                  temperature=0.0, max_tokens=256)
        stream = await adapter.open_stream(request)
        acc = Accumulator(model=name, provider=provider)
        try:
            async for batch in stream:
                acc.push_all(batch)
        finally:
            await stream.aclose()
        if not acc.completed:
            raise UpstreamError(f"judge {model}: the stream ended before it finished", code="upstream_incomplete")
        return acc.text

    def spawn(self, run: Run) -> None:
        """Run in the background, for subscribers only (POST /v1/generate with stream: true)."""
        task = asyncio.get_running_loop().create_task(self._detached(run), name=f"run-{run.stream_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _detached(self, run: Run) -> None:
        record = dict(run.record)  # the request's own log line was written with the 202
        run.record = record
        try:
            await run.drain()
        finally:
            self.log.info("background_stream", **record)

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.registry.aclose()


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
    ) -> None:
        self.gateway = gateway
        self.log = log
        self.upstream = upstream
        self.gate = gate
        self.provider = provider
        self.model = model
        self.started = started
        self.record = record
        self.accumulator = Accumulator(model=model, provider=provider)
        self.ttft: float | None = None
        self.error_status = 502
        """HTTP status for a JSON answer when the run ended in error (POST /v1/generate)."""
        self.record["stream_id"] = log.info.stream_id

    @property
    def stream_id(self) -> str:
        return self.log.info.stream_id

    async def frames(self) -> AsyncIterator[bytes]:
        """Drive the run; yield each batch of SSE frames as soon as it is in the log."""
        log, acc, gate = self.log, self.accumulator, self.gate
        tally: Counter[str] = Counter()
        final: FinalEvent | None = None
        metrics = self.gateway.metrics
        metrics.active_streams.inc()
        try:
            tally["start"] += 1
            yield log.append(StartEvent(stream_id=self.stream_id, model=self.model, provider=self.provider))
            async for batch in self.upstream:
                events = acc.push_all(batch)
                if gate is not None and events:
                    events = await self._through_gate(gate, events)
                if not events:
                    continue
                if self.ttft is None:
                    self._mark_first_token(events)
                frames = []
                for event in events:
                    tally[event.type] += 1
                    frames.append(log.append(event))
                yield b"".join(frames)
            if not acc.completed:
                raise UpstreamError("the provider's stream ended before it finished",
                                    code="upstream_incomplete", retryable=True, provider=self.provider)
            if gate is not None:
                tail = await gate.finish()
                if tail:
                    if self.ttft is None:
                        self._mark_first_token(tail)
                    for event in tail:
                        tally[event.type] += 1
                    yield b"".join(log.append(e) for e in tail)
            final = self._final("ok")
        except (asyncio.CancelledError, GeneratorExit):
            final = self._final("cancelled", {"code": "cancelled", "message": "the client went away",
                                              "retryable": False})
            raise
        except GatewayError as exc:
            if exc.final_status == "error":
                metrics.upstream_errors.labels(self.provider, exc.code).inc()
                self.error_status = exc.status if exc.status >= 500 else 502
            final = self._final(exc.final_status, exc.to_dict())
        except Exception:
            self.gateway.log.exception("run_failed", stream_id=self.stream_id)
            final = self._final("error", {"code": "internal_error", "message": "internal gateway error",
                                          "retryable": True})
            self.error_status = 500
        finally:
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await self.upstream.aclose()
            if final is None:  # unreachable by design; never leave a stream without its final
                final = self._final("error", {"code": "internal_error", "message": "run ended abnormally",
                                              "retryable": True})
            tally["final"] += 1
            frame = log.append(final)
            metrics.active_streams.dec()
            self._record_end(final, tally)
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

    def _mark_first_token(self, events: list[StreamEvent]) -> None:
        if any(e.type in _CONTENT_EVENTS for e in events):
            self.ttft = time.perf_counter() - self.started

    def _final(self, status: str, error: dict[str, Any] | None = None) -> FinalEvent:
        acc = self.accumulator
        final = acc.final(status, error=error)  # type: ignore[arg-type]
        if self.gate is not None:
            message = self.gate.released_message(final.message)
            extra = {**final.extra, "validation": self.gate.summary()}
            final = FinalEvent(status=final.status, message=message, usage=final.usage,
                               stop_reason=final.stop_reason, model=final.model, provider=final.provider,
                               error=final.error, extra=extra)
        return final

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
            output_tokens=final.usage.output_tokens,
            events=sum(tally.values()),
        )
        if final.error:
            self.record["error_code"] = final.error.get("code")
        if self.gate is not None:
            self.record["validation"] = final.extra.get("validation")

