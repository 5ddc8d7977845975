"""The Gateway: the composition `create_app` makes of providers, routes, tools, the stream store
and the runs' tasks (app/run_tasks.py), each built whole here from the settings.

A run is one or more *steps* (provider responses). When the model calls tools the gateway runs
(app/tools), the step's calls are executed in parallel, their `tool_result` events go out, the
assistant and tool messages are appended and the provider is called again, up to `max_steps`.
All steps make one stream: one `start`, one sequence of ids and indexes, one validation gate
(built by `Gates`), one `final` whose usage is summed over the steps.

When a run ends, every observer (`Gateway(observers=...)`, `add_observer`, and the request's own)
gets its `RunReport` (app/core/report.py): the seam for run records, usage accounting and metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from app.accounting import PriceBook
from app.cache.service import ResponseCache
from app.core.events import Usage
from app.core.report import RunObserver
from app.lifecycle import Admission
from app.observability import Metrics
from app.opener import GateFactory, RunOpener, RunSpec
from app.providers.base import PatchStream, ProviderRequest
from app.providers.registry import ProviderRegistry
from app.routing.router import Router
from app.routing.targets import Attempt, Policy
from app.run import Run
from app.run_tasks import ClientGone, RunHandle, RunTasks
from app.settings import Settings
from app.streams.protocols import StreamStore
from app.tools import build_tools
from app.tools.mcp_hub import build_hub
from app.tracing import Tracing
from app.validation import Gate, build_gate
from app.validation.judge import JudgeBackend, RunJudge

__all__ = ["ClientGone", "Gate", "Gates", "Gateway", "Run", "RunHandle", "RunObserver", "RunSpec", "RunTasks"]


def routing_policy(settings: Settings) -> Policy:
    return Policy(
        max_retries=settings.upstream_max_retries, backoff=settings.retry_backoff_seconds,
        backoff_max=settings.retry_backoff_max_seconds, retry_after_max=settings.retry_after_max_seconds,
        first_token=settings.first_token_timeout, idle=settings.read_timeout, total=settings.total_timeout,
        max_first_token=settings.max_first_token_timeout, max_idle=settings.max_idle_timeout,
        max_total=settings.max_total_timeout, breaker_failures=settings.breaker_failures,
        breaker_cooldown=settings.breaker_cooldown_seconds, max_unconfigured_targets=settings.max_unconfigured_targets,
    )


class Gates:
    """Each run's validation gate, with the `llm_judge` calls its validators make: sent through
    the router (a provider/model or a route) and priced as any run is."""

    def __init__(self, *, settings: Settings, router: Router, metrics: Metrics, prices: PriceBook,
                 tracing: Tracing | None) -> None:
        self.settings = settings
        self.router = router
        self.metrics = metrics
        self.prices = prices
        self.judge = JudgeBackend(self._judge_stream, span=tracing.judge if tracing is not None else None)

    def build(self, spec: RunSpec) -> Gate | None:
        """The run's validation gate: operator validators always, the request's added; None
        (a pass-through, no added latency) when there are none."""
        settings = self.settings
        judge = RunJudge(self.judge, max_calls=settings.judge_max_calls, concurrency=settings.judge_concurrency,
                         price=self._judge_cost)
        return build_gate(
            request_specs=spec.validators, operator_specs=[*settings.validators, *spec.policy_validators],
            chunking=spec.chunking or settings.default_chunking, tools=spec.tools,
            judge=judge, observer=self.metrics.observe_check, max_pending=settings.judge_concurrency,
            judge_usage=judge.lines,
        )

    async def _judge_stream(self, request: ProviderRequest) -> PatchStream:
        """The judge's stream: `request.model` through the router (a provider/model or a route)."""
        session = self.router.session(request.model)
        return await session.open_stream(replace(request, model=session.primary.upstream_model))

    def _judge_cost(self, model: str, usage: Usage) -> float | None:
        """A judge call's cost (the operator's price or the library's, by the model or its alias's target)."""
        rates = self.prices.rates(model)
        return rates.of(usage).total_usd if rates is not None else None


class Gateway:
    """The service behind the HTTP API: providers, routes, tools, the stream store, the gates and
    the runs' tasks (`runs`: start a run there)."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: ProviderRegistry,
        store: StreamStore,
        metrics: Metrics,
        gate_factory: GateFactory | None = None,
        observers: Iterable[RunObserver] = (),
        tracing: Tracing | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.tracing = tracing
        self.registry = registry
        self.store = store
        self.metrics = metrics
        self.tools = build_tools(settings.tools, observer=self._observe_tool, max_output_chars=settings.tool_max_output_chars,
                                 mcp=build_hub(settings.mcp_servers), tracing=tracing)
        self.observers: list[RunObserver] = list(observers)
        self.router = Router(registry=registry, routes=settings.routes, policy=routing_policy(settings),
                             observer=self._observe_attempt, tracing=tracing)
        self.gates = Gates(settings=settings, router=self.router, metrics=metrics, tracing=tracing,
                           prices=PriceBook(settings.prices, settings.aliases, library=settings.price_library))
        self.opener = RunOpener(settings=settings, store=store, tools=self.tools,
                                gate_factory=gate_factory or self.gates.build, observers=self.observers,
                                on_failure=lambda provider, code: metrics.child(metrics.upstream_errors, provider, code).inc())
        self.admission = Admission(max_active=settings.max_active_runs, max_lag=settings.max_loop_lag_seconds or None,
                                   on_refuse=lambda reason: metrics.child(metrics.admission_refused, reason).inc())
        self.runs = RunTasks(router=self.router, opener=self.opener, admission=self.admission, tools=self.tools,
                             cache=cache, tracing=tracing)
        metrics.watch_circuits(self.router.breakers.states)
        metrics.active_runs.set_function(lambda: len(self.admission.active))
        metrics.max_active_runs.set(settings.max_active_runs)

    def add_observer(self, observer: RunObserver) -> None:
        """Call `observer(report)` when each later run ends (app/core/report.py)."""
        self.observers.append(observer)

    def start(self, spec: RunSpec, *, request_id: str | None = None,
              observers: Sequence[RunObserver] = ()) -> RunHandle:
        """Start a run (`RunTasks.start`): the service's one verb, kept on it for embedders."""
        return self.runs.start(spec, request_id=request_id, observers=observers)

    def _observe_tool(self, tool: str, outcome: str) -> None:
        self.metrics.child(self.metrics.tool_executions, tool, outcome).inc()

    def _observe_attempt(self, attempt: Attempt) -> None:
        label = self.metrics.target_label(attempt.target, configured=self.router.is_configured(attempt.target),
                                          served=attempt.outcome == "ok")
        self.metrics.child(self.metrics.route_attempts, label, attempt.outcome).inc()
        if attempt.outcome != "skipped":
            self.metrics.observe_attempt(attempt.target.partition("/")[0], attempt.outcome, attempt.duration_ms / 1000)

    async def aclose(self) -> None:
        """End every run still going (a shutdown final each), then the providers and tools."""
        await self.runs.aclose()
        await self.registry.aclose()
        await self.tools.aclose()
        if self.cache is not None:
            await self.cache.aclose()
