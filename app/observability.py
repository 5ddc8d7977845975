"""Structured logs (structlog, one JSON line per request) and Prometheus metrics.

Metrics live in a registry per app instance, so several apps (tests) never collide.
Logs never carry message content or secrets: only ids, model, status, timings and token counts.
One log pipeline: structlog's lines and the standard library's (uvicorn, SQLAlchemy, Alembic)
all leave through one handler and structlog's `ProcessorFormatter`, so every line gets the same
shape and the same scrubbing of secrets (`logging_config()` is also uvicorn's `log_config`).
"""

from __future__ import annotations

import logging
import logging.config
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from app.core.report import RunReport
from app.core.secrets import scrub

__all__ = ["BoundedLabels", "Metrics", "configure_logging", "get_logger"]

_NOT_UPSTREAM = frozenset({"internal_error", "shutdown", "key_revoked"})
"""Error codes of a run's final that are the gateway's, not the upstream's."""
_TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_CHECK_BUCKETS = (0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5)
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TOKEN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)
_USAGE_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
"""The GenAI conventions' advice for time per output token and token usage."""


def json_by_default() -> bool:
    """JSON lines unless stdout is a terminal (a person reading): files and collectors get JSON."""
    return not sys.stdout.isatty()


def logging_config(level: str = "info", json: bool | None = None) -> dict[str, Any]:
    """The `logging.config.dictConfig` of the process: root, uvicorn's, SQLAlchemy's and Alembic's
    loggers into one stdout handler whose formatter renders and scrubs like structlog's own lines."""
    json = json_by_default() if json is None else json
    renderer: Any = (structlog.processors.JSONRenderer() if json
                     else structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty()))
    formatter = {
        "()": structlog.stdlib.ProcessorFormatter,
        "foreign_pre_chain": [structlog.stdlib.add_logger_name, *_shared_processors()],
        "processors": [structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                       structlog.processors.format_exc_info, renderer, _scrub_line],
    }
    upper = level.upper()
    quiet = "WARNING" if upper in ("DEBUG", "INFO") else upper  # the libraries' info lines are SQL and migrations
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"foundry": formatter},
        "handlers": {"foundry": {"class": "logging.StreamHandler", "formatter": "foundry", "stream": "ext://sys.stdout"}},
        "root": {"handlers": ["foundry"], "level": upper},
        "loggers": {
            **{name: {"handlers": [], "level": upper, "propagate": True}
               for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
            **{name: {"handlers": [], "level": quiet, "propagate": True} for name in ("sqlalchemy", "alembic")},
        },
    }


def _shared_processors() -> list[Any]:
    return [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True)]


