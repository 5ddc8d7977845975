"""The configuration file (FOUNDRY_CONFIG, TOML): its tables, and reading it into flat settings.

Structured settings are tables of their own; scalars stand at the top of the file or in the
table of the part of the gateway that owns them (`GROUPS`). Every mistake is a `ConfigError` line
naming the file and the key.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.providers.catalog import setting_specs

__all__ = ["GROUPS", "STRUCTURED", "ConfigError", "group_of", "read_config_file"]


GROUPS: dict[str, tuple[str, ...]] = {
    "http": ("max_body_bytes", "media_part_max_bytes", "media_request_max_bytes", "ping_seconds",
             "request_timeout_seconds", "send_timeout_seconds", "shutdown_grace_seconds", "stop_grace_seconds",
             "max_active_runs", "max_loop_lag_seconds"),
    "streams": ("stream_ttl_seconds", "max_stream_events", "max_stream_bytes", "max_streams", "max_store_bytes",
                "cache_max_entries", "cache_max_bytes",
                "redis_url", "redis_timeout_seconds", "redis_lease_seconds", "redis_max_pending_bytes"),
    "upstream": ("connect_timeout", "read_timeout", "upstream_max_retries", "upstream_max_body_bytes",
                 "upstream_max_event_bytes", *(spec.field for spec in setting_specs())),
    "routing": ("retry_backoff_seconds", "retry_backoff_max_seconds", "retry_after_max_seconds",
                "first_token_timeout", "total_timeout", "max_first_token_timeout", "max_idle_timeout",
                "max_total_timeout", "breaker_failures", "breaker_cooldown_seconds"),
    "validation": ("default_chunking",),
    "tool_runs": ("max_steps", "tool_max_output_chars", "transcript_max_chars", "transcript_max_items"),
    "run_records": ("records", "database_url", "data_dir", "record_content", "record_media_bytes", "record_retention_days",
                    "records_queue_size", "records_batch_size", "records_linger", "records_write_timeout"),
    "access": ("auth", "admin_key", "admin_key_previous", "key_cache_seconds", "concurrency_lease_seconds",
               "output_estimate_tokens", "metrics_token"),
    "logging": ("log_level", "log_json", "trace_content"),
}
"""The TOML file's tables for scalar settings, by the part of the gateway that owns them (a scalar
may also stand at the top of the file); every provider's settings (its descriptor's, app/providers/catalog.py)
are in `[upstream]`. The structured settings are tables of their own:
providers, routes, tools, mcp_servers, validators, keys, prices, aliases, provider_options_allow, cache."""

STRUCTURED = ("providers", "routes", "tools", "mcp_servers", "validators", "keys", "prices", "aliases",
              "provider_options_allow", "cache")

class ConfigError(Exception):
    """The configuration cannot be used; each of `lines` names a variable or TOML key and why.

    Raised by `load_settings` (and so by `create_app`); the command line prints the lines and exits
    with status 2, so an operator reads one line per mistake instead of a traceback."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def group_of(field: str) -> str | None:
    return next((group for group, fields in GROUPS.items() if field in fields), None)


def read_config_file(path: Path, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The TOML file's settings, flat (group tables opened), each one of `fields` (the settings'
names); ConfigError when missing or malformed."""
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError([f"FOUNDRY_CONFIG: {path} does not exist"]) from None
    except OSError as exc:
        raise ConfigError([f"FOUNDRY_CONFIG: {path} cannot be read: {exc.strerror}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
    flat: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in document.items():
        if key in GROUPS and isinstance(value, dict):
            for name, inner in value.items():
                if name in GROUPS[key]:
                    flat[name] = inner
                else:
                    errors.append(f"{path}: [{key}] {name}: {_unknown(name, fields)}")
        elif key in fields:
            flat[key] = value
        else:
            errors.append(f"{path}: {key}: {_unknown(key, [*fields, *GROUPS])}")
    if errors:
        raise ConfigError(errors)
    return flat


def _unknown(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return "unknown setting" + (f" (did you mean {close[0]}?)" if close else "")
