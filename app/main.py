"""The application factory: `app` for `uvicorn app.main:app`; `foundry-gateway serve` builds its own."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI

from app import VERSION
from app.accounting import KeyAccountant
from app.api.compat import anthropic_routes, openai_routes, responses_routes
from app.api.errors import install_error_handlers
from app.api.mcp_rpc import McpEndpoint
from app.api.media import largest_body
from app.api.middleware import RequestContextMiddleware
from app.api.openapi import install_openapi
from app.api.routes import admin_health, admin_keys, generate, health, mcp, runs, stream, transcript, usage
from app.api.routes.web import install_playground
from app.auth import Auth, build_limiter
from app.auth.keystore import KeyStore
from app.cache.service import ResponseCache
from app.cache.store import CacheStore, MemoryCacheStore, RedisCacheStore
from app.config_load import load_settings, secret_values, setting_error
from app.core import secrets
from app.core.report import RunObserver
from app.lifecycle import LoopLag, drain_on_stop_signal
from app.observability import Metrics, configure_logging, get_logger
from app.pipeline import Gateway
from app.providers.base import ProviderAdapter
from app.providers.catalog import PROVIDERS
from app.providers.registry import build_registry
from app.recording import RunRecorder, claimed_record, swept_record
from app.records import RecordQueue, RecordStore, RecordWriter, RunRecord
from app.records.mcp_calls import McpCallLog
from app.records.store import Inserted
from app.records.writer import Committed
from app.routing.router import RouteConfigError
from app.settings import Settings
from app.startup import log_startup
from app.streams.errors import ClaimedRun, ClaimHook, SweptHook
from app.streams.mcp_sessions import McpSessions, build_sessions
from app.streams.memory import MemoryStreamStore
from app.streams.protocols import RecordsOutbox, StreamBackend, StreamStore
from app.tools.mcp_config import McpSecretMissing
from app.tracing import Tracing, build_tracing

__all__ = ["create_app"]

app: FastAPI  # built on first access (module __getattr__ below)


def create_app(
    settings: Settings | None = None,
    clients: Mapping[str, Any] | None = None,
    adapters: Mapping[str, ProviderAdapter] | None = None,
    observers: Iterable[RunObserver] = (),
    tracing: Tracing | None = None,
) -> FastAPI:
    """Build the gateway. `clients` injects one `aiohttp.ClientSession` per provider name (used for
    that provider's upstream calls, never closed by the gateway: tests point it at loopback fakes,
    embedders configure proxies or trust), and credentials hooks by their own keys (`bedrock-signer`,
    `azure-auth`, `vertex-auth`); an SDK client is refused (docs/providers.md). `adapters` injects whole provider adapters;
    `observers` get each run's `RunReport` when it ends (app/core/report.py); `tracing` replaces the
    one the OTEL_* variables would build (tests pass one with an in-memory exporter). A configuration
    that cannot serve raises `ConfigError` (app/settings.py), one line per mistake."""
    settings = settings or load_settings()
    secrets.remember(*secret_values(settings))
    configure_logging(settings.log_level, settings.log_json)
    metrics = Metrics(known_models=_named_models(settings), max_targets=settings.max_unconfigured_targets)
    tracing = _tracing(settings, tracing)
    store, auth, records, recorder = _accounts(settings, metrics)
    metrics.store_bytes.set_function(lambda: store.total_bytes)
    try:
        gateway = Gateway(settings=settings, registry=build_registry(settings.provider_config(), clients, adapters),
                          store=store, metrics=metrics, observers=[*observers, *recorder, metrics.observe_run],
                          tracing=tracing, cache=build_cache(settings, metrics))
    except (RouteConfigError, McpSecretMissing) as exc:
        raise setting_error("routes" if isinstance(exc, RouteConfigError) else "mcp_servers", str(exc)) from None
    accountant = KeyAccountant(auth, metrics)  # each run's own observer, given when it starts (app/api/access.py)
    sessions = build_sessions(settings.redis_url.get_secret_value() if settings.redis_url else None)  # for /mcp
    endpoint = McpEndpoint(gateway.tools.mcp, metrics, tracing, _mcp_calls(settings, records, metrics))

    app = FastAPI(
        title="Foundry Gateway",
        version=VERSION,
        description="One canonical SSE event stream for every LLM provider, with in-process chunk validation.",
        lifespan=_lifespan(settings, gateway, auth, records, frozenset({**(clients or {}), **(adapters or {})}),
                           _mcp_closing(endpoint, sessions, settings.records_write_timeout)),
        docs_url=None,  # Swagger UI loads from a CDN (blank offline); the document is /openapi.json
        redoc_url=None,
    )
    app.state.gateway = gateway
    app.state.settings = settings
    app.state.records = records
    app.state.auth = auth
    app.state.accountant = accountant
    app.state.mcp, app.state.mcp_sessions = endpoint, sessions
    _install_routes(app)
    install_playground(app)
    install_error_handlers(app)
    install_openapi(app)
    # Raised by the media allowance's base64 only; what else the body holds is held to max_body_bytes
    # once the parts are known (app/api/media.py).
    app.add_middleware(RequestContextMiddleware, metrics=metrics, tracing=tracing,
                       max_body_bytes=largest_body(settings))
    return app


def _accounts(settings: Settings,
              metrics: Metrics) -> tuple[StreamBackend, Auth, RecordWriter | None, list[RunObserver]]:
    """The stream store, the keys' auth, the run-record writer (None with FOUNDRY_RECORDS=off, the
    keys then in configuration only) and the observer that records each finished run. Built in
    the order their hooks need: the records' queue, then the store that hands it the runs it
    sweeps and claims, then the writer that tells that store's outbox what it committed."""
    database = RecordStore(settings.records_url(), write_timeout=settings.records_write_timeout) \
        if settings.records else None
    auth = _auth(settings, database, metrics)
    if database is None:
        return build_store(settings, metrics, on_claim=_Claims(settings, None, auth)), auth, None, []
    queue = RecordQueue(size=settings.records_queue_size, batch_size=settings.records_batch_size,
                        on_drop=metrics.count_dropped_records)
    store = build_store(settings, metrics, on_claim=_Claims(settings, queue, auth),
                        on_swept=lambda swept: queue.submit(swept_record(swept, content=settings.record_content)))
    records = RecordWriter(database, queue, linger=settings.records_linger, write_timeout=settings.records_write_timeout,
                           retention_days=settings.record_retention_days, on_write=metrics.records_written.inc,
                           on_committed=_committed(auth, store))
    return store, auth, records, [RunRecorder(records, content=settings.record_content, stage=store.stage_record)]