def configure_logging(level: str = "info", json: bool | None = None) -> None:
    """Configure structlog and the standard library's logging for the process (called by
    create_app and the command line, never at import)."""
    logging.config.dictConfig(logging_config(level, json))
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *_shared_processors(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def _scrub_line(logger: Any, method: str, line: Any) -> Any:
    """The last processor: no configured secret or key-shaped token leaves in a log line."""
    return scrub(line) if isinstance(line, str) else line


def get_logger(name: str = "foundry") -> Any:
    return structlog.get_logger(name)


MAX_KEY_LABELS = 200
MAX_MODEL_LABELS = 50
"""Models that no configuration names, as labels: the first ones that served runs; past it, `other`."""


class BoundedLabels:
    """Label values from outside (model and key names) kept to a bounded set: the `known` ones
    (named in the configuration) always, then the first `cap` others seen; the rest count as `other`."""

    __slots__ = ("_cap", "_known", "_seen")

    def __init__(self, known: Iterable[str], cap: int) -> None:
        self._known = frozenset(known)
        self._seen: set[str] = set()
        self._cap = cap

    def label(self, value: str, *, admit: bool = True) -> str:
        """`value`'s label; with `admit` false a value not yet seen is not taken in (`other`)."""
        if value in self._known or value in self._seen:
            return value
        if not admit or len(self._seen) >= self._cap:
            return "other"
        self._seen.add(value)
        return value


_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


class Metrics:
    def __init__(self, known_models: Iterable[str] = (), max_targets: int = 256) -> None:
        """`known_models`: the models the configuration names (routes, their targets, aliases,
        prices), always their own label value; `max_targets`: how many unconfigured targets get
        one of their own (FOUNDRY_MAX_UNCONFIGURED_TARGETS)."""
        # No `_created` series: a start time beside every labelled counter and histogram doubles
        # the exposition and no dashboard reads it (process-wide, as prometheus-client offers it).
        disable_created_metrics()
        self.registry = CollectorRegistry()
        r = self.registry
        self._children: dict[tuple[object, ...], Any] = {}
        self.requests = Counter("foundry_requests", "HTTP requests by route and status.", ["route", "method", "status"],
                                registry=r)
        self._run_histograms(r)
        self.models = BoundedLabels(known_models, MAX_MODEL_LABELS)
        self.active_runs = Gauge("foundry_active_runs", "Runs in progress.", registry=r)
        self._capacity_metrics(r)
        self.events = Counter("foundry_events", "Canonical events released, by type.", ["type"], registry=r)
        self.upstream_errors = Counter("foundry_upstream_errors", "Upstream failures by provider and code.",
                                       ["provider", "code"], registry=r)
        self.runs_finished = Counter("foundry_runs_finished", "Runs ended, by provider and final status.",
                                     ["provider", "status"], registry=r)
        self.validator_verdicts = Counter("foundry_validator_verdicts", "Validator verdicts by phase (chunk, "
                                          "tool_call, final) and outcome.", ["validator", "phase", "outcome"],
                                          registry=r)
        self.validator_seconds = Histogram("foundry_validator_check_seconds", "Duration of one validator check.",
                                           ["validator", "phase"], buckets=_CHECK_BUCKETS, registry=r)
        self._store_metrics(r)
        self.tool_executions = Counter("foundry_tool_executions", "Gateway-executed tool calls by tool and outcome.",
                                       ["tool", "outcome"], registry=r)
        self.upstream_ignored = Counter("foundry_upstream_ignored", "Upstream stream parts ignored as harmless "
                                        "(e.g. an unexpected delta kind for its block), by provider and kind.",
                                        ["provider", "what"], registry=r)
        self.records_written = Counter("foundry_records_written", "Run records written to the database.",
                                       registry=r)
        self.records_dropped = Counter("foundry_records_dropped", "Run records not written, by reason (queue_full, "
                                       "write_failed, shutting_down; rejected: refused by the database, kept in "
                                       "run_rejects).", ["reason"], registry=r)
        self.key_requests = Counter("foundry_key_requests", "Admission decisions by key name and outcome "
                                    "(admitted, model_denied, limited_*, budget_exceeded).", ["key", "outcome"],
                                    registry=r)
        self.key_runs = Counter("foundry_key_runs", "Finished runs by key name and final status.",
                                ["key", "status"], registry=r)
        self.key_tokens = Counter("foundry_key_tokens", "Tokens used by key name.", ["key"], registry=r)
        self.key_cost = Counter("foundry_key_cost_usd", "Spend in USD by key name (priced models).", ["key"],
                                registry=r)
        self._key_names = BoundedLabels((), MAX_KEY_LABELS)
        self.targets = BoundedLabels((), max_targets)
        """Unconfigured targets with their own label value (FOUNDRY_MAX_UNCONFIGURED_TARGETS)."""
        self.route_attempts = Counter("foundry_route_attempts", "Upstream attempts before the first content, by "
                                      "target and outcome (ok, error, timeout, rate_limited, skipped, cancelled).",
                                      ["target", "outcome"], registry=r)

    def _store_metrics(self, r: CollectorRegistry) -> None:
        """The stream store's and the response cache's (app/cache)."""
        self.streams_evicted = Counter("foundry_streams_evicted", "Finished streams evicted before their TTL, by "
                                       "reason (budget: the store's byte budget; streams: its stream cap).",
                                       ["reason"], registry=r)
        self.store_bytes = Gauge("foundry_store_bytes", "Encoded bytes retained by the stream store.", registry=r)
        self.cache_hits = Counter("foundry_cache_hits", "Requests the response cache answered, by source (stored, "
                                  "in_flight: an identical run followed).", ["source"], registry=r)
        self.cache_misses = Counter("foundry_cache_misses", "Cache lookups that found no usable answer, by reason "
                                    "(absent, corrupt).", ["reason"], registry=r)
        self.cache_bytes = Gauge("foundry_cache_bytes", "Bytes of cached answers held (memory) or written by this "
                                 "replica (Redis).", registry=r)
        self.store_errors = Counter("foundry_store_errors", "Stream store operations that failed, by store and "
                                    "operation (create, write, read, lease, cancel, claim, ping, buffer_full, sweep, outbox).",
                                    ["store", "op"], registry=r)
        self.store_seconds = Histogram("foundry_store_seconds", "Duration of one stream store operation (a "
                                       "pipelined write carries many events).", ["store", "op"],
                                       buckets=_CHECK_BUCKETS, registry=r)

    def _capacity_metrics(self, r: CollectorRegistry) -> None:
        """Admission by the process's own measured load, and where the time to the first byte went."""
        self.max_active_runs = Gauge("foundry_max_active_runs", "Runs this replica admits at once "
                                     "(FOUNDRY_MAX_ACTIVE_RUNS): saturation is foundry_active_runs over it.",
                                     registry=r)
        self.admission_refused = Counter("foundry_admission_refused", "Runs refused at admission (503 before "
                                         "they started), by reason (active_runs, loop_lag, draining).", ["reason"],
                                         registry=r)
        self.loop_lag = Gauge("foundry_event_loop_lag_seconds", "How late the event loop last woke a timer "
                              "(its own measured load; FOUNDRY_MAX_LOOP_LAG_SECONDS bounds admission).", registry=r)
        self.first_byte = Histogram("foundry_first_byte_seconds", "Time from a request to its answer's first "
                                    "byte, split by part: gateway (its own) and upstream (the provider's, to its "
                                    "first content); the Server-Timing header's split.", ["route", "part"],
                                    buckets=_TTFT_BUCKETS, registry=r)

    def _run_histograms(self, r: CollectorRegistry) -> None:
        # The GenAI metric conventions' names (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/),
        # by provider and model; models are bounded labels (`models`)
        self.ttft = Histogram("gen_ai_server_time_to_first_token_seconds", "Time from a run's request to its first "
                              "released content event.", ["provider", "model"], buckets=_TTFT_BUCKETS, registry=r)
        self.time_per_token = Histogram("gen_ai_server_time_per_output_token_seconds", "Time per output token of a "
                                        "run after its first (its inter-token time), runs ended ok with two tokens "
                                        "or more.", ["provider", "model"], buckets=_TOKEN_BUCKETS, registry=r)
        self.run_duration = Histogram("gen_ai_server_request_duration_seconds", "Duration of a run, request to "
                                      "final, by final status.", ["provider", "model", "status"],
                                      buckets=_DURATION_BUCKETS, registry=r)
        self.token_usage = Histogram("gen_ai_client_token_usage", "Tokens of a run, by type (input, output).",
                                     ["provider", "model", "type"], buckets=_USAGE_BUCKETS, registry=r)
        self.attempt_seconds = Histogram("foundry_upstream_attempt_seconds", "Duration of one upstream attempt of "
                                         "a run, request to its first content or failure, by outcome.",
                                         ["provider", "outcome"], buckets=_TTFT_BUCKETS, registry=r)

    def watch_circuits(self, states: Callable[[], Mapping[str, str]]) -> None:
        """Expose the circuit breakers' states (read at scrape time): 0 closed, 1 half open, 2 open."""
        self.registry.register(_CircuitCollector(states))

    def child(self, metric: _Metric, *values: str) -> _Metric:
        """`metric.labels(*values)`, kept: prometheus-client converts, checks and locks on every
        `labels()` call (2.7 us measured, about 13 calls a short request), and the child it returns
        for the same values never changes (the gateway removes none). As many as the metric's own
        children: every label here is bounded (`BoundedLabels`, configured names, fixed sets)."""
        key = (metric, *values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def observe_run(self, report: RunReport) -> None:
        """A run's metrics, read from its report when it ended (the gateway's observer): counted
        per run, never per event. A run no target served was counted where it failed."""
        if not report.opened:
            return
        provider, status, child = report.provider, report.status, self.child
        for event_type, n in report.event_counts.items():
            child(self.events, event_type).inc(n)
        for what, n in report.ignored.items():
            child(self.upstream_ignored, provider, what).inc(n)
            _ignored_log.debug("upstream_ignored", stream_id=report.stream_id, what=what, count=n)
        if status == "error" and report.error is not None and report.error["code"] not in _NOT_UPSTREAM:
            child(self.upstream_errors, provider, report.error["code"]).inc()
        child(self.runs_finished, provider, status).inc()
        model = self.models.label(report.model)
        child(self.run_duration, provider, model, status).observe(report.duration)
        usage = report.usage
        child(self.token_usage, provider, model, "input").observe(usage.input_tokens)
        if not usage.output_unknown:
            child(self.token_usage, provider, model, "output").observe(usage.output_tokens)
        if report.ttft is not None:
            child(self.ttft, provider, model).observe(report.ttft)
            if status == "ok" and usage.output_tokens > 1:
                per_token = (report.duration - report.ttft) / (usage.output_tokens - 1)
                child(self.time_per_token, provider, model).observe(per_token)

    def observe_attempt(self, provider: str, outcome: str, seconds: float) -> None:
        """The router's observer: one call per upstream attempt (never per event)."""
        self.child(self.attempt_seconds, provider, outcome).observe(seconds)

    def observe_check(self, validator: str, phase: str, outcome: str, seconds: float) -> None:
        """The validation gate's observer: one call per validator check."""
        self.child(self.validator_verdicts, validator, phase, outcome).inc()
        self.child(self.validator_seconds, validator, phase).observe(seconds)

    def observe_store(self, store: str, op: str, seconds: float, failed: bool) -> None:
        """The stream store's observer: one call per store operation (never per event)."""
        if failed:
            self.child(self.store_errors, store, op).inc()
        else:
            self.child(self.store_seconds, store, op).observe(seconds)

    def key_label(self, name: str) -> str:
        """Key names as labels, bounded: past MAX_KEY_LABELS distinct names the rest count as `other`."""
        return self._key_names.label(name)

    def target_label(self, target: str, *, configured: bool, served: bool) -> str:
        """Targets (`provider/model`) as labels, bounded: a configured one (route, alias) is always
        its own; another gets its own once it served, up to `targets`' cap; the rest: `other`."""
        return target if configured else self.targets.label(target, admit=served)

    def count_dropped_records(self, reason: str, n: int) -> None:
        """The records writers' and the tool-call log's `on_drop`."""
        self.child(self.records_dropped, reason).inc(n)

    def count_key_outcome(self, name: str, outcome: str) -> None:
        self.child(self.key_requests, self.key_label(name), outcome).inc()

    def count_key_run(self, name: str, status: str, tokens: int, cost_usd: float | None) -> None:
        label = self.key_label(name)
        self.child(self.key_runs, label, status).inc()
        if tokens:
            self.child(self.key_tokens, label).inc(tokens)
        if cost_usd:
            self.child(self.key_cost, label).inc(cost_usd)

    def render(self) -> bytes:
        return generate_latest(self.registry)


_CIRCUIT_VALUES = {"closed": 0, "half_open": 1, "open": 2}


class _CircuitCollector(Collector):
    def __init__(self, states: Callable[[], Mapping[str, str]]) -> None:
        self._states = states

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("foundry_circuit_state", "Circuit breaker per target: 0 closed, 1 half open, "
                                   "2 open (skipped).", labels=["target"])
        for target, state in self._states().items():
            family.add_metric([target], _CIRCUIT_VALUES[state])
        yield family


_ignored_log = get_logger("foundry.run")
