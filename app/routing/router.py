"""Routes at run time: which targets a request may go to, and the opener that gets one of them to
its first content with retries, fallback and hedging (DESIGN.md section 6: before release only).

`Router.session(model, deadlines)` resolves a route name (or a plain `provider/model`, a route of
one target) into a `RouteSession`, one per run. `RouteSession.open_stream(request)` is the
pipeline's seam, shaped as `ProviderAdapter.open_stream`: it tries targets until one has produced
its first content patch (text, reasoning or a tool call) and returns a `RoutedStream` that replays
what was read and goes on with that upstream. Everything before that first content can be retried
or taken over by another target, since nothing of it reached the client; after it, a failure ends
the run with one honest `final{status: "error"}` (the stream raises, the run reports).

Steps after the first (tool loops) go to the target that served the first: retried on failure,
never switched to another model mid-conversation.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamBadRequest,
)
from app.core.patches import Patch
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest
from app.providers.registry import ProviderRegistry
from app.routing import verdicts
from app.routing.breaker import Breaker, Breakers, BreakerState
from app.routing.config import Deadlines, RouteConfig, flatten_targets
from app.routing.errors import CircuitOpen, DeadlineExceeded
from app.routing.strategies import Opened, TargetFailed, hedged, in_order
from app.routing.stream import RoutedStream, close_upstream
from app.routing.targets import Attempt, Outcome, Policy, RouteOutcome, Target
from app.tracing import Tracing

__all__ = ["RouteConfigError", "RouteSession", "Router", "check_routes"]

class RouteConfigError(ValueError):
    """A route names something this gateway does not serve (raised when the app starts)."""


def check_routes(routes: dict[str, RouteConfig], registry: ProviderRegistry) -> None:
    """Every target of every route resolves to a served provider (at start: a clear config error)."""
    for name, route in routes.items():
        for i, target in enumerate(route.targets):
            if target.model in routes:
                continue
            try:
                registry.resolve(target.model)
            except RequestError as exc:
                raise RouteConfigError(f"routes.{name}.targets.{i}.model: {exc.message}") from None


class Router:
    def __init__(self, *, registry: ProviderRegistry, routes: dict[str, RouteConfig], policy: Policy,
                 rng: random.Random | None = None, observer: Callable[[Attempt], None] | None = None,
                 tracing: Tracing | None = None) -> None:
        check_routes(routes, registry)
        self.registry = registry
        self.routes = routes
        self.policy = policy
        self._targets = {name: tuple(self._target(t.model, t.weight, t.options) for t in flatten_targets(routes, name))
                         for name in routes}
        configured = {*(t.name for ts in self._targets.values() for t in ts), *self._aliased()}
        self.breakers = Breakers(failures=policy.breaker_failures, cooldown=policy.breaker_cooldown,
                                 configured=configured, max_others=policy.max_unconfigured_targets)
        self.rng = rng or random.Random()
        self.observer = observer
        """Called with each finished attempt (metrics)."""
        self.tracing = tracing
        """Each attempt in a span of its own, whose context the upstream receives (app/tracing.py)."""

    def _aliased(self) -> list[str]:
        """The targets the operator's aliases name (served providers only)."""
        out = []
        for alias in self.registry.aliases:
            try:
                out.append(self._target(alias).name)
            except RequestError:
                continue
        return out

    def is_configured(self, target: str) -> bool:
        """A target the operator named (a route's or an alias's): its own breaker and metric label."""
        return target in self.breakers.configured

    def _target(self, model: str, weight: float = 1.0, options: dict[str, Any] | None = None) -> Target:
        adapter, provider, upstream_model = self.registry.resolve(model)
        return Target(name=f"{provider}/{upstream_model}", provider=provider, upstream_model=upstream_model,
                      adapter=adapter, weight=weight, options=dict(options or {}))

    def session(self, model: str, deadlines: Deadlines | None = None) -> RouteSession:
        """The run's route: raises RequestError (404/422) for an unknown model or deadlines out of range."""
        route = self.routes.get(model)
        if route is not None:
            targets = self._targets[model]
        else:
            targets = (self._target(model),)  # a plain provider/model: a route of one
        policy = self.policy
        first_token = self._deadline(deadlines, "first_token", route.first_token_timeout if route else None,
                                     policy.first_token, policy.max_first_token)
        idle = self._deadline(deadlines, "idle", route.idle_timeout if route else None, policy.idle, policy.max_idle)
        total = self._deadline(deadlines, "total", route.total_timeout if route else None, policy.total,
                               policy.max_total)
        return RouteSession(
            router=self, route=model if route is not None else None, targets=self._order(route, targets),
            hedge_after=route.hedge_after_ms / 1000 if route is not None and route.hedge_after_ms else None,
            max_retries=route.max_retries if route is not None and route.max_retries is not None else policy.max_retries,
            first_token=first_token, idle=idle, total=total,
        )

    @staticmethod
    def _deadline(deadlines: Deadlines | None, name: str, route_value: float | None, default: float,
                  cap: float) -> float:
        value = getattr(deadlines, name) if deadlines is not None else None
        if value is not None and value > cap:
            raise RequestError(f"timeouts.{name} may be at most {cap:g} s on this gateway, got {value:g}",
                               code="invalid_request", status=422, field=f"timeouts.{name}")
        return value or route_value or default

    def _order(self, route: RouteConfig | None, targets: Sequence[Target]) -> tuple[Target, ...]:
        if route is None or route.strategy == "fallback" or len(targets) < 2:
            return tuple(targets)
        # weighted: draw without replacement by weight; the later draws are the fallbacks
        left, order = list(targets), []
        while left:
            pick = self.rng.choices(range(len(left)), weights=[t.weight for t in left])[0]
            order.append(left.pop(pick))
        return tuple(order)

    def failed_late(self, target: Target, exc: GatewayError) -> None:
        """A serving upstream failed after its first content: no fallback, but its breaker counts it.
        The router's, not the session's: a stream holding its session would make a reference cycle
        (freed only by the garbage collector, with the run's whole graph)."""
        if verdicts.breaks(exc):
            self.breakers[target.name].failure()

    def readiness(self) -> dict[str, BreakerState]:
        return self.breakers.states()

    def backoff(self, retry: int) -> float:
        """Exponential, with equal jitter: between half and all of base * 2**(retry-1), capped."""
        ceiling = min(self.policy.backoff_max, self.policy.backoff * (2 ** (retry - 1)))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)