def _install_routes(app: FastAPI) -> None:
    # Most-used first: FastAPI matches included routers one after another and each router checked
    # costs CPU on every request (docs/performance.md), so the routes that open runs come first.
    for router in (stream.router, openai_routes.router, anthropic_routes.router, responses_routes.router,
                   generate.router, health.router,
                   transcript.router, runs.router, usage.router, admin_keys.router, admin_health.router, mcp.router):
        app.include_router(router)


def _tracing(settings: Settings, tracing: Tracing | None) -> Tracing | None:
    """The tracing the OTEL_* variables ask for (None: off), or the injected one with the
    configured providers' hosts as `server.address`."""
    addresses = _server_addresses(settings)
    if tracing is None:
        return build_tracing(content=settings.trace_content, server_addresses=addresses)
    tracing.server_addresses = {**addresses, **tracing.server_addresses}
    return tracing


def _named_models(settings: Settings) -> set[str]:
    """The models the configuration names (routes and their targets, aliases and theirs, priced
    models without a pattern) and the mock's fixed scenarios: their own metric label values."""
    names = {*settings.routes, *settings.aliases, *settings.aliases.values(),
             *(m for m in settings.prices if "*" not in m)}
    names.update(t.model for route in settings.routes.values() for t in route.targets)
    names.update(f"mock/{scenario}" for scenario in ("simple", "tool_call", "echo"))
    return names


def _server_addresses(settings: Settings) -> dict[str, str]:
    """Each provider's upstream host, as traces name it (`server.address`)."""
    config = settings.provider_config()
    urls = {provider.name: config.secret(provider.base_url_setting or "") or provider.default_url or ""
            for provider in PROVIDERS}
    urls.update({p.name: p.base_url for p in settings.providers})
    return {name: host for name, url in urls.items() if (host := urlsplit(url).hostname)}


