"""What the gateway serves, said once at start and by `foundry-gateway config check`.

An operator must see at a glance which providers are served and why one is not (a key that is
not set), where streams and records live (credentials masked) and whether keys are required,
rather than learn it from "unknown provider" answers later.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from app.config_load import env_name, setting_warnings, unknown_variables
from app.core.cost import price_sources
from app.observability import get_logger
from app.providers.catalog import PROVIDERS
from app.settings import Settings
from app.tracing import tracing_configured

__all__ = ["ProviderStatus", "describe_settings", "log_startup", "provider_statuses", "stream_store_label"]

_MASK = "********"


@dataclass(slots=True, kw_only=True, frozen=True)
class ProviderStatus:
    name: str
    served: bool
    why: str

    def line(self) -> str:
        return f"{self.name}: served ({self.why})" if self.served else f"{self.name}: not served: {self.why}"


def provider_statuses(settings: Settings, injected: frozenset[str] = frozenset()) -> list[ProviderStatus]:
    """Every provider the configuration names, served or not and why (`injected`: clients or
    adapters handed to create_app, served whatever the keys)."""
    def status(name: str, key: bool, variable: str) -> ProviderStatus:
        if name in injected:
            return ProviderStatus(name=name, served=True, why="injected client")
        if key:
            return ProviderStatus(name=name, served=True, why=f"{variable} set")
        return ProviderStatus(name=name, served=False, why=f"{variable} is not set")

    config = settings.provider_config()
    statuses = []
    for known in PROVIDERS:
        if known.status is not None:
            served, why = (True, "injected client") if known.name in injected else known.status(config)
            statuses.append(ProviderStatus(name=known.name, served=served, why=why))
            continue
        if not known.credentials:
            statuses.append(ProviderStatus(name=known.name, served=True, why="embedded"))
            continue
        key = next((field for field in known.credentials if config.secret(field)), None)
        statuses.append(status(known.name, key is not None, env_name(key or known.credentials[0])))
    for provider in settings.providers:
        if provider.api_key_env is None:
            statuses.append(ProviderStatus(name=provider.name, served=True, why=f"{provider.base_url}, no key needed"))
        else:
            statuses.append(status(provider.name, bool(provider.api_key()), provider.api_key_env))
    return statuses


def stream_store_label(settings: Settings) -> str:
    if settings.redis_url is None:
        return "memory (this process only; set FOUNDRY_REDIS_URL to share streams between replicas)"
    from sqlalchemy.engine import make_url  # parses any URL; the whole URL is a remembered secret (scrubbed)

    url = settings.redis_url.get_secret_value()
    from app.redis_client import describe_cluster

    try:
        cluster = describe_cluster(url)
    except ValueError as exc:
        return f"redis+cluster (invalid URL: {exc})"
    if cluster is not None:
        return cluster
    try:
        parsed = make_url(url)
    except Exception:  # not a URL SQLAlchemy reads: say only the scheme
        return "redis " + url.partition("://")[0]
    return f"{parsed.drivername}://{parsed.host}:{parsed.port or 6379}/{parsed.database or 0}"


def describe_settings(settings: Settings) -> dict[str, Any]:
    """The effective configuration as JSON-ready values, every secret masked."""
    shown: dict[str, Any] = {}
    for name, value in settings.model_dump(mode="python").items():
        if isinstance(value, SecretStr):
            shown[name] = _MASK if value.get_secret_value() else None
        else:
            shown[name] = value
    if settings.database_url is not None:
        shown["database_url"] = settings.records_url_masked()
    return _json_ready(shown)


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, SecretStr):
        return _MASK
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "model_dump"):
        return _json_ready(value.model_dump(mode="json"))
    return str(value)


def log_startup(settings: Settings, served: list[str], auth_mode: str, injected: frozenset[str] = frozenset()) -> None:
    """One line per provider, then the stream store, the records database and the auth mode
    (`injected`: the providers create_app was handed clients or adapters for)."""
    log = get_logger("foundry.startup")
    for warning in unknown_variables():
        log.warning("unknown_setting", message=warning)
    for warning in setting_warnings(settings):
        log.warning("setting_conflict", message=warning)
    statuses = provider_statuses(settings, injected=injected - {"mock"})
    for status in statuses:
        log.info("provider", provider=status.name, served=status.served, why=status.why)
    for name in sorted(set(served) - {s.name for s in statuses}):  # adapters injected under names of their own
        log.info("provider", provider=name, served=True, why="injected adapter")
    log.info("stream_store", store=stream_store_label(settings))
    log.info("records", database=settings.records_url_masked() if settings.records else "off (FOUNDRY_RECORDS=off)")
    log.info("auth", mode=auth_mode, required=settings.auth == "required")
    log.info("prices", source=price_sources(settings.prices, library=settings.price_library))
    log.info("traces", **traces_label(settings))


def traces_label(settings: Settings) -> dict[str, Any]:
    """Where traces go (the standard OTEL_* variables), or why there are none."""
    if not tracing_configured():
        return {"exporter": "off (set OTEL_EXPORTER_OTLP_ENDPOINT to export traces)"}
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    parts = urlsplit(endpoint.strip())  # no user, password or query (a token) in the log
    shown = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
    return {"exporter": "otlp/http", "endpoint": shown,
            "service": os.environ.get("OTEL_SERVICE_NAME") or "foundry-gateway",
            "sampler": os.environ.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on",
            "content": settings.trace_content}
