"""Opening a run: from a request checked at the edge to a `Run` whose upstream reached its first content.

Everything that can fail before the first event happens here (provider options, the step cap,
the gateway's tools, the validators, the upstream request through the run's route, the stream
log) and raises `GatewayError`, which the API answers as an HTTP error. A route whose every
attempt failed (or was cancelled) before its first content is still reported to the observers,
so the run records list it with its attempts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from app.accounting import PriceBook
from app.cache.config import CacheChoice
from app.cache.replay import ReplayRun, ReplaySource
from app.core.ending import RunEnding
from app.core.errors import ErrorData, FinalStatus, GatewayError, RequestError
from app.core.ids import new_stream_id
from app.core.messages import ToolSpec
from app.core.report import RunObserver
from app.core.transcript import Transcript, TranscriptLimits
from app.observability import get_logger
from app.providers.base import ProviderRequest
from app.providers.options import check_provider_options
from app.routing.config import Deadlines
from app.routing.router import RouteSession
from app.run import Run, RunPlan
from app.settings import Settings
from app.streams.errors import RunTags
from app.streams.log import Canceller, StreamLog
from app.streams.protocols import StreamStore
from app.streams.relay import Relay
from app.tools import ToolRegistry
from app.validation import Gate, PassThroughGate, ValidatorSpec

__all__ = ["RunOpener", "RunSpec"]

_PASS_THROUGH = PassThroughGate()
_log = get_logger("foundry.pipeline")


@dataclass(slots=True, frozen=True, kw_only=True)
class RunSpec:
    """A request, checked at the edge: what to ask the provider, and what the gateway does
    around it. Each field has one home: the model call's fields are the `ProviderRequest`'s."""

    request: ProviderRequest
    """Its `model` is as the caller named it (`provider/model` or an alias): the opener resolves
    it and sends the provider its own model name."""
    validators: Sequence[ValidatorSpec] = ()
    chunking: str | None = None
    max_steps: int | None = None
    """Most provider calls when the gateway runs tools; None: the operator's `max_steps`."""
    owner: str | None = None
    """The API key id that starts the run: its stream, transcript and record belong to that key."""
    slot: str | None = None
    """The key's concurrency slot the run holds (app/auth): a replica that claims the run frees it."""
    policy_validators: Sequence[ValidatorSpec] = ()
    """The key's validators: applied like the operator's, on top of them."""
    timeouts: Deadlines | None = None
    """The request's deadline overrides (within the operator's caps)."""
    keep_events: bool = False
    """The stream log keeps the events beside their frames: a reader translates them (a facade)."""
    mcp_filters: tuple[tuple[str, ...], ...] = ()
    """Pattern sets that must each allow an MCP tool it offers (the key's policy, the request's `mcp_tools`)."""
    held: bool = False
    """The response that starts the run reads all of it and owns it: the log keeps every event that
    reader has not taken, and the run waits for it when it lags (app/streams/log.py, `room`)."""
    cache: CacheChoice = CacheChoice()
    """What the caller allows the response cache (app/cache) for this request."""

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        return self.request.tools


GateFactory = Callable[[RunSpec], "Gate | None"]
"""Builds a run's gate; None means no validator applies (a pass-through)."""
AttemptFailed = Callable[[str, str], None]
"""Told (provider, error code) when a route's opening failed."""