def _lifespan(settings: Settings, gateway: Gateway, auth: Auth, records: RecordWriter | None,
              injected: frozenset[str],
              closing: Callable[[], Awaitable[None]]) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start-up and shutdown: the stores, the sweeper, the drain on SIGTERM; runs end before their
    stores close."""
    store = gateway.store

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log_startup(settings, gateway.registry.names, auth.mode, injected)
        lag = LoopLag()  # the loop's own measured load: admission and the Redis reply timeouts read it
        gateway.metrics.loop_lag.set_function(lambda: lag.current)
        await store.start()
        await gateway.tools.start()  # MCP servers' sessions (each first attempt waited for, bounded)
        sweeper = asyncio.create_task(_sweep(store, settings.stream_ttl_seconds))
        watcher = asyncio.create_task(_revocations(gateway, auth, settings.key_cache_seconds))
        restore = drain_on_stop_signal(lambda: gateway.runs.drain(settings.shutdown_grace_seconds))
        if records is not None:
            await records.start()  # migrate, prune, start writing (a database that is down: retried)
        if auth.mode == "open":
            get_logger("foundry.auth").warning(
                "auth_open", message="no FOUNDRY_ADMIN_KEY and no [[keys]]: every caller may use every model "
                                     "without a key (set FOUNDRY_AUTH=required to refuse this)")
        _tune_gc()
        lag.start()  # measured from here: start-up's own work is not load
        try:
            yield
        finally:
            await lag.stop()
            restore()
            for task in (sweeper, watcher):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await gateway.aclose()  # runs end (their finals reach the stream store) ...
            if records is not None:  # their records are written while the counters and the outbox are there
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(settings.records_write_timeout):
                        await records.flush()
            await auth.aclose()
            await closing()  # the /mcp calls still queued are written, the sessions' store closes
            await store.aclose()  # ... then the stream store flushes and closes
            if records is not None:
                await records.aclose()  # after the runs: their records are written, then the engine goes
            if gateway.tracing is not None:  # the runs' last spans are exported
                await asyncio.to_thread(gateway.tracing.shutdown)

    return lifespan


GC_YOUNG_THRESHOLD = 7000
"""The young generation's collection threshold (CPython's default: 700 allocations). Every streamed
event allocates a few short-lived objects (frames, dicts, dataclasses) that die young; at 700 the
collector runs thousands of times a second under load; a larger threshold lets those objects die
before any collection looks at them. Counted in instructions: 2.7% fewer a request than at 700, and
no fewer again at 25000 (docs/performance.md, "Figures behind design choices")."""
_gc_tuned = False


def _tune_gc() -> None:
    """Once per process, after start-up: what start-up built (modules, the app, its routes and
    settings) moves to the permanent generation (`gc.freeze()`), so that no collection walks it
    again, and the young generation's threshold is raised (GC_YOUNG_THRESHOLD)."""
    global _gc_tuned
    if _gc_tuned:
        return
    _gc_tuned = True
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


class _Claims:
    """The `ClaimHook`: a run this replica ends for a dead one (app/streams/redis/follower.py): its
    key's concurrency slot is freed at once rather than when its lease expires, before its final is
    written; whoever writes the final writes the record (exactly once: the store keeps the first
    record of a run id)."""

    def __init__(self, settings: Settings, records: RecordQueue | None, auth: Auth) -> None:
        self._settings, self._records, self._auth = settings, records, auth

    async def free_slot(self, owner: str, slot: str) -> None:
        await self._auth.limiter.release(owner, slot)

    async def claimed(self, run: ClaimedRun) -> None:
        if self._records is not None:
            self._records.submit(claimed_record(run, content=self._settings.record_content))
        # Again (idempotent), in case `free_slot` did not get through (it failed, or an older claimer had none).
        if run.owner is not None and run.tags.slot is not None:
            await self._auth.limiter.release(run.owner, run.tags.slot)


def _committed(auth: Auth, outbox: RecordsOutbox) -> Committed:
    """After each batch of records commits: the keys' budget counters take their new totals, and
    the stream store's outbox forgets the runs (app/streams/redis/outbox.py)."""

    async def committed(batch: Sequence[RunRecord], inserted: Inserted) -> None:
        await auth.spend_recorded(inserted.spend)
        await auth.runs_recorded([(record.owner, record.stream_id) for record in batch if record.owner is not None])
        await outbox.records_written([record.stream_id for record in batch])

    return committed


def _auth(settings: Settings, database: RecordStore | None, metrics: Metrics) -> Auth:
    """Keys (the admin key, [[keys]], the records database's api_keys) and the limiter (Redis or memory)."""
    return Auth(
        admin_key=settings.admin_key.get_secret_value() if settings.admin_key else None,
        admin_key_previous=settings.admin_key_previous.get_secret_value() if settings.admin_key_previous else None,
        config_keys=settings.keys,
        keystore=KeyStore(database.engine) if database is not None else None,
        limiter=build_limiter(settings.redis_url.get_secret_value() if settings.redis_url else None,
                              lease_seconds=settings.concurrency_lease_seconds),
        cache_seconds=settings.key_cache_seconds,
        on_outcome=metrics.count_key_outcome,
    )


