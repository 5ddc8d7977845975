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
(app/core/transcript.py) is fed the released events and kept with the stream (`StreamInfo`).

When a run ends, every observer (`Gateway(observers=...)`, `add_observer`) gets its `RunReport`
(app/core/report.py): the seam for run records, usage accounting and metrics.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.auth.policy import Price, price_for
from app.core.accumulator import Accumulator
from app.core.errors import GatewayError, RequestError, UpstreamError
from app.core.events import AssistantMessage, FinalEvent, Usage
from app.core.messages import Message, ToolSpec
from app.core.report import RunObserver, RunReport, notify
from app.core.transcript import Transcript, TranscriptLimits
from app.lifecycle import Admission, ShuttingDown
from app.observability import Metrics, get_logger
from app.providers.base import ProviderRequest, drive
from app.providers.options import check_provider_options
from app.providers.registry import ProviderRegistry
from app.routing.config import Deadlines
from app.routing.router import Attempt, Policy, Router, RouteSession
from app.run import Run, RunningRuns, RunPlan
from app.settings import Settings
from app.streams.log import StreamStore
from app.tools import ToolRegistry, build_tools
from app.validation import Gate, PassThroughGate, ValidatorSpec, build_gate

__all__ = ["Gate", "Gateway", "Run", "RunObserver", "RunReport", "RunSpec"]


_CUT_WAIT = 2.0
"""After the grace, how long cut runs get to write their final and close their upstreams."""

GateFactory = Callable[["Gateway", "RunSpec"], "Gate | None"]
"""Builds a run's gate; None means no validator applies (a pass-through)."""
_PASS_THROUGH = PassThroughGate()


@dataclass(slots=True, frozen=True, kw_only=True)
class RunSpec:
    """A request, checked at the edge: what to ask the provider, and what the gateway does
    around it. Each field has one home: the model call's fields are the `ProviderRequest`'s."""

    request: ProviderRequest
    """Its `model` is as the caller named it (`provider/model` or an alias): `Gateway.open`
    resolves it and sends the provider its own model name."""
    validators: Sequence[ValidatorSpec] = ()
    chunking: str | None = None
    max_steps: int | None = None
    """Most provider calls when the gateway runs tools; None: the operator's `max_steps`."""
    owner: str | None = None
    """The API key id that starts the run: its stream, transcript and record belong to that key."""
    policy_validators: Sequence[ValidatorSpec] = ()
    """The key's validators: applied like the operator's, on top of them."""
    timeouts: Deadlines | None = None
    """The request's deadline overrides (within the operator's caps)."""

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        return self.request.tools


