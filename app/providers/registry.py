"""Which providers this gateway serves, and which adapter answers `provider/model`.

Adapters are built from the provider config (`Settings.provider_config()`) and injected
clients: `clients={"openai": aiohttp.ClientSession(...)}` hands a session to the provider of that
name, used for its upstream calls and never closed by it (tests, embedders: a proxy, a trust
store, a loopback fake); a provider's credentials hook goes in by its own key
(`bedrock-signer`, `azure-auth`, `vertex-auth`). SDK clients are refused: the SDKs left the
streaming path (docs/providers.md). `adapters={...}` injects whole adapters. A provider
with no credentials is not served; `mock` always is. Each provider module contributes one
descriptor, listed once in app/providers/catalog.py (explicit, no import-time registration).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from app.core.errors import RequestError
from app.providers.base import ProviderAdapter
from app.providers.catalog import PROVIDERS, default_patterns, provider_names
from app.providers.config import ProviderConfig

__all__ = ["ProviderRegistry", "build_registry"]


class ProviderRegistry:
    def __init__(self, adapters: Mapping[str, ProviderAdapter], aliases: Mapping[str, str] | None = None,
                 unserved: frozenset[str] = frozenset(), patterns: Mapping[str, str] | None = None) -> None:
        self._adapters = dict(adapters)
        self._aliases = dict(aliases or {})
        self._unserved = unserved
        """Providers this gateway knows but does not serve (no credentials): not "unknown" to a caller."""
        self.patterns = dict(default_patterns() if patterns is None else patterns)
        """Bare model names -> provider: glob pattern -> provider name, the first match wins."""

    @property
    def names(self) -> list[str]:
        return sorted(self._adapters)

    @property
    def aliases(self) -> dict[str, str]:
        """The configured aliases: alias -> provider/model."""
        return dict(self._aliases)

    def get(self, name: str) -> ProviderAdapter | None:
        return self._adapters.get(name)

    def qualify(self, model: str, *, responses: bool = False) -> str:
        """A bare model name as a client sends it (`claude-sonnet-4-5`, `gpt-5`) -> `provider/model`
        by the first pattern it matches, when that provider is served; an alias or a qualified
        name as it is. `responses`: on the Responses facade, `openai` names openai-responses."""
        if model in self._aliases or "/" in model:
            return model
        for pattern, provider in self.patterns.items():
            if fnmatch.fnmatchcase(model, pattern):
                if responses and provider == "openai" and "openai-responses" in self._adapters:
                    provider = "openai-responses"
                return f"{provider}/{model}" if provider in self._adapters else model
        return model

    def bare_names(self, provider: str) -> list[str]:
        """The patterns that name `provider`'s models by their bare names."""
        return [pattern for pattern, name in self.patterns.items() if name == provider]

    def resolve(self, model: str) -> tuple[ProviderAdapter, str, str]:
        """`provider/model` (or an alias) -> (adapter, provider name, upstream model name)."""
        target = self._aliases.get(model, model)
        provider, sep, name = target.partition("/")
        if not sep or not provider or not name:
            raise RequestError(
                f"model must be 'provider/model' or a configured alias, got {model!r}",
                code="invalid_model", status=422, field="model",
            )
        adapter = self._adapters.get(provider)
        if adapter is None:
            what = f"provider {provider!r} is not served by this gateway (its credentials are not configured)" \
                if provider in self._unserved else f"unknown provider {provider!r}"
            raise RequestError(
                f"{what}; served: {', '.join(self.names)}",
                code="model_not_found", status=404, field="model",
            )
        return adapter, provider, name

    def readiness(self) -> dict[str, bool]:
        return {name: bool(adapter.ready()) for name, adapter in sorted(self._adapters.items())}

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            close = getattr(adapter, "aclose", None)
            if close is not None:
                await close()


def build_registry(
    config: ProviderConfig,
    clients: Mapping[str, Any] | None = None,
    adapters: Mapping[str, ProviderAdapter] | None = None,
) -> ProviderRegistry:
    clients = clients or {}
    known = {*provider_names(), *(provider.name for provider in config.compatible)}
    _check_sessions(clients, known)
    built: dict[str, ProviderAdapter] = {}
    for provider in PROVIDERS:
        built.update(provider.build(config, clients))
    built.update(adapters or {})
    return ProviderRegistry(built, config.aliases, unserved=frozenset(known - set(built)), patterns=config.model_patterns)


def _check_sessions(clients: Mapping[str, Any], providers: set[str]) -> None:
    """A client injected under a provider's name is an `aiohttp.ClientSession`; anything else (an
    SDK client, an httpx client) is a TypeError naming the key."""
    import aiohttp

    for name, client in clients.items():
        if name in providers and not isinstance(client, aiohttp.ClientSession):
            raise TypeError(f"clients[{name!r}] must be an aiohttp.ClientSession, got {type(client).__name__} "
                            "(SDK clients are not used on the streaming path: docs/providers.md)")