class RunOpener:
    def __init__(self, *, settings: Settings, store: StreamStore, tools: ToolRegistry, gate_factory: GateFactory,
                 observers: Sequence[RunObserver], on_failure: AttemptFailed) -> None:
        self.settings = settings
        self.prices = PriceBook(settings.prices, settings.aliases, library=settings.price_library)
        self.store = store
        self.tools = tools
        self.gate_factory = gate_factory
        self.observers = observers
        """The gateway's observers (a live list: observers added later count)."""
        self.on_failure = on_failure
        self.transcript_limits = TranscriptLimits(
            max_chars=settings.transcript_max_chars, max_items=settings.transcript_max_items,
            keep_media_bytes=settings.record_content and settings.record_media_bytes)

    async def open(self, spec: RunSpec, session: RouteSession, *, request_id: str | None,
                   observers: Sequence[RunObserver] = (), replay: ReplaySource | None = None,
                   canceller: Canceller | None = None) -> Run:
        """The run, its upstream at its first content and its log created (with `canceller`, what
        ends the run when its log is cancelled); GatewayError otherwise. With `replay` (app/cache)
        the run reads it instead of an upstream."""
        started, started_at = time.perf_counter(), time.time()
        primary = session.primary
        for provider in {t.provider for t in session.targets}:  # the request's options go to any of them
            check_provider_options(provider, spec.request.options, self.settings.provider_options_allow)
        max_steps = self._max_steps(spec)
        tools = self.tools.for_run(primary.provider, (t.name for t in spec.tools), spec.mcp_filters)
        if tools:  # the gateway's tools are offered with the caller's: the model sees what the gateway runs
            spec = replace(spec, request=replace(spec.request, tools=(*spec.tools, *tools.specs)))
        gate = self.gate_factory(spec) or _PASS_THROUGH
        request = replace(spec.request, model=primary.upstream_model)
        passthrough = request.passthrough
        if passthrough is not None and passthrough.relay and gate.rewrites:  # a redaction needs translation
            request = replace(request, passthrough=replace(passthrough, relay=False))
        if replay is not None:
            plan = RunPlan(model=spec.model if session.route is None else primary.name, provider=primary.provider,
                           adapter=session, request=request, max_steps=max_steps, request_id=request_id,
                           started=started, started_at=started_at, owner=spec.owner,
                           observers=(*self.observers, *observers))
            log = await self._log(spec, plan.model, plan.provider, request_id, canceller)
            return ReplayRun(plan, source=replay, log=log, gate=gate, tools=tools,
                             transcript=self._transcript_of(log, request))
        try:
            upstream = await session.open_stream(request)
        except (GatewayError, asyncio.CancelledError) as exc:
            self._not_opened(spec, session, request, exc, started, started_at, request_id)
            raise
        served = session.served
        assert served is not None
        # `start` and `final` name what served: a route's target, or the model as asked
        model = served.name if session.route is not None else spec.model
        try:
            log = await self._log(spec, model, served.provider, request_id, canceller)
        except BaseException:
            await upstream.aclose()  # no stream, no run: nothing stays open
            raise
        transcript = self._transcript_of(log, request)
        plan = RunPlan(model=model, provider=served.provider, adapter=session, request=request, max_steps=max_steps,
                       request_id=request_id, started=started, started_at=started_at, route=session,
                       owner=spec.owner, price=self.prices.rates(model), observers=(*self.observers, *observers))
        relay = Relay() if request.passthrough is not None and request.passthrough.relay else None
        return Run(plan, log=log, upstream=upstream, gate=gate, tools=tools, transcript=transcript, relay=relay)

    def _not_opened(self, spec: RunSpec, session: RouteSession, request: ProviderRequest,
                    exc: GatewayError | asyncio.CancelledError, started: float, started_at: float,
                    request_id: str | None) -> None:
        """No target served (each attempt failed, or the run was cancelled, before its first
        content): the caller gets an HTTP error and no stream exists, but the observers get the
        run's report (run records list it, with its error, attempts and request; the key's usage
        is untouched: nothing was produced)."""
        if isinstance(exc, GatewayError):
            self.on_failure(session.primary.provider, exc.code)
        if not session.attempts:
            return
        status: FinalStatus = "error" if isinstance(exc, GatewayError) else "cancelled"
        error: ErrorData = exc.to_dict() if isinstance(exc, GatewayError) else {
            "code": "cancelled", "message": "the run was cancelled before its first content", "retryable": False}
        last = session.attempts[-1].target
        provider = next((t.provider for t in session.targets if t.name == last), session.primary.provider)
        ending = RunEnding(model=spec.model, provider=provider, request_id=request_id, owner=spec.owner,
                           started=started, started_at=started_at, observers=self.observers)
        final = ending.bare_final(status, error, served_model=request.model, route=session.outcome())
        transcript = self._transcript(request)
        transcript.finish(status=status, stop_reason=final.stop_reason, usage=final.usage, steps=1)
        ending.end(final, stream_id=new_stream_id(), transcript=transcript, logger=_log, opened=False)

    async def _log(self, spec: RunSpec, model: str, provider: str, request_id: str | None,
                   canceller: Canceller | None) -> StreamLog:
        return await self.store.create(model=model, provider=provider, owner=spec.owner, keep_events=spec.keep_events,
                                       held=spec.held, run=RunTags(request_id=request_id, slot=spec.slot),
                                       canceller=canceller)

    def _transcript_of(self, log: StreamLog, request: ProviderRequest) -> Transcript:
        """The run's transcript, kept with its log for the stream's lifetime."""
        transcript = log.info.transcript = self._transcript(request)
        return transcript

    def _transcript(self, request: ProviderRequest) -> Transcript:
        """A run's transcript, the request's messages in it."""
        transcript = Transcript(processors=self.tools.processors, limits=self.transcript_limits)
        transcript.add_request(request.messages)
        return transcript

    def _max_steps(self, spec: RunSpec) -> int:
        cap = self.settings.max_steps
        if spec.max_steps is not None and spec.max_steps > cap:
            raise RequestError(f"max_steps may be at most {cap} on this gateway, got {spec.max_steps}",
                               code="invalid_request", status=422, field="max_steps")
        return spec.max_steps or cap
