"""The Gateway service: opens runs (provider adapter -> accumulator -> gate -> stream log).

`Gateway.open()` does everything that can fail before the first event (model resolution,
validator configuration, the upstream request) and raises `GatewayError`, which the API turns
into an HTTP error. `Run.frames()` (app/run.py) then drives the run and yields SSE frames; whatever happens
(upstream break, validator block, client disconnect, a bug) the log gets exactly one `final`,
and the upstream response is closed in `finally`. The caller of `frames()` owns cancellation:
closing the generator (client gone) cancels the run.

A run is one or more *steps* (provider responses). When the model calls tools the gateway runs
(app/tools), the step's calls are executed in parallel, their `tool_result` events go out, the
assistant and tool messages are appended and the provider is called again, up to `max_steps`.
All steps make one stream: one `start`, one sequence of ids and indexes, one validation gate
(chunk checks on every step's text, final checks on the last turn), one `final` whose `message`
is the last assistant message and whose usage is summed over the steps. The stream's transcript
(app/core/transcript.py) is fed the released events and kept in the stream's record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError, RequestError, UpstreamError
from app.core.messages import Message, ToolSpec
from app.core.transcript import Transcript, TranscriptLimits
from app.observability import Metrics, get_logger
from app.providers.base import ProviderRequest, ToolChoice
from app.providers.options import check_provider_options
from app.providers.registry import ProviderRegistry
from app.run import Gate, Run
from app.settings import Settings
from app.streams.log import StreamStore
from app.tools import ToolRegistry, build_tools
from app.validation import build_gate

__all__ = ["Gate", "Gateway", "Run", "RunSpec"]


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
    max_steps: int | None = None
    """Most provider calls when the gateway runs tools; None: the operator's `max_steps`."""


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
        tools: ToolRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.store = store
        self.metrics = metrics
        self.gate_factory = gate_factory or Gateway.build_gate
        self.tools = tools if tools is not None else build_tools(
            settings.tools, observer=self._observe_tool, max_output_chars=settings.tool_max_output_chars)
        self.transcript_limits = TranscriptLimits(max_chars=settings.transcript_max_chars,
                                                  max_items=settings.transcript_max_items)
        self.log = get_logger("foundry.pipeline")
        self._background: set[asyncio.Task[Any]] = set()
        self.running: dict[Run, asyncio.Task[Any] | None] = {}
        """Runs in progress and the task driving each (for a bounded shutdown)."""
        self.shutting_down = False

    async def end_runs(self, grace: float) -> None:
        """Shutdown: let running streams finish for `grace` seconds, then end the rest with
        `final{status: "error", error.code: "shutdown", retryable: true}`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.running and loop.time() < deadline:
            await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
        self.shutting_down = True
        for task in list(self.running.values()):
            if task is not None and not task.done():
                task.cancel()

    async def open(self, spec: RunSpec, *, record: dict[str, Any] | None = None) -> Run:
        """Resolve, configure and start one run; raise GatewayError before any event exists."""
        started = time.perf_counter()
        adapter, provider, upstream_model = self.registry.resolve(spec.model)
        check_provider_options(provider, spec.options, self.settings.provider_options_allow)
        max_steps = self._max_steps(spec)
        tools = self.tools.for_run(provider, (t.name for t in spec.tools))
        if tools:  # the gateway's tools are offered with the caller's: the model sees what the gateway runs
            spec = replace(spec, tools=(*spec.tools, *tools.specs))
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
        transcript = Transcript(processors=self.tools.processors, limits=self.transcript_limits)
        transcript.add_request(spec.messages)
        log.info.record["transcript"] = transcript
        return Run(
            gateway=self, log=log, upstream=upstream, gate=gate, provider=provider, model=spec.model,
            started=started, record=record if record is not None else {}, adapter=adapter, request=request,
            tools=tools, max_steps=max_steps, transcript=transcript,
        )

    def _max_steps(self, spec: RunSpec) -> int:
        cap = self.settings.max_steps
        if spec.max_steps is not None and spec.max_steps > cap:
            raise RequestError(f"max_steps may be at most {cap} on this gateway, got {spec.max_steps}",
                               code="invalid_request", status=422, field="max_steps")
        return spec.max_steps or cap

    def _observe_tool(self, tool: str, outcome: str) -> None:
        self.metrics.tool_executions.labels(tool, outcome).inc()

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
        await self.tools.aclose()
