"""What the provider modules need from the gateway's configuration, and nothing else.

`Settings.provider_config()` (app/settings.py) builds it; providers never import `Settings`
(nor, through it, validation or tools). Keys stay `SecretStr`: never printed or logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr

__all__ = ["DEFAULT_LIMITS", "PROVIDER_NAME_RE", "BaseUrl", "CompatibleProvider",
           "ProviderConfig", "ReadLimits", "check_base_url"]

PROVIDER_NAME_RE = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


def check_base_url(url: str) -> str:
    """An upstream base URL is http(s)://host[...]: anything else would be reported served and then
    fail every request (a retried 502), so it is refused with the configuration. The URL is not
    echoed (its user part may hold a credential)."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 -- parsing the port raises ValueError for one that is not a number
    except ValueError:
        raise ValueError("not a URL: expected http(s)://host[:port][/path]") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("must start with http:// or https:// (e.g. https://api.openai.com/v1)")
    if not parts.hostname:
        raise ValueError("has no host: expected http(s)://host[:port][/path]")
    return url.strip()


BaseUrl = Annotated[str, AfterValidator(check_base_url)]


class CompatibleProvider(BaseModel):
    """A further OpenAI-compatible server, served as `<name>/<model>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=PROVIDER_NAME_RE)
    base_url: BaseUrl
    api_key_env: str | None = Field(
        default=None, description="Environment variable holding the key; None for servers that need none."
    )
    include_usage: bool = Field(
        default=True, description="Send stream_options.include_usage (some servers reject it)."
    )

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadLimits:
    """How much of an upstream answer the gateway reads (DESIGN.md section 4: every read bounded)."""

    max_body_bytes: int = 1 << 20
    """An error answer's body (or a JSON one where an event stream was asked), after decompression."""
    max_event_bytes: int = 1 << 20
    """One SSE line, and one SSE event's data."""
    max_idle_lines: int = 10_000
    """SSE lines that carry nothing (blank, comments) before an event, and in one read."""


DEFAULT_LIMITS = ReadLimits()


def _default_patterns() -> dict[str, str]:
    from app.providers.catalog import default_patterns  # the catalog imports every provider module

    return default_patterns()


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderConfig:
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    """Longest silence from an upstream mid-stream."""
    max_retries: int = 1
    """SDK retries before a response starts (never after: no duplicate output)."""
    values: Mapping[str, SecretStr | str | None] = field(default_factory=dict)
    """The providers' own settings by field name (their descriptors' `SettingSpec`s):
    `openai_api_key`, `gemini_base_url`, ..."""
    compatible: tuple[CompatibleProvider, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Model aliases: alias -> provider/model."""
    model_patterns: Mapping[str, str] = field(default_factory=_default_patterns)
    """Bare model names as clients send them: glob pattern -> provider, the first match wins."""
    limits: ReadLimits = field(default_factory=ReadLimits)

    def secret(self, name: str) -> str | None:
        """A provider setting's value (a secret revealed for the request that carries it), None when unset or empty."""
        value = self.values.get(name)
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        return text or None