def _mcp_calls(settings: Settings, records: RecordWriter | None, metrics: Metrics) -> McpCallLog | None:
    """Where the tool calls through /mcp are recorded (the records database), or None with records off."""
    if records is None:
        return None
    return McpCallLog(records, queue_size=settings.records_queue_size, batch_size=settings.records_batch_size,
                      on_drop=metrics.count_dropped_records)


def _mcp_closing(endpoint: McpEndpoint, sessions: McpSessions, grace: float) -> Callable[[], Awaitable[None]]:
    """At shutdown: the calls through /mcp still queued are written, then the sessions' store closes."""

    async def closing() -> None:
        if endpoint.journal is not None:
            await endpoint.journal.aclose(grace)
        await sessions.aclose()

    return closing


def build_store(settings: Settings, metrics: Metrics, *, on_swept: SweptHook | None = None,
                on_claim: ClaimHook | None = None) -> StreamBackend:
    """The Redis store when FOUNDRY_REDIS_URL is set, else the in-process one (one process: no
    other replica's records to sweep or runs to claim)."""
    def on_evict(reason: str) -> None:
        metrics.child(metrics.streams_evicted, reason).inc()

    if settings.redis_url is None:
        return MemoryStreamStore(ttl=settings.stream_ttl_seconds, max_streams=settings.max_streams,
                                 max_events=settings.max_stream_events, max_bytes=settings.max_stream_bytes,
                                 max_total_bytes=settings.max_store_bytes, on_evict=on_evict)
    from app.streams.redis import RedisStoreSettings, RedisStreamStore  # the redis client only when used

    return RedisStreamStore(
        RedisStoreSettings(url=settings.redis_url.get_secret_value(), ttl=settings.stream_ttl_seconds,
                           max_streams=settings.max_streams, max_events=settings.max_stream_events,
                           max_bytes=settings.max_stream_bytes, max_total_bytes=settings.max_store_bytes,
                           lease_seconds=settings.redis_lease_seconds, timeout=settings.redis_timeout_seconds,
                           max_pending_bytes=settings.redis_max_pending_bytes),
        observer=metrics.observe_store, on_evict=on_evict, on_swept=on_swept, on_claim=on_claim,
    )


def build_cache(settings: Settings, metrics: Metrics) -> ResponseCache | None:
    """The response cache when a `[[cache]]` rule exists: beside the streams (Redis or memory)."""
    if not settings.cache:
        return None
    store: CacheStore
    if settings.redis_url is not None:
        store = RedisCacheStore(settings.redis_url.get_secret_value(), max_entries=settings.cache_max_entries,
                                max_entry_bytes=settings.max_stream_bytes, timeout=settings.redis_timeout_seconds)
    else:
        store = MemoryCacheStore(max_entries=settings.cache_max_entries, max_bytes=settings.cache_max_bytes)
    metrics.cache_bytes.set_function(lambda: store.total_bytes)
    return ResponseCache(rules=settings.cache, store=store, metrics=metrics,
                         deterministic_tools=[t.name for t in settings.tools if t.deterministic],
                         operator_validators=settings.validators, default_chunking=settings.default_chunking)


async def _revocations(gateway: Gateway, auth: Auth, period: float) -> None:
    """End the runs of keys revoked on another replica (the revoking replica ends its own at once):
    every FOUNDRY_KEY_CACHE_SECONDS, the keys of the runs in progress here are looked up, one
    query per key, and only while such runs exist."""
    log = get_logger("foundry.auth")
    while True:
        await asyncio.sleep(max(period, 0.5))
        if auth.keystore is None:
            continue
        for owner in gateway.runs.owners():
            if auth.configured(owner) is not None:
                continue
            try:
                row = await auth.keystore.get(owner)
            except Exception as exc:  # the database is away: the next pass asks again
                log.warning("revocation_check_failed", key_id=owner, error=type(exc).__name__)
                break
            if row is not None and row.revoked_at is not None and (ended := gateway.runs.end_of(owner)):
                log.info("key_revoked_runs_ended", key_id=owner, runs=ended)


async def _sweep(store: StreamStore, ttl: float) -> None:
    """Expire finished streams in the background, so memory is freed without new traffic."""
    while True:
        await asyncio.sleep(max(1.0, min(ttl / 4, 60.0)))
        store.sweep()


def __getattr__(name: str) -> Any:
    # `app.main:app` for uvicorn, built on first access rather than at import.
    if name == "app":
        global app
        app = create_app()
        return app
    raise AttributeError(name)
