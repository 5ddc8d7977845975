"""Which providers this gateway serves, and which adapter answers `provider/model`.

Adapters are built from the provider config (`Settings.provider_config()`) and injected
clients: `clients={"openai": AsyncOpenAI(...)}` hands a configured (or fake) SDK client to the
provider of that name; `adapters={...}` injects whole adapters (tests, embedders). A provider
with no credentials is not served; `mock` always is. Each provider module contributes one
builder, listed in `_BUILDERS` (explicit, no import-time registration).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from app.core.errors import RequestError
from app.providers.anthropic import build_anthropic
from app.providers.base import ProviderAdapter
from app.providers.config import ProviderConfig
from app.providers.gemini import build_gemini
from app.providers.mock import MockAdapter
from app.providers.openai_chat import build_openai
from app.providers.openai_responses import build_openai_responses

__all__ = ["ProviderRegistry", "build_registry"]

Builder = Callable[[ProviderConfig, Mapping[str, Any]], dict[str, ProviderAdapter]]


def _mock(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    return {"mock": MockAdapter()}


_BUILDERS: list[Builder] = [_mock, build_anthropic, build_openai, build_openai_responses, build_gemini]
_BUILT_IN = frozenset({"openai", "openai-responses", "anthropic", "gemini"})
"""The providers the builders serve once their credentials are set."""


class ProviderRegistry:
    def __init__(self, adapters: Mapping[str, ProviderAdapter], aliases: Mapping[str, str] | None = None,
                 unserved: frozenset[str] = frozenset()) -> None:
        self._adapters = dict(adapters)
        self._aliases = dict(aliases or {})
        self._unserved = unserved
        """Providers this gateway knows but does not serve (no credentials): not "unknown" to a caller."""

    @property
    def names(self) -> list[str]:
        return sorted(self._adapters)

    @property
    def aliases(self) -> dict[str, str]:
        """The configured aliases: alias -> provider/model."""
        return dict(self._aliases)

    def get(self, name: str) -> ProviderAdapter | None:
        return self._adapters.get(name)

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
    built: dict[str, ProviderAdapter] = {}
    for builder in _BUILDERS:
        built.update(builder(config, clients))
    built.update(adapters or {})
    known = _BUILT_IN | {provider.name for provider in config.compatible}
    return ProviderRegistry(built, config.aliases, unserved=frozenset(known - set(built)))
