"""What one provider is, said once: `ProviderDescriptor` (DESIGN.md section 4).

Each provider module exports one `DESCRIPTOR`; app/providers/catalog.py lists them. Everything
that needs to know the providers reads that list: the settings (`SettingSpec`: field, environment
names, secret or URL), start-up lines and `config check` (`credentials`), server addresses
(`base_url_setting`, `default_url`), option defaults (`options`), model patterns, the conformance
suite (`fixtures`, `framing`, `normalizer`) and the docs' provider table (tests/test_provider_catalog.py).

A descriptor lives in a light module of its provider's set (`<provider>_spec.py`): its code
fields are `lazy("module:function")`, so reading the catalog imports no provider code.

The request path of a provider on the gateway's own HTTP client (app/providers/upstream.py):
`request` builds an `UpstreamRequest` (URL, headers, body bytes) from a `ProviderRequest`;
`auth` (optional) is awaited on that final request just before it is sent, so it can add headers
or sign the exact body bytes (SigV4, a refreshed bearer token); `framing` decodes the body's bytes
into provider events; `normalizer` turns those into patches; `error_answer` maps an HTTP error
answer (its bounded body) to the gateway's error through app/providers/errors.py.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from app.core.errors import UpstreamError
    from app.providers.base import ProviderAdapter, ProviderRequest, StreamNormalizer
    from app.providers.config import ProviderConfig, ReadLimits
    from app.providers.framing import FrameDecoder

__all__ = ["ProviderDescriptor", "RequestAuth", "SettingSpec", "UpstreamRequest", "lazy"]


def lazy(target: str) -> Callable[..., Any]:
    """`package.module:name` (or `:Class.method`), imported at its first call: a descriptor is
    light (`config check`, `--help` import no provider code, no SDK, no aiohttp), its code is
    loaded when the gateway builds its adapters. tests/test_provider_catalog.py resolves every one."""
    module_name, _, attribute = target.partition(":")
    resolved: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not resolved:
            value: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                value = getattr(value, part)
            resolved.append(value)
        return resolved[0](*args, **kwargs)

    call.__qualname__ = call.__name__ = target
    return call


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingSpec:
    """One setting a provider reads: a field of `Settings` (and of the TOML file's `[upstream]`)."""

    field: str
    """The settings field, e.g. `openai_api_key` (also its TOML key)."""
    env: tuple[str, ...]
    """The environment variables that set it, first one named in messages (`OPENAI_API_KEY`)."""
    description: str
    kind: Literal["secret", "url", "text"] = "secret"
    """`secret`: a SecretStr, never logged; `url`: an http(s) base URL, checked; `text`: plain."""


@dataclass(slots=True, kw_only=True)
class UpstreamRequest:
    """One HTTP request to a provider, as it goes on the wire: what `RequestAuth` signs."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"


class RequestAuth(Protocol):
    """Credentials applied to the final request (headers added, the body bytes signed), awaited
    per request just before it is sent: a static key, a bearer token refreshed before expiry,
    SigV4. Raises `UpstreamError` (code `upstream_auth`) when no credential can be had."""

    async def apply(self, request: UpstreamRequest) -> None: ...


Builder = Callable[["ProviderConfig", Mapping[str, Any]], "dict[str, ProviderAdapter]"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderDescriptor:
    name: str
    """The provider's name in `provider/model`."""
    summary: str
    """One line for the docs' provider table and `config check`."""
    build: Builder
    """(config, injected clients by provider name) -> the adapters served ({} when not configured):
    the client factory and the adapter in one."""
    settings: tuple[SettingSpec, ...] = ()
    credentials: tuple[str, ...] = ()
    """Setting fields of which one set means served; () means always served (the mock)."""
    base_url_setting: str | None = None
    default_url: str | None = None
    options: tuple[str, ...] = ()
    """The default `provider_options` allow-list (app/providers/options.py)."""
    model_patterns: Mapping[str, str] = field(default_factory=dict)
    """Bare model names this provider answers: glob pattern -> this provider's name."""
    price_keys: tuple[str, ...] = ()
    """The price table's patterns for this provider's models (`openai/*`)."""
    wire: str | None = None
    """The wire format it speaks (`openai-chat`, ...); a drop-in facade of that wire passes through."""
    fixtures: str | None = None
    """The recordings' folder (shared fixtures or tests/fixtures) the conformance suite replays."""
    framing: Callable[[ReadLimits], FrameDecoder[Any]] | None = None
    """The frame decoder of its answers, bounded by the read limits."""
    normalizer: Callable[[str], StreamNormalizer[Any]] | None = None
    """(provider name) -> a fresh normalizer of its provider events."""
    request: Callable[[ProviderRequest, ProviderConfig], UpstreamRequest] | None = None
    """The request builder of the gateway's own client (app/providers/upstream.py)."""
    auth: Callable[[ProviderConfig], RequestAuth | None] | None = None
    """The credentials hook (None: none needed, or carried in `request`'s headers)."""
    status: Callable[[ProviderConfig], tuple[bool, str]] | None = None
    """(config) -> (served, why) for a provider whose credentials are not one setting (a cloud's
    credential chain): start-up lines and `config check` name what is missing."""
    error_answer: Callable[[int, Mapping[str, str], bytes, str], UpstreamError] | None = None
    """(status, headers, bounded body, provider) -> the gateway's error for an HTTP error answer."""
