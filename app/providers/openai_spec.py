"""The descriptors of `openai` (Chat Completions, and the compatible servers' defaults) and
`openai-responses` (app/providers/descriptor.py): one key and base URL for both."""

from __future__ import annotations

from app.providers.descriptor import ProviderDescriptor, SettingSpec, lazy

__all__ = ["OPENAI", "OPENAI_OPTIONS", "OPENAI_RESPONSES"]

OPENAI_SETTINGS = (
    SettingSpec(field="openai_api_key", env=("OPENAI_API_KEY",),
                description="OpenAI's key: serves `openai/*` and `openai-responses/*` (unset: not served)."),
    SettingSpec(field="openai_base_url", env=("OPENAI_BASE_URL",), kind="url",
                description="OpenAI's API base URL (default https://api.openai.com/v1)."),
)

OPENAI_OPTIONS = ("top_p", "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
                  "parallel_tool_calls", "reasoning_effort", "max_completion_tokens", "user", "logprobs",
                  "top_logprobs", "store", "metadata", "prompt_cache_key", "service_tier", "safety_identifier",
                  "verbosity")
"""Also the default of the OpenAI-compatible servers of FOUNDRY_PROVIDERS (`*`)."""

OPENAI = ProviderDescriptor(
    name="openai",
    summary="OpenAI Chat Completions",
    build=lazy("app.providers.openai_chat:build_openai"),
    settings=OPENAI_SETTINGS,
    credentials=("openai_api_key",),
    base_url_setting="openai_base_url",
    default_url="https://api.openai.com",
    options=OPENAI_OPTIONS,
    model_patterns={"gpt-*": "openai", "o[0-9]*": "openai", "codex-*": "openai", "chatgpt-*": "openai"},
    price_keys=("openai/*",),
    wire="openai-chat",
    fixtures="openai-chat",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.openai_chat_stream:normalizer"),
    error_answer=lazy("app.providers.openai_wire:error_answer"),
)

OPENAI_RESPONSES = ProviderDescriptor(
    name="openai-responses",
    summary="OpenAI Responses API (the same key and base URL as `openai`)",
    build=lazy("app.providers.openai_responses:build_openai_responses"),
    settings=OPENAI_SETTINGS,
    credentials=("openai_api_key",),
    base_url_setting="openai_base_url",
    default_url="https://api.openai.com",
    options=("reasoning_effort", "reasoning_summary", "top_p", "max_output_tokens", "truncation",
             "parallel_tool_calls", "user", "text", "store", "include", "metadata", "prompt_cache_key",
             "service_tier", "safety_identifier"),
    price_keys=("openai-responses/*",),
    wire="openai-responses",
    fixtures="openai-responses",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.openai_responses_stream:normalizer"),
    error_answer=lazy("app.providers.openai_wire:error_answer"),
)
