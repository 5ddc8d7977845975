"""Loading the configuration loudly: every mistake one line naming its variable or TOML key.

`load_settings()` (what `create_app` and the command line use) turns pydantic's validation and
parse errors into a `ConfigError`; `unknown_variables()` warns of FOUNDRY_* variables no setting
reads, with the closest known name; `config_schema()` is the JSON schema the command line prints.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import AliasChoices, ValidationError
from pydantic_settings import SettingsError as PydanticSettingsError

from app.config_file import STRUCTURED, ConfigError, group_of
from app.providers.catalog import setting_specs
from app.settings import Settings
from app.tools.config import HttpToolConfig

__all__ = ["config_schema", "env_name", "load_settings", "secret_values", "setting_error", "unknown_variables"]

_SECRET_NAME = re.compile(r"(API_KEY|_KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
"""FOUNDRY_* and other variables whose values are secrets by their name."""

_OTHER_VARIABLES = frozenset({"FOUNDRY_CONFIG", "FOUNDRY_CHROMIUM"})  # read outside Settings (the browser tests: Chromium)


def env_name(field: str) -> str:
    """The environment variable of a setting (the provider keys keep the providers' own names)."""
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return f"FOUNDRY_{field.upper()}"


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each FOUNDRY_* variable that no setting reads, with the closest known name."""
    environ = os.environ if environ is None else environ
    known = {env_name(field) for field in Settings.model_fields if env_name(field).startswith("FOUNDRY_")}
    known |= _OTHER_VARIABLES
    warnings = []
    for name in sorted(environ):
        if name.startswith("FOUNDRY_") and name not in known and not name.startswith("FOUNDRY_TEST_"):
            close = difflib.get_close_matches(name, sorted(known), n=1)
            warnings.append(f"{name}: no such setting, ignored" + (f" (did you mean {close[0]}?)" if close else ""))
    return warnings


def setting_warnings(settings: Settings) -> list[str]:
    """Settings that load but work against each other, each with what to change."""
    warnings = []
    lease, timeout = settings.redis_lease_seconds, settings.redis_timeout_seconds
    if settings.redis_url is not None and lease <= 3 * timeout:
        # Renewed every third of the lease, a renewal waiting twice the timeout (a slow Redis, a
        # failover's pause) outlasts what is left of it: the other replicas then end this
        # replica's live streams `replica_lost` (app/streams/redis/owner.py, `_lease_loop`).
        warnings.append(f"FOUNDRY_REDIS_LEASE_SECONDS ({lease:g}) is not more than three times "
                        f"FOUNDRY_REDIS_TIMEOUT_SECONDS ({timeout:g}): one slow lease renewal lets the lease "
                        "lapse and other replicas end this replica's live streams replica_lost; raise the lease "
                        "or lower the timeout")
    return warnings


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and FOUNDRY_CONFIG, or a ConfigError naming each mistake."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError([_error_line(error) for error in exc.errors()]) from None
    except PydanticSettingsError as exc:
        raise ConfigError([_parse_error_line(exc)]) from None


def _where(field: str) -> str:
    """Where a setting's value came from: its variable when set, else the config file's key."""
    variable = env_name(field)
    if os.environ.get(variable) or field not in Settings.model_fields:
        return variable
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices) and any(os.environ.get(str(a)) for a in alias.choices):
        return next(str(a) for a in alias.choices if os.environ.get(str(a)))
    path = os.environ.get("FOUNDRY_CONFIG")
    if path:
        group = group_of(field)
        return f"{path}: " + (f"[{group}] {field}" if group else field)
    return variable


def _error_line(error: Any) -> str:
    loc = [str(part) for part in error["loc"]]
    message = str(error["msg"]).removeprefix("Value error, ")
    if not loc:  # a check across settings: its message names them
        return message
    field = loc[0] if loc[0] in Settings.model_fields else next(
        (f for f, info in Settings.model_fields.items()
         if isinstance(info.validation_alias, AliasChoices) and loc[0] in info.validation_alias.choices), loc[0])
    inner = ".".join(loc[1:])
    where = _where(field)
    if message.startswith(f"{field}.") and where.endswith(f": {field}"):  # the message names the key itself
        return f"{where.removesuffix(field)}{message}"
    return f"{where}: " + (f"{inner}: " if inner else "") + message


def _parse_error_line(exc: PydanticSettingsError) -> str:
    # pydantic-settings: 'error parsing value for field "aliases" from source "EnvSettingsSource"'
    match = re.search(r'field "([^"]+)"', str(exc))
    field = match.group(1) if match else "?"
    cause = exc.__cause__
    reason = f"not valid JSON: {cause}" if isinstance(cause, json.JSONDecodeError) else f"cannot be parsed: {cause}"
    return f"{_where(field)}: {reason}"


def config_schema() -> dict[str, Any]:
    """The JSON schema of the configuration, each setting with its variable and TOML table."""
    schema = Settings.model_json_schema(by_alias=False)
    for field, prop in schema.get("properties", {}).items():
        prop["x-env"] = env_name(field)
        group = group_of(field)
        prop["x-toml"] = f"[{group}] {field}" if group else (f"[{field}]" if field in STRUCTURED else field)
    return schema


def setting_error(field: str, message: str) -> ConfigError:
    """A ConfigError for a setting found wrong after loading (a route naming no served provider)."""
    return ConfigError([f"{_where(field)}: {message}"])


def secret_values(settings: Settings) -> list[str]:
    """Every configured secret: provider keys (settings and the compatible providers' env
    variables) and FOUNDRY_* variables named like secrets; scrubbed from errors and logs."""
    named = (settings.admin_key, settings.admin_key_previous, settings.metrics_token)
    values = [s.get_secret_value() for s in named if s is not None]
    values += [value for spec in setting_specs() if spec.kind == "secret"
               and (value := settings.provider_config().secret(spec.field))]
    values += [key for p in settings.providers if (key := p.api_key())]
    values += [v.get_secret_value() for t in settings.tools if isinstance(t, HttpToolConfig)
               for v in t.headers.values()]
    values += [v for k, v in os.environ.items() if _SECRET_NAME.search(k)]
    for url in (settings.redis_url, settings.database_url):
        if url is not None:
            values += _url_secrets(url.get_secret_value())
    return values


def _url_secrets(url: str) -> list[str]:
    """A store URL's password, alone and as the URL's user part (`user:password@`, so that a short
    one is scrubbed where a URL quotes it), and password query values. Not the whole URL: its
    host, port and database are what an operator reads in the start-up lines."""
    parts = urlsplit(url.split(",")[0])  # a cluster's seeds share one user part
    found = [value for name, value in parse_qsl(parts.query) if name.lower() == "password"]
    userinfo, at, _ = url.partition("://")[2].rpartition("@")
    if at and parts.password:
        found += [parts.password, unquote(parts.password), f"{userinfo}@"]
    return found
