"""Gateway configuration: environment variables, then an optional TOML file, then defaults.

Gateway settings use the `FOUNDRY_` prefix (`FOUNDRY_STREAM_TTL_SECONDS=60`); provider
credentials use the providers' own names (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, ...). An empty
variable is an unset one (compose passes `KEY: ""` for a variable it was not given).
`FOUNDRY_CONFIG=/path/gateway.toml` names a TOML file (deploy/foundry.example.toml): structured
settings as tables, scalars at the top or in their group's table (`[http]`, `[streams]`, ...,
`GROUPS` in app/config_file.py); the environment wins over the file. Secrets are `SecretStr`: never printed or logged.
`load_settings()` (app/config_load.py) turns every mistake into a `ConfigError` whose lines each
name the variable or TOML key and the reason (the command line prints them and exits with status 2).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from app.auth.keys import AdminKey
from app.auth.policy import MODEL_PATTERN_RE, ConfiguredKey, Price, known_validators
from app.cache.config import CacheRule
from app.config_file import read_config_file
from app.core.errors import RequestError
from app.lifecycle import drain_grace
from app.providers.catalog import default_patterns, provider_names, setting_specs
from app.providers.config import BaseUrl, CompatibleProvider, ProviderConfig, ReadLimits
from app.providers.descriptor import SettingSpec
from app.records.urls import DatabaseUrl, masked_url
from app.redis_client import RedisUrl
from app.routing.config import RouteConfig, check_route_deadlines, check_route_shapes
from app.tools.config import ToolConfig, default_tools
from app.tools.mcp_config import McpServerConfig
from app.validation import ValidatorSpec, check_specs

__all__ = ["CompatibleProvider", "Settings"]  # CompatibleProvider: app/providers/config.py


class _GatewaySettings(BaseSettings):
    """The gateway's own settings; `Settings` adds every provider's (their descriptors' `SettingSpec`s)."""

    model_config = SettingsConfigDict(env_prefix="FOUNDRY_", extra="forbid", populate_by_name=True,
                                      env_ignore_empty=True, protected_namespaces=("settings_",))

    # HTTP edge
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description=(
        "Largest accepted request body (besides its image and document parts: media_request_max_bytes)."))
    media_part_max_bytes: int = Field(default=10 << 20, ge=0, description=(
        "Largest image or document part (decoded bytes); a larger one is 413 naming the part."))
    media_request_max_bytes: int = Field(
        default=20 << 20, ge=0, description="Most image and document bytes (decoded) in one request: 413 naming "
        "the part past it. The body may pass max_body_bytes by these parts' base64, and by nothing else.")
    ping_seconds: float = Field(default=5.0, gt=0, description="SSE keep-alive comment after this much silence.")
    request_timeout_seconds: float = Field(default=30.0, gt=0, le=3600, description=(
        "Longest a request's head and body may take to arrive (from the connection or the request's first byte); then "
        "408 and closed. Applied by `foundry-gateway serve`."))
    send_timeout_seconds: float = Field(default=30.0, gt=0, description=(
        "An SSE reader whose send is stuck this long (it stopped reading) is dropped."))
    shutdown_grace_seconds: float = Field(
        default=5.0, ge=0, le=300,
        description="On SIGTERM, running streams get this long to finish (readyz 503, new runs refused); then "
                    "they end with a final of error.code `shutdown` (retryable), and the server stops.",
    )
    stop_grace_seconds: float | None = Field(
        default=None, gt=0, le=3600,
        description="The orchestrator's stop grace (SIGTERM to SIGKILL; compose's stop_grace_period). When set, "
                    "the drain is fitted into it: shutdown_grace_seconds defaults to it less the time for the "
                    "cut streams' finals and the server's close (8 s), and a larger one is refused.")
    aliases: dict[str, str] = Field(default_factory=dict, description="Model aliases: alias -> provider/model.")
    model_patterns: dict[str, str] = Field(default_factory=default_patterns, description=(
        "Bare model names (no `provider/`) as clients send them: glob pattern -> provider, first match wins; aliases "
        "win over them. On /v1/responses `openai` means openai-responses."))
    dropin_passthrough: bool = Field(default=True, description=(
        "A drop-in request whose provider speaks the facade's wire is passed through as the client wrote it and its "
        "events relayed as sent (false: always translated; docs/drop-in.md)."))

    # Stream log
    stream_ttl_seconds: float = Field(default=300.0, gt=0, description="How long a finished stream stays replayable.")
    max_stream_events: int = Field(default=100_000, ge=16, description="Events kept per stream (oldest dropped past it).")
    max_stream_bytes: int = Field(default=8 << 20, ge=4096, description="Encoded bytes kept per stream.")
    max_streams: int = Field(default=10_000, ge=1, description="Streams kept in the store at once.")
    max_store_bytes: int = Field(default=256 << 20, ge=4096, description=(
        "Encoded bytes kept by all streams together; past it the oldest finished streams are evicted."))
    cache: list[CacheRule] = Field(default_factory=list, description="Response cache rules (`[[cache]]`; docs/caching.md).")
    cache_max_entries: int = Field(default=10_000, ge=1, description="Cached answers kept (least recently used out).")
    cache_max_bytes: int = Field(default=64 << 20, ge=4096, description="Bytes of cached answers kept in memory.")

    # Shared stream store (unset: streams live in this process's memory)
    redis_url: RedisUrl | None = Field(
        default=None, description="redis://[user:password@]host:port/db: share streams and rate-limit counters between "
                    "replicas through Redis; redis+cluster://[user:password@]host:port[,host:port...] (the seed "
                    "nodes) for a Redis Cluster.",
    )
    redis_timeout_seconds: float = Field(
        default=2.0, gt=0, le=30, description="Redis connect and reply timeout: a Redis that is away fails fast.",
    )
    redis_lease_seconds: float = Field(
        default=10.0, ge=0.2, le=60,
        description="A replica's lease on its running streams; followers elsewhere end a stream with "
                    "final{error: replica_lost} at most this (plus one second) after its replica died. Keep it "
                    "more than three times the Redis timeout (a warning says so otherwise).",
    )
    redis_max_pending_bytes: int = Field(
        default=32 << 20, ge=1 << 16, description="Frames buffered for Redis at most (while it is slow or away).",
    )

    # Upstream
    connect_timeout: float = Field(default=10.0, gt=0, description="Longest wait for an upstream connection.")
    read_timeout: float = Field(default=120.0, gt=0, description="Longest silence from an upstream mid-stream.")
    upstream_max_retries: int = Field(
        default=1, ge=0, le=10, description="Retries of one routing target before its response starts (connection "
                                            "errors, 429, 5xx), by the router; the SDKs never retry a streamed call."
    )
    upstream_max_body_bytes: int = Field(
        default=1 << 20, ge=1024, le=1 << 30, description="Most bytes of an upstream error answer (or a JSON answer "
                                                          "where an event stream was asked) read, after decompression.")
    upstream_max_event_bytes: int = Field(
        default=1 << 20, ge=1024, le=1 << 30, description="Longest upstream SSE line, and most data in one upstream "
                                                          "SSE event; past it the run ends `upstream_protocol_error`.")
    upstream_max_idle_lines: int = Field(default=10_000, ge=10, le=10_000_000, description=(
        "Most upstream SSE lines that carry nothing (blank lines, comments, ignored fields) before an event, and in one "
        "read; past it the run ends `upstream_protocol_error`."))
    provider_options_allow: dict[str, list[str]] = Field(
        default_factory=dict,
        description="provider_options keys callers may pass, per provider name (JSON object in "
                    "FOUNDRY_PROVIDER_OPTIONS_ALLOW); a provider not named keeps the safe default "
                    "(app/providers/options.py).",
    )
    providers: list[CompatibleProvider] = Field(
        default_factory=list, description="OpenAI-compatible servers (JSON list in FOUNDRY_PROVIDERS)."
    )

    # Routing and resilience (app/routing; README "Reliability")
    routes: dict[str, RouteConfig] = Field(
        default_factory=dict, description="Named model groups usable as `model` (JSON object in FOUNDRY_ROUTES).")
    retry_backoff_seconds: float = Field(default=0.2, gt=0, le=60, description="First retry delay (doubles, jittered).")
    retry_backoff_max_seconds: float = Field(default=2.0, gt=0, le=300, description="Longest retry delay.")
    retry_after_max_seconds: float = Field(
        default=5.0, ge=0, le=300,
        description="A Retry-After up to this is waited out; a longer one moves on to the next target.")
    first_token_timeout: float = Field(default=60.0, gt=0, description="Seconds to the first content (per attempt).")
    total_timeout: float = Field(default=600.0, gt=0, description="Deadline of a whole run (all steps).")
    max_first_token_timeout: float = Field(default=300.0, gt=0, description="Cap of route and request first_token.")
    max_idle_timeout: float = Field(default=600.0, gt=0, description="Cap of route and request idle (read_timeout "
                                    "is the default idle timeout).")
    max_total_timeout: float = Field(default=3600.0, gt=0, description="Cap of route and request total.")
    breaker_failures: int = Field(default=5, ge=1, le=1000, description="Failures in a row that open a target's "
                                  "circuit.")
    breaker_cooldown_seconds: float = Field(default=30.0, gt=0, description="How long an open circuit skips its "
                                            "target before one probe.")
    max_unconfigured_targets: int = Field(
        default=256, ge=1, le=100_000,
        description="Targets no route or alias names that keep a circuit breaker (least recently used first "
                    "forgotten) and their own metric label value (later ones count as `other`).")
    max_active_runs: int = Field(default=1000, ge=1, description="Runs in progress per process; past it new runs "
                                 "get 503 with Retry-After.")
    max_loop_lag_seconds: float = Field(
        default=0.5, ge=0, le=60,
        description="New runs get 503 with Retry-After (before they start) while the process's event loop wakes "
                    "up later than this: the process's own measured capacity, so that an overloaded replica "
                    "refuses new work instead of failing the runs it has. 0: no such bound.")

    # Validation (operator policy: applies to every request, a caller cannot remove it)
    judge_max_calls: int = Field(
        default=16, ge=0, le=10_000,
        description="`llm_judge` calls per run (every judge validator of the run together). Past it a judge "
                    "check is not made and counts as an error: the validator's `on_error` blocks the stream "
                    "(`fail`, the default) or counts it `unknown` (`ignore`); never a silent pass.")
    judge_concurrency: int = Field(
        default=4, ge=1, le=64,
        description="`llm_judge` calls of one run in flight at once (chunks are judged concurrently up to it).")
    validators: list[ValidatorSpec] = Field(
        default_factory=list, description="Validators for every request (JSON list in FOUNDRY_VALIDATORS)."
    )
    default_chunking: str = Field(default="sentence", description="Chunker when a request names none.")

    # Gateway-executed tools (app/tools/config.py has the format; JSON list in FOUNDRY_TOOLS)
    tools: list[ToolConfig] = Field(default_factory=default_tools, description=(
        "Tools the gateway offers to the model and runs itself. Default: the built-in calculator for the mock provider only."))
    mcp_servers: list[McpServerConfig] = Field(default_factory=list, description=(
        "MCP servers whose tools the gateway offers as `<server>__<tool>` and serves at /mcp (docs/mcp.md)."))
    max_steps: int = Field(default=8, ge=1, le=100, description=(
        "Most provider calls one run may make when the gateway runs tools: the default and the cap of the request's max_steps."))
    tool_max_output_chars: int = Field(
        default=100_000, ge=100,
        description="A gateway-run tool's output is cut past this many characters before the model sees it "
                    "(a runaway tool cannot fill the context or the stream).")
    transcript_max_chars: int = Field(
        default=1_000_000, ge=1_000,
        description="Characters kept per stream transcript (answers, thinking, tool input and output); past "
                    "it the transcript says it was cut (GET /v1/stream/{id}/transcript, run records).")
    transcript_max_items: int = Field(
        default=2_000, ge=10,
        description="Entries (messages, tool calls, tool results) kept per stream transcript; past it the "
                    "transcript says it was cut.")

    # Run records (app/records): one durable record and transcript per run, in SQL
    records: bool = Field(
        default=True, description="Keep a record of every run (FOUNDRY_RECORDS=off: none, no database).")
    database_url: DatabaseUrl | None = Field(
        default=None, description="postgresql://user:password@host/db (read with asyncpg) or sqlite:///path; default: "
                                  "sqlite+aiosqlite:///<data_dir>/foundry.db. Secret (it may hold a password).")
    data_dir: str = Field(default="var", description="Where the embedded SQLite database lives.")
    record_content: bool = Field(
        default=True, description="Store message content in records (false: metadata only, no text anywhere).")
    record_media_bytes: bool = Field(
        default=False, description="With record_content, also store image and document bytes in transcripts "
        "(false: each part as its kind, media type, size and SHA-256).")
    record_retention_days: float = Field(
        default=30.0, ge=0, description="Records older than this are deleted (0: kept forever).")
    records_queue_size: int = Field(default=10_000, ge=1, description="Records waiting for the writer; "
                                    "past it new records are dropped (counted).")
    records_batch_size: int = Field(default=200, ge=1, le=1000, description="Records per insert.")
    records_linger: float = Field(
        default=0.1, ge=0, le=10, description="Seconds the writer waits for more records before an insert "
        "not yet full (0: each record at once); a record is listed at most this much later.")
    records_write_timeout: float = Field(default=10.0, gt=0, description="Longest wait on one batch insert.")

    # Access control (app/auth): keys, limits, prices
    auth: Literal["auto", "required"] = Field(default="auto", description=(
        "auto: keys are required once FOUNDRY_ADMIN_KEY or [[keys]] exist, open (with a warning) otherwise; "
        "required: refuse to start without them."))
    admin_key: AdminKey | None = Field(
        default=None, description="The admin key: manages keys, sees every run. At least 32 random characters.")
    admin_key_previous: AdminKey | None = Field(default=None, description=(
        "The admin key being rotated out, accepted as the admin key too (with FOUNDRY_ADMIN_KEY set): set the new key "
        "in FOUNDRY_ADMIN_KEY and the old one here, roll the replicas, move every client, then unset it."))
    keys: list[ConfiguredKey] = Field(
        default_factory=list, description="Operator keys by hash ([[keys]] in the config file, FOUNDRY_KEYS JSON).")
    key_cache_seconds: float = Field(default=2.0, gt=0, le=300, description=(
        "How long a key lookup is cached: revocations reach every replica within this time."))
    concurrency_lease_seconds: float = Field(default=600.0, gt=0, description="A dead replica's concurrency slots go after this.")
    output_estimate_tokens: int = Field(default=1024, ge=1, le=1_000_000, description=(
        "Output tokens a run without max_tokens is expected to take: reserved (with its prompt, at its price) from its "
        "key's tokens per minute and budget until it ends."))
    prices: dict[str, Price] = Field(
        default_factory=dict, description="USD per million tokens by model or pattern (`openai/gpt-4o`, `mock/*`): "
                                          "{input, output, cache_read, cache_write, cache_write_1h, reasoning, tiers}; "
                                          "overrides the price library for those models.")
    price_library: bool = Field(default=True, description=(
        "Price the models FOUNDRY_PRICES does not name with the genai-prices library's published prices "
        "(bundled with the installed version, never fetched); false: those runs are unpriced."))
    metrics_token: SecretStr | None = Field(
        default=None, description="When set, /metrics needs `Authorization: Bearer <token>`.")

    # Logging
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Least severe level logged (the gateway's, uvicorn's and the libraries' lines).")
    log_json: bool | None = Field(
        default=None, description="JSON log lines (false: human-readable, coloured on a terminal only). "
                                  "Unset: JSON unless stdout is a terminal.")
    trace_content: bool = Field(
        default=False, description="Put prompt and completion content (scrubbed of secrets) on trace spans. "
                                   "Traces are on when OTEL_EXPORTER_OTLP_ENDPOINT is set.")

    @model_validator(mode="before")
    @classmethod
    def _empty_is_unset(cls, values: Any) -> Any:
        # docker compose passes `KEY: ""` for a variable it was not given: that is "not configured",
        # for every setting (the environment's empties are dropped by env_ignore_empty already).
        if isinstance(values, dict):
            return {k: v for k, v in values.items() if v != ""}
        return values

    @field_validator("validators")
    @classmethod
    def _validators_known(cls, validators: list[ValidatorSpec]) -> list[ValidatorSpec]:
        return known_validators(validators)

    @field_validator("default_chunking")
    @classmethod
    def _chunking_known(cls, chunking: str) -> str:
        try:
            check_specs([], chunking)
        except RequestError as exc:
            raise ValueError(exc.message) from None
        return chunking

    @field_validator("tools", "mcp_servers")
    @classmethod
    def _unique_tool_names(cls, tools: list[Any]) -> list[Any]:
        names = [t.name for t in tools]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"{name!r} registered twice")
        return tools

    @field_validator("aliases")
    @classmethod
    def _aliases_name_a_provider(cls, aliases: dict[str, str]) -> dict[str, str]:
        for alias, target in aliases.items():
            if "/" not in target:
                raise ValueError(f"alias {alias!r} must point at provider/model, got {target!r}")
        return aliases

    @field_validator("providers")
    @classmethod
    def _unique_provider_names(cls, providers: list[CompatibleProvider]) -> list[CompatibleProvider]:
        names, reserved = [p.name for p in providers], set(provider_names())
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"provider {name!r} declared twice")
            if name in reserved:
                raise ValueError(f"provider name {name!r} is built in")
        return providers

    def records_url_masked(self) -> str:
        """The records database URL with its password hidden (for logs and `config check`)."""
        return masked_url(self.records_url())

    def provider_config(self) -> ProviderConfig:
        """What the provider modules need (they never see Settings)."""
        return ProviderConfig(
            connect_timeout=self.connect_timeout, read_timeout=self.read_timeout, max_retries=self.upstream_max_retries,
            values={spec.field: getattr(self, spec.field) for spec in setting_specs()},
            compatible=tuple(self.providers), aliases=dict(self.aliases), model_patterns=dict(self.model_patterns),
            limits=ReadLimits(max_body_bytes=self.upstream_max_body_bytes, max_event_bytes=self.upstream_max_event_bytes,
                              max_idle_lines=self.upstream_max_idle_lines),
        )

    @field_validator("keys")
    @classmethod
    def _unique_keys(cls, keys: list[ConfiguredKey]) -> list[ConfiguredKey]:
        for what, values in (("hash", [k.hash for k in keys]), ("id", [k.key_id() for k in keys])):
            for value in values:
                if values.count(value) > 1:
                    raise ValueError(f"two keys share the {what} {value!r}")
        return keys

    @field_validator("prices")
    @classmethod
    def _price_patterns(cls, prices: dict[str, Price]) -> dict[str, Price]:
        for model in prices:
            if not re.match(MODEL_PATTERN_RE, model):
                raise ValueError(f"{model!r} is not a model or pattern")
        return prices

    @model_validator(mode="after")
    def _drain_fits_the_stop_grace(self) -> Settings:
        if self.stop_grace_seconds is not None:
            given = self.shutdown_grace_seconds if "shutdown_grace_seconds" in self.model_fields_set else None
            self.shutdown_grace_seconds = drain_grace(self.stop_grace_seconds, given)
        return self

    @model_validator(mode="after")
    def _auth_required_has_keys(self) -> Settings:
        if self.auth == "required" and self.admin_key is None and not self.keys:
            raise ValueError("FOUNDRY_AUTH=required but neither FOUNDRY_ADMIN_KEY nor any [[keys]] is configured")
        return self

    def records_url(self) -> str:
        """The records database: FOUNDRY_DATABASE_URL, else a SQLite file in the data directory."""
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return f"sqlite+aiosqlite:///{Path(self.data_dir) / 'foundry.db'}"

    @field_validator("routes")
    @classmethod
    def _routes_well_formed(cls, routes: dict[str, RouteConfig]) -> dict[str, RouteConfig]:
        # Unknown providers are checked when the app starts (app/routing/router.py check_routes).
        return check_route_shapes(routes)

    @model_validator(mode="after")
    def _route_deadlines_within_caps(self) -> Settings:
        check_route_deadlines(self.routes, {"first_token_timeout": self.max_first_token_timeout,
                                            "idle_timeout": self.max_idle_timeout,
                                            "total_timeout": self.max_total_timeout})
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get("FOUNDRY_CONFIG")
        if path:
            sources.append(InitSettingsSource(settings_cls, init_kwargs=read_config_file(Path(path), settings_cls.model_fields)))
        return tuple(sources)


def _provider_field(spec: SettingSpec) -> Any:
    kind: Any = {"secret": SecretStr, "url": BaseUrl, "text": str}[spec.kind]
    return (kind | None, Field(default=None, validation_alias=AliasChoices(*spec.env, spec.field),
                               description=spec.description))


if TYPE_CHECKING:
    Settings = _GatewaySettings
else:  # the providers' settings from the catalog (app/providers/catalog.py), after the gateway's own
    Settings = create_model("Settings", __base__=_GatewaySettings, __module__=__name__,
                            __doc__="Every setting: the gateway's and its providers'.",
                            **{spec.field: _provider_field(spec) for spec in setting_specs()})
