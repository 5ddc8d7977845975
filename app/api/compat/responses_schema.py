"""POST /v1/responses: the request as OpenAI's Responses API defines it, plus the gateway's own
options as extra top-level fields (the SDKs' `extra_body`). Unknown fields are refused (400
naming them), as OpenAI itself does. `input` items and `tools` are read by
app/api/compat/responses_request.py, which names the exact item or part it cannot carry."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.api.compat.common import GatewayExtras

__all__ = ["FORWARDED", "OPTIONAL", "REFUSED", "FunctionToolIn", "ReasoningIn", "ResponsesRequest", "TextIn"]

_STRICT = ConfigDict(extra="allow")
"""Nested fields the facade does not know pass through to an OpenAI Responses model; translated,
they are refused by name (`refuse_unknown`)."""
_Items = Annotated[list[dict[str, Any]], Field(min_length=1, max_length=10_000)]
_MetadataKey = Annotated[str, StringConstraints(max_length=64)]
_MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class ReasoningIn(BaseModel):
    model_config = _STRICT
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = Field(
        default=None, description="The deprecated spelling of `summary`.")


class FormatIn(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["text", "json_schema"] = Field(
        description='`"text"`, or `"json_schema"`: structured output, translated to every provider.')
    name: str | None = Field(default=None, max_length=64)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", description="The JSON Schema of the answer.")
    description: str | None = None
    strict: bool | None = None


class TextIn(BaseModel):
    model_config = _STRICT
    format: FormatIn | None = None
    verbosity: Literal["low", "medium", "high"] | None = Field(
        default=None, description="Carried to OpenAI Responses (a same-wire request); refused elsewhere.")


class FunctionToolIn(BaseModel):
    model_config = _STRICT
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class StreamOptionsIn(BaseModel):
    model_config = _STRICT
    include_obfuscation: bool | None = Field(default=None, description="Accepted: the gateway adds no "
                                                                        "obfuscation field.")


FORWARDED = {"top_p": "top_p", "parallel_tool_calls": "parallel_tool_calls", "user": "user",
             "service_tier": "service_tier", "prompt_cache_key": "prompt_cache_key",
             "safety_identifier": "safety_identifier"}
"""Responses fields with no canonical counterpart -> the `provider_options` key they are passed on
as (the provider's allow-list may refuse them: 400 naming the field). `reasoning` is passed on as
`reasoning_effort` and `reasoning_summary` (app/api/compat/responses_request.py)."""

OPTIONAL = {"store": "store", "include": "include"}
"""Carried as the provider option of the same name where the provider's allow-list takes it (OpenAI
chat and Responses, which store; `include` to OpenAI Responses, whose encrypted reasoning then comes
back); a no-op where the provider stores nothing (Anthropic, Gemini) or has no opaque reasoning to
include (Anthropic's thinking signature is in the gateway's answer anyway). Only as the client sent
it: chat's default is not to store, Responses' to store."""

REFUSED = {
    "background": "background responses are not supported by the gateway",
    "conversation": "conversations are not stored by the gateway; use previous_response_id or send the input",
    "prompt": "stored prompt templates are not supported by the gateway",
    "max_tool_calls": "the gateway does not cap built-in tool calls; use max_steps",
    "top_logprobs": "log probabilities are not produced by the gateway",
    "prompt_cache_retention": "prompt cache retention is not supported by the gateway",
}
"""Fields the gateway cannot honour: any value other than their default is a 400 naming them."""


class ResponsesRequest(GatewayExtras):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"model": "mock/simple", "input": "hi", "stream": True}]},
    )

    model: str = Field(min_length=1, max_length=256, description="`provider/model` or a configured alias.")
    input: str | _Items = Field(
        description="A string (one user message) or items: messages (`input_text`/`output_text` parts), "
                    "`function_call`, `function_call_output`, `reasoning` (sent on only when its "
                    "`encrypted_content` is the gateway's: a signed thinking block).")
    instructions: str | None = None
    previous_response_id: str | None = Field(
        default=None, max_length=128,
        description="Continue a response of the same key from its recorded transcript (404 otherwise).")
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=512, description="Function tools only.")
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, strict=True, ge=0.0, le=2.0,
                                      description="Sent only when given: the provider's own default applies.")
    max_output_tokens: int | None = Field(default=None, strict=True, ge=1, le=1_000_000)
    reasoning: ReasoningIn | None = None
    metadata: dict[_MetadataKey, _MetadataValue] | None = Field(default=None, max_length=16,
                                            description="Echoed on the response; not sent upstream.")
    store: bool | None = Field(default=None, description="Carried as sent to providers that store (OpenAI chat and "
                                                         "Responses); a no-op where the provider stores nothing. "
                                                         "Whether the gateway keeps the run is its records setting.")
    stream: bool | None = Field(default=False, strict=True)
    stream_options: StreamOptionsIn | None = None
    text: TextIn | None = None
    include: list[str] | None = Field(default=None, description="Carried to OpenAI Responses; elsewhere only "
                                      "`reasoning.encrypted_content`: Anthropic's thinking signature, opaque "
                                      "(a no-op where the provider has none).")
    truncation: Literal["disabled"] | None = Field(default=None, description='Only `"disabled"`.')

    # Forwarded as provider options (see FORWARDED)
    top_p: float | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = Field(default=None, max_length=256)
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    # Refused unless left at their default (see REFUSED)
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    max_tool_calls: int | None = None
    top_logprobs: int | None = None
    prompt_cache_retention: str | None = None
