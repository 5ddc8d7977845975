"""The descriptor of `anthropic` (app/providers/descriptor.py)."""

from __future__ import annotations

from app.providers.descriptor import ProviderDescriptor, SettingSpec, lazy

__all__ = ["ANTHROPIC"]

ANTHROPIC = ProviderDescriptor(
    name="anthropic",
    summary="Anthropic Messages",
    build=lazy("app.providers.anthropic:build_anthropic"),
    settings=(
        SettingSpec(field="anthropic_api_key", env=("ANTHROPIC_API_KEY",),
                    description="Anthropic's key: serves `anthropic/*` (unset: not served)."),
        SettingSpec(field="anthropic_base_url", env=("ANTHROPIC_BASE_URL",), kind="url",
                    description="Anthropic's API base URL (default https://api.anthropic.com)."),
    ),
    credentials=("anthropic_api_key",),
    base_url_setting="anthropic_base_url",
    default_url="https://api.anthropic.com",
    options=("top_k", "top_p", "stop_sequences", "thinking", "metadata", "output_config", "service_tier"),
    model_patterns={"claude-*": "anthropic"},
    price_keys=("anthropic/*",),
    wire="anthropic-messages",
    fixtures="anthropic",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.anthropic_stream:normalizer"),
    request=lazy("app.providers.anthropic_wire:upstream_request"),
    error_answer=lazy("app.providers.anthropic_wire:error_answer"),
)
