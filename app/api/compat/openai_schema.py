"""POST /v1/chat/completions: the request as OpenAI's API defines it, plus the gateway's own
options as extra top-level fields (what the SDKs send with `extra_body`). Unknown fields are
refused (400 naming them), as OpenAI itself does."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.compat.common import GatewayExtras

__all__ = ["ChatCompletionRequest", "FORWARDED", "REFUSED"]

_STRICT = ConfigDict(extra="forbid")


class FunctionCallIn(BaseModel):
    model_config = _STRICT
    name: str = Field(min_length=1)
    arguments: str = Field(description="The call's arguments as a JSON object, serialised.")


class ToolCallIn(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(BaseModel):
    """One message; `content` is a string or an array of content parts: `text` (`refusal` on
    assistant messages), and on user messages `image_url` (a data or https URL) and `file` (a PDF
    as `file_data`). Audio and uploaded files (`file_id`) are refused."""

    model_config = _STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = Field(
        default=None, description="Reasoning of an earlier turn, as this facade streams it; accepted and not sent on.")


class FunctionIn(BaseModel):
    model_config = _STRICT
    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolIn(BaseModel):
    model_config = _STRICT
    type: Literal["function"]
    function: FunctionIn


class NamedFunction(BaseModel):
    model_config = _STRICT
    name: str


class NamedToolChoice(BaseModel):
    model_config = _STRICT
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = Field(default=False, strict=True)
    include_obfuscation: bool | None = None


FORWARDED = ("top_p", "seed", "presence_penalty", "frequency_penalty", "response_format", "logit_bias",
             "reasoning_effort", "service_tier", "metadata", "store", "verbosity",
             "prompt_cache_key", "safety_identifier")
"""OpenAI fields with no canonical counterpart: passed to the provider as `provider_options` under
the same name (OpenAI and compatible servers take them; another provider may refuse them, 400)."""

REFUSED = {
    "logprobs": "log probabilities are not produced by the gateway",
    "top_logprobs": "log probabilities are not produced by the gateway",
    "audio": "audio output is not supported by the gateway",
    "prediction": "predicted outputs are not supported by the gateway",
    "web_search_options": "web search options are not supported; use provider_options",
    "functions": "the deprecated `functions` are not supported; use `tools`",
    "function_call": "the deprecated `function_call` is not supported; use `tool_choice`",
}
"""Fields the gateway cannot honour: any value other than their default is a 400 naming them."""


class ChatCompletionRequest(GatewayExtras):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}],
                                         "stream": True, "stream_options": {"include_usage": True}}]},
    )

    model: str = Field(min_length=1, max_length=256, description="`provider/model` or a configured alias.")
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=10_000)
    tools: list[ToolIn] | None = Field(default=None, max_length=512)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    temperature: float | None = Field(default=None, strict=True, ge=0.0, le=2.0,
                                      description="Sent only when given: the provider's own default applies.")
    max_tokens: int | None = Field(default=None, strict=True, ge=1, le=1_000_000)
    max_completion_tokens: int | None = Field(default=None, strict=True, ge=1, le=1_000_000)
    stream: bool | None = Field(default=False, strict=True)
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    n: int | None = Field(default=None, strict=True, ge=1, le=128,
                          description="Only 1: the gateway runs one choice.")
    modalities: list[str] | None = Field(default=None, description='Only `["text"]`.')

    # OpenAI fields forwarded as provider options (see FORWARDED)
    top_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_format: dict[str, Any] | None = None
    logit_bias: dict[str, float] | None = None

    # OpenAI fields with a canonical counterpart, translated for every provider
    stop: str | list[str] | None = Field(default=None, description="Up to 4 stop sequences (Anthropic "
                                         "`stop_sequences`, Gemini `stopSequences`).")
    parallel_tool_calls: bool | None = Field(default=None, description="`false`: at most one tool call (Anthropic "
                                             "`disable_parallel_tool_use`).")
    reasoning_effort: str | None = None
    service_tier: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    verbosity: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    # OpenAI fields refused unless left at their default (see REFUSED)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