class RouteSession(ProviderAdapter):
    """One run's route: its targets, deadlines, attempts and the target that served. A
    `ProviderAdapter` to the run: each step opens through it."""

    def __init__(self, *, router: Router, route: str | None, targets: tuple[Target, ...], hedge_after: float | None,
                 max_retries: int, first_token: float, idle: float, total: float) -> None:
        self.router = router
        self.route = route
        self.name = route or targets[0].provider
        self.targets = targets
        self.hedge_after = hedge_after
        self.max_retries = max_retries
        self.first_token = first_token
        self.idle = idle
        self.total = total
        self.total_at = asyncio.get_running_loop().time() + total
        self.attempts: list[Attempt] = []
        self.served: Target | None = None
        self.step = 0
        self.current: RoutedStream | None = None

    def ready(self) -> bool:
        return True

    @property
    def primary(self) -> Target:
        return self.targets[0]

    # -- the seam ------------------------------------------------------------------------------

    async def open_stream(self, request: ProviderRequest) -> RoutedStream:
        """`ProviderAdapter.open_stream`, routed: the first target to reach content, its stream."""
        self.step += 1
        if asyncio.get_running_loop().time() >= self.total_at:
            raise DeadlineExceeded("total", self.total)
        opened = await self._first_to_serve(request)
        self.served = target = opened.target
        stream = RoutedStream(upstream=opened.upstream, iterator=opened.iterator, buffered=opened.buffered,
                              ended=opened.ended, failure=opened.failure, idle=self.idle, total=self.total,
                              total_at=self.total_at, on_failure=functools.partial(self.router.failed_late, target))
        self.current = stream
        return stream

    async def _first_to_serve(self, request: ProviderRequest) -> Opened:
        chain = functools.partial(self._chain, request=request)
        try:
            if self.served is not None:  # a later step: the target that answered so far
                return await chain(self.served)
            if self.hedge_after is not None:
                return await hedged(self.targets, chain, hedge_after=self.hedge_after, discard=self._discard)
            return await in_order(self.targets, chain)
        except TargetFailed as failed:
            # The strategy's frames (the failure's traceback) hold the failure, and an error raised in
            # this block would hold it as its context: either is a reference cycle, freed only by the
            # garbage collector with the run's whole graph. The error and its attempts tell what happened.
            failed.__traceback__ = None
            error = failed.error
        raise self._with_attempts(error) from None

    def outcome(self) -> RouteOutcome:
        """What the final tells of the route: its attempts, and for a named route its name and the
        target that served."""
        served = self.served.name if self.route is not None and self.served is not None else None
        return RouteOutcome(attempts=tuple(a.to_dict() for a in self.attempts), route=self.route, target=served)

    # -- one target --------------------------------------------------------------------------------

    def _with_attempts(self, error: GatewayError) -> GatewayError:
        error.attempts = tuple(a.to_dict() for a in self.attempts)
        return error

    async def _discard(self, opened: Opened) -> None:
        """A hedge that reached content too late: its attempt counts as cancelled, its upstream closed."""
        for attempt in reversed(self.attempts):
            if attempt.target == opened.target.name and attempt.outcome == "ok":
                attempt.outcome = "cancelled"
                break
        await _close(opened.upstream, opened.iterator)

    async def _chain(self, target: Target, *, request: ProviderRequest) -> Opened:
        """One target, retried with backoff while retrying can help."""
        router = self.router
        breaker = router.breakers.get(target.name)  # none yet: closed (made on the first verdict)
        if breaker is not None and not breaker.allow():
            self._record(Attempt(target=target.name, step=self.step, outcome="skipped", code="circuit_open"))
            retry_in = breaker.retry_in()
            raise TargetFailed(CircuitOpen(f"{target.name}: skipped while its circuit is open",
                                            provider=target.provider, retry_after=f"{max(1, round(retry_in))}"),
                                stop=False)
        loop = asyncio.get_running_loop()
        tries = 0
        while True:
            try:
                opened = await self._try(target, request)
            except GatewayError as exc:
                verdict = verdicts.verdict(exc)
                breaker = self._judged(target, breaker, exc)
                if verdict == "stop":
                    raise TargetFailed(exc, stop=True) from None
                if verdict != "retry" or tries >= self.max_retries or (breaker is not None and breaker.state == "open"):
                    raise TargetFailed(exc, stop=False) from None
                tries += 1
                delay = router.backoff(tries)
                wait = verdicts.retry_after_seconds(exc.retry_after)
                if wait is not None:
                    if wait > router.policy.retry_after_max:
                        raise TargetFailed(exc, stop=False) from None  # a long wait: move on instead
                    delay = max(delay, wait)
                if loop.time() + delay >= self.total_at:
                    raise TargetFailed(exc, stop=False) from None
                await asyncio.sleep(delay)
                continue
            except BaseException:
                if breaker is not None:
                    breaker.release()
                raise
            router.breakers[target.name].success()  # it served: its breaker (and label) exist from now
            return opened

    def _judged(self, target: Target, breaker: Breaker | None, exc: GatewayError) -> Breaker | None:
        """Count a failure toward the target's breaker (made now if missing) when it is the
        target's own; else only give back a probe slot the attempt held."""
        if verdicts.breaks(exc):
            breaker = self.router.breakers[target.name]
            breaker.failure()
        elif breaker is not None:
            breaker.release()
        return breaker

    async def _try(self, target: Target, request: ProviderRequest) -> Opened:
        """Open the target and read until its first content patch (or its end); traced, in the
        attempt's span, whose context goes upstream (W3C `traceparent`)."""
        attempt = Attempt(target=target.name, step=self.step)
        self.attempts.append(attempt)
        tracing = self.router.tracing
        if tracing is None:
            return await self._attempt(target, request, attempt)
        with tracing.attempt(provider=target.provider, model=target.upstream_model, target=target.name,
                             step=self.step) as span:
            try:
                return await self._attempt(target, replace(request, trace_headers=tracing.headers(span)), attempt)
            finally:
                tracing.end_attempt(span, outcome=attempt.outcome, code=attempt.code, status=attempt.status)

    async def _attempt(self, target: Target, request: ProviderRequest, attempt: Attempt) -> Opened:
        loop = asyncio.get_running_loop()
        first_token_at = loop.time() + self.first_token
        # timed on the process clock: uvloop's `loop.time()` is libuv's, whole milliseconds read once
        # per loop turn, and read 0.000 for an upstream that answers within a millisecond
        started = time.perf_counter()
        upstream: PatchStream | None = None
        iterator: Any = None
        buffered: list[list[Patch]] = []
        options = {**target.options, **request.options} if target.options else request.options
        # a relayed provider event goes to the client as it comes: the first one ends the opening
        relaying = request.passthrough is not None and request.passthrough.relay
        try:
            async with asyncio.timeout_at(min(first_token_at, self.total_at)):
                if request.model != target.upstream_model or options is not request.options:
                    request = replace(request, model=target.upstream_model, options=options)
                upstream = await target.adapter.open_stream(request)
                iterator = upstream.__aiter__()
                ended = False
                while True:
                    try:
                        batch = await iterator.__anext__()
                    except StopAsyncIteration:
                        ended = True
                        break
                    except Exception as exc:  # sorted just below
                        if isinstance(exc, GatewayError) and (verdicts.verdict(exc) != "stop"
                                                              or isinstance(exc, UpstreamBadRequest)):
                            raise  # the provider refused the request before any output: its 400 answers
                        # served, with a failure to report after `start` (not the target's fault)
                        self._finish(attempt, started, "error",
                                     exc if isinstance(exc, GatewayError) else None)
                        return Opened(target, upstream, iterator, buffered, True, exc)
                    buffered.append(batch)
                    if verdicts.has_content(batch) or (relaying and verdicts.has_relay(batch)):
                        break
        except TimeoutError:
            await _close(upstream, iterator)
            error: GatewayError = (DeadlineExceeded("first_token", self.first_token, provider=target.provider)
                                   if loop.time() < self.total_at else DeadlineExceeded("total", self.total))
            self._finish(attempt, started, "timeout", error)
            raise error from None
        except GatewayError as exc:
            await _close(upstream, iterator)
            self._finish(attempt, started, verdicts.outcome(exc), exc)
            raise
        except BaseException:
            await _close(upstream, iterator)
            self._finish(attempt, started, "cancelled", None)
            raise
        self._finish(attempt, started, "ok", None)
        return Opened(target, upstream, iterator, buffered, ended)

    def _finish(self, attempt: Attempt, started: float, outcome: Outcome, error: GatewayError | None) -> None:
        attempt.outcome = outcome
        attempt.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        if error is not None:
            attempt.code = error.code
            attempt.status = error.upstream_status
        if self.router.observer is not None:
            self.router.observer(attempt)

    def _record(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        if self.router.observer is not None:
            self.router.observer(attempt)


async def _close(upstream: PatchStream | None, iterator: Any) -> None:
    """Close an abandoned attempt's upstream request, even while being cancelled."""
    if upstream is not None:
        await asyncio.shield(close_upstream(upstream, iterator))