def routing_policy(settings: Settings) -> Policy:
    return Policy(
        max_retries=settings.upstream_max_retries, backoff=settings.retry_backoff_seconds,
        backoff_max=settings.retry_backoff_max_seconds, retry_after_max=settings.retry_after_max_seconds,
        first_token=settings.first_token_timeout, idle=settings.read_timeout, total=settings.total_timeout,
        max_first_token=settings.max_first_token_timeout, max_idle=settings.max_idle_timeout,
        max_total=settings.max_total_timeout, breaker_failures=settings.breaker_failures,
        breaker_cooldown=settings.breaker_cooldown_seconds,
    )


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
        observers: Iterable[RunObserver] = (),
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
        self.observers: list[RunObserver] = list(observers)
        self.router = Router(registry=registry, routes=settings.routes, policy=routing_policy(settings))
        self.router.observer = self._observe_attempt
        self.admission = Admission(max_active=settings.max_active_runs)
        metrics.watch_circuits(self.router.breakers.states)
        self._background: set[asyncio.Task[Any]] = set()
        self.runs = RunningRuns()
        """Runs in progress and the task driving each (for a bounded shutdown)."""

    async def end_runs(self, grace: float) -> int:
        """Drain (SIGTERM): refuse new runs at once (/readyz 503), let running streams finish for
        `grace` seconds, then end the rest with `final{status: "error", error.code: "shutdown",
        retryable: true}` (their upstreams closed). Returns how many were cut."""
        admission = self.admission
        admission.draining = True
        loop = asyncio.get_running_loop()
        await admission.until_idle(loop.time() + grace)
        cut = len(admission.active)
        await self.runs.end(0)  # the running ones: cancelled into their `shutdown` final
        for session in list(admission.active):
            if session.opening:  # not streaming yet: its HTTP answer becomes a 503
                session.abort(ShuttingDown("the gateway shut down before the run started; retry it"))
        await admission.until_idle(loop.time() + _CUT_WAIT)
        self.log.info("drained", cut_runs=cut)
        return cut

    def add_observer(self, observer: RunObserver) -> None:
        """Call `observer(report)` when each later run ends (app/core/report.py)."""
        self.observers.append(observer)

    async def open(self, spec: RunSpec, *, request_id: str | None = None) -> Run:
        """Resolve, configure and start one run; raise GatewayError before any event exists.

        The route (app/routing) opens the upstream and reads it up to its first content, retrying
        and falling back as it may; the run then goes on with the target that served.
        """
        started, started_at = time.perf_counter(), time.time()
        session = self.router.session(spec.model, spec.timeouts)
        self.admission.admit(session)  # 503 when draining or full
        session.on_close(lambda: self.admission.release(session))
        try:
            run = await self._open(spec, session, started, started_at, request_id)
        except BaseException:
            session.close()
            raise
        # The run releases its slot when it ends; should it never start (the client left before
        # the response began), the slot goes with the run object.
        weakref.finalize(run, session.close)
        return run

    async def _open(self, spec: RunSpec, session: RouteSession, started: float, started_at: float,
                    request_id: str | None) -> Run:
        primary = session.primary
        for provider in {t.provider for t in session.targets}:  # the request's options go to any of them
            check_provider_options(provider, spec.request.options, self.settings.provider_options_allow)
        max_steps = self._max_steps(spec)
        tools = self.tools.for_run(primary.provider, (t.name for t in spec.tools))
        if tools:  # the gateway's tools are offered with the caller's: the model sees what the gateway runs
            spec = replace(spec, request=replace(spec.request, tools=(*spec.tools, *tools.specs)))
        gate = self.gate_factory(self, spec) or _PASS_THROUGH
        request = replace(spec.request, model=primary.upstream_model)
        try:
            upstream = await session.open_stream(request)
        except GatewayError as exc:
            self.metrics.upstream_errors.labels(primary.provider, exc.code).inc()
            if session.attempts:
                self._refused(spec, session, request, exc, started, started_at, request_id)
            raise
        served = session.served
        assert served is not None
        # `start` and `final` name what served: a route's target, or the model as asked
        model = served.name if session.route is not None else spec.model
        try:
            log = await self.store.create(model=model, provider=served.provider, owner=spec.owner)
        except BaseException:
            await upstream.aclose()  # no stream, no run: nothing stays open
            raise
        transcript = log.info.transcript = self._transcript(request)
        plan = RunPlan(model=model, provider=served.provider, adapter=session, request=request, max_steps=max_steps,
                       request_id=request_id, started=started, started_at=started_at, route=session,
                       owner=spec.owner, price=self._price(model))
        return Run(plan, log=log, upstream=upstream, gate=gate, tools=tools, transcript=transcript,
                   metrics=self.metrics, logger=self.log, observers=self.observers, runs=self.runs)

    def _refused(self, spec: RunSpec, session: RouteSession, request: ProviderRequest, exc: GatewayError,
                 started: float, started_at: float, request_id: str | None) -> None:
        """No target served (each attempt failed before its first content): the caller gets an HTTP
        error and no stream exists, but the observers get the run's report (run records list it,
        with its error, attempts and request; the key's usage is untouched: nothing was produced)."""
        last = session.attempts[-1].target
        provider = next((t.provider for t in session.targets if t.name == last), session.primary.provider)
        error = exc.to_dict()
        final = FinalEvent(status="error", message=AssistantMessage(), usage=Usage(), stop_reason="error",
                           model=request.model, provider=provider, error=error, steps=1, **session.final_fields())
        transcript = self._transcript(request)
        transcript.finish(status="error", stop_reason="error", usage=final.usage, steps=1)
        report = RunReport(
            stream_id="str_" + uuid.uuid4().hex, request_id=request_id, owner=spec.owner, model=spec.model,
            served_model=request.model, provider=provider, status="error", stop_reason="error", error=error,
            usage=final.usage, steps=1, max_steps_reached=False, tools_run=0, events=0, validation=None, ttft=None,
            duration=time.perf_counter() - started, started_at=started_at, final=final, transcript=transcript)
        notify(self.observers, report, self.log)

    def _transcript(self, request: ProviderRequest) -> Transcript:
        """A run's transcript, the request's messages in it."""
        transcript = Transcript(processors=self.tools.processors, limits=self.transcript_limits)
        transcript.add_request(request.messages)
        return transcript

    def _price(self, model: str) -> Price | None:
        """The model's price (FOUNDRY_PRICES), as requested or by its alias's target; None if unknown."""
        prices = self.settings.prices
        return price_for(prices, model, self.settings.aliases.get(model, "")) if prices else None

    def _max_steps(self, spec: RunSpec) -> int:
        cap = self.settings.max_steps
        if spec.max_steps is not None and spec.max_steps > cap:
            raise RequestError(f"max_steps may be at most {cap} on this gateway, got {spec.max_steps}",
                               code="invalid_request", status=422, field="max_steps")
        return spec.max_steps or cap

    def _observe_attempt(self, attempt: Attempt) -> None:
        self.metrics.route_attempts.labels(attempt.target, attempt.outcome).inc()

    def _observe_tool(self, tool: str, outcome: str) -> None:
        self.metrics.tool_executions.labels(tool, outcome).inc()

    def build_gate(self, spec: RunSpec) -> Gate | None:
        """The run's validation gate: operator validators always, the request's added; None
        (a pass-through, no added latency) when there are none."""
        return build_gate(
            request_specs=spec.validators, operator_specs=[*self.settings.validators, *spec.policy_validators],
            chunking=spec.chunking or self.settings.default_chunking, tools=spec.tools,
            judge=self.judge, observer=self.metrics.observe_check,
        )

    async def judge(self, model: str, prompt: str) -> str:
        """One short, deterministic completion from `provider/model` or a route (the llm_judge backend)."""
        session = self.router.session(model)
        request = ProviderRequest(model=session.primary.upstream_model, messages=(Message(role="user", content=prompt),),
                                  temperature=0.0, max_tokens=256)
        stream = await session.open_stream(request)
        assert session.served is not None
        acc = Accumulator(model=session.served.upstream_model, provider=session.served.provider)
        final = await drive(stream, acc)
        if final.error is not None:
            raise UpstreamError(f"judge {model}: {final.error['message']}", code=final.error["code"],
                                retryable=final.error["retryable"])
        return final.message.content

    def spawn(self, run: Run) -> None:
        """Run in the background, for subscribers only (POST /v1/generate with stream: true)."""
        task = asyncio.get_running_loop().create_task(self._detached(run), name=f"run-{run.stream_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _detached(self, run: Run) -> None:
        try:
            await run.drain()
        finally:  # the request's own log line was written with the 202
            fields = run.report.log_fields() if run.report is not None else {"stream_id": run.stream_id}
            self.log.info("background_stream", request_id=run.plan.request_id, model=run.model,
                          provider=run.provider, **fields)

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.registry.aclose()
        await self.tools.aclose()
