"""The descriptor of `gemini` (app/providers/descriptor.py)."""

from __future__ import annotations

from app.providers.descriptor import ProviderDescriptor, SettingSpec, lazy

__all__ = ["GEMINI"]

GEMINI = ProviderDescriptor(
    name="gemini",
    summary="Google Gemini `streamGenerateContent` (and Vertex AI via `GEMINI_BASE_URL`)",
    build=lazy("app.providers.gemini:build_gemini"),
    settings=(
        SettingSpec(field="gemini_api_key", env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
                    description="Google's Gemini API key (GEMINI_API_KEY or GOOGLE_API_KEY): serves `gemini/*` "
                                "(unset: not served)."),
        SettingSpec(field="gemini_base_url", env=("GEMINI_BASE_URL",), kind="url",
                    description="The Gemini API's base URL (default https://generativelanguage.googleapis.com)."),
    ),
    credentials=("gemini_api_key",),
    base_url_setting="gemini_base_url",
    default_url="https://generativelanguage.googleapis.com",
    options=("generationConfig", "safetySettings"),
    model_patterns={"gemini-*": "gemini"},
    price_keys=("gemini/*",),
    fixtures="gemini",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.gemini_stream:normalizer"),
    request=lazy("app.providers.gemini:upstream_request"),
    error_answer=lazy("app.providers.gemini:error_answer"),
)
