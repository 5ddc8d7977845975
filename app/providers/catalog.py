"""The providers this gateway knows, listed once (DESIGN.md section 4).

Adding a provider is one module set (its request builder, frame decoder and normalizer, and a
light `<provider>_spec.py` holding its descriptor, app/providers/descriptor.py) and one entry in
`PROVIDERS`. Reading the list imports no provider code (the descriptors' code is `lazy`): the settings, start-up
lines, `config check`, server addresses, option defaults, model patterns, the conformance suite
and the docs' provider table read this list (docs/development.md, "Adding a provider").
"""

from __future__ import annotations

from app.providers.anthropic_spec import ANTHROPIC
from app.providers.cloud_spec import AZURE, AZURE_RESPONSES, BEDROCK, VERTEX
from app.providers.descriptor import ProviderDescriptor, SettingSpec
from app.providers.gemini_spec import GEMINI
from app.providers.mock_spec import MOCK
from app.providers.openai_spec import OPENAI, OPENAI_OPTIONS, OPENAI_RESPONSES

__all__ = ["PROVIDERS", "default_options", "default_patterns", "descriptor", "provider_names", "setting_specs"]

PROVIDERS: tuple[ProviderDescriptor, ...] = (
    MOCK,
    OPENAI,
    OPENAI_RESPONSES,
    ANTHROPIC,
    GEMINI,
    BEDROCK,
    VERTEX,
    AZURE,
    AZURE_RESPONSES,
)


def provider_names() -> tuple[str, ...]:
    return tuple(d.name for d in PROVIDERS)


def descriptor(name: str) -> ProviderDescriptor | None:
    return next((d for d in PROVIDERS if d.name == name), None)


def setting_specs() -> tuple[SettingSpec, ...]:
    """Every provider setting once (providers may share one: `openai` and `openai-responses`)."""
    seen: dict[str, SettingSpec] = {}
    for d in PROVIDERS:
        for spec in d.settings:
            seen.setdefault(spec.field, spec)
    return tuple(seen.values())


def default_options() -> dict[str, tuple[str, ...]]:
    """The `provider_options` allow-list of each provider; `*` for the OpenAI-compatible servers."""
    return {**{d.name: d.options for d in PROVIDERS}, "*": OPENAI_OPTIONS}


def default_patterns() -> dict[str, str]:
    """Bare model names as their own SDKs send them -> provider (`claude-*` -> anthropic)."""
    return {pattern: name for d in PROVIDERS for pattern, name in d.model_patterns.items()}
