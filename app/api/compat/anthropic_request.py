"""POST /v1/messages: Anthropic's Messages request, and its mapping to the canonical RunSpec.

Content blocks: `text` (several stay several, `cache_control` kept, on `system` too); `image` and
`document` (base64 or url source) on user turns and in tool results; `tool_use`, `thinking` and
`redacted_thinking` on assistant turns (thinking goes back as the message's reasoning blocks,
signature kept); `tool_result` on user turns (each becomes a canonical `tool` message, before the
turn's other blocks). Server-tool blocks are refused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.api.compat.common import FacadeError, GatewayExtras, lenient, refuse_unknown, run_spec, validation_reason
from app.api.compat.parts import anthropic_part
from app.api.compat.responses_request import OPAQUE_PREFIX, opaque_block
from app.core.messages import ContentPart, Message, ReasoningBlock, ToolCall, ToolSpec, check_unique_tool_names
from app.core.parts import CacheControl
from app.pipeline import RunSpec
from app.providers.base import ProviderRequest

__all__ = ["FORWARDED", "CountTokensRequest", "MessagesRequest", "to_run_spec"]

_STRICT = ConfigDict(extra="forbid")
FORWARDED = ("top_p", "top_k", "thinking", "service_tier")
"""Anthropic fields with no canonical counterpart: passed to the provider as `provider_options`
under the same name (the Anthropic provider takes them; another may refuse them, 400)."""


class MessageIn(BaseModel):
    model_config = _STRICT
    role: Literal["user", "assistant", "system"] = Field(
        description="`system` inside `messages` (as Claude Code sends it) is a system message.")
    content: str | list[dict[str, Any]]


class ToolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    type: str | None = Field(default=None, description="`custom` (or none). A server tool passes through to "
                             "Anthropic; elsewhere it is refused.")
    cache_control: dict[str, Any] | None = Field(default=None, description="Carried to Anthropic; a no-op elsewhere.")
    strict: bool | None = None
    eager_input_streaming: bool | None = Field(default=None, description="Delivery only: carried to Anthropic.")


class ToolChoiceIn(BaseModel):
    model_config = _STRICT
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class OutputFormatIn(BaseModel):
    model_config = _STRICT
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema", description="The JSON Schema the answer follows.")


class OutputConfigIn(BaseModel):
    """What `messages.parse` sends: `format` is translated for every provider (structured output);
    `effort` is Anthropic's and goes to Anthropic only (refused, 400, elsewhere)."""

    model_config = _STRICT
    format: OutputFormatIn | None = None
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None


class MessagesRequest(GatewayExtras):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"model": "mock/simple", "max_tokens": 256,
                                         "messages": [{"role": "user", "content": "hi"}], "stream": True}]},
    )

    model: str = Field(min_length=1, max_length=256, description="`provider/model` or a configured alias.")
    max_tokens: int = Field(ge=1, le=1_000_000, strict=True)
    messages: list[MessageIn] = Field(min_length=1, max_length=10_000)
    system: str | list[dict[str, Any]] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0, strict=True,
                                      description="Sent only when given: the provider's own default applies.")
    tools: list[ToolIn] | None = Field(default=None, max_length=512)
    tool_choice: ToolChoiceIn | None = None
    stream: bool = Field(default=False, strict=True)
    metadata: dict[str, Any] | None = Field(default=None, description="Accepted; not sent upstream.")
    stop_sequences: list[str] | None = Field(default=None, max_length=16)
    cache_control: dict[str, Any] | None = Field(default=None, description="Automatic prompt caching: carried to "
                                                 "Anthropic; a no-op where the provider caches by itself.")
    output_config: OutputConfigIn | None = None
    top_p: float | None = None
    top_k: int | None = None
    thinking: dict[str, Any] | None = None
    service_tier: str | None = None


class CountTokensRequest(MessagesRequest):
    """`POST /v1/messages/count_tokens`: a Messages request without `max_tokens`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"model": "anthropic/claude-sonnet-4-5",
                                         "messages": [{"role": "user", "content": "hi"}]}]},
    )

    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000, strict=True,  # type: ignore[assignment]
                                   description="Not needed to count; accepted.")


def to_run_spec(body: MessagesRequest, *, passthrough: bool = False) -> RunSpec:
    """The canonical request. `passthrough`: Anthropic gets the client's own request; what does not
    translate is only left out of the canonical one (records, validators)."""
    if not passthrough:
        refuse_unknown(body, brackets=False)
    specs: list[ToolSpec] = []
    for i, tool in enumerate(body.tools or ()):
        specs += lenient(lambda: [_tool(i, tool)], passthrough, [])  # noqa: B023
    tools = tuple(specs)
    try:
        check_unique_tool_names(tools)
    except ValueError as exc:
        raise FacadeError(str(exc), param="tools") from None
    messages = [_build("system", role="system", content=s) for s in [_system(body.system)] if s]
    for i, m in enumerate(body.messages):
        messages.extend(lenient(lambda: _message(i, m), passthrough, []))  # noqa: B023
    return run_spec(ProviderRequest(
        model=body.model, messages=tuple(messages), tools=tools, tool_choice=_choice(body.tool_choice, tools),
        temperature=body.temperature, max_tokens=body.max_tokens,
        options=_options(body), stop=tuple(body.stop_sequences or ()), cache_control=body.cache_control,
        output_schema=body.output_config.format.schema_ if body.output_config and body.output_config.format else None,
        parallel_tool_calls=False if body.tool_choice and body.tool_choice.disable_parallel_tool_use else None,
    ), body)


def _options(body: MessagesRequest) -> dict[str, Any]:
    options = {name: getattr(body, name) for name in FORWARDED if getattr(body, name) is not None}
    if body.output_config is not None and body.output_config.effort is not None:
        options["output_config"] = {"effort": body.output_config.effort}
    return options


def _tool(i: int, tool: ToolIn) -> ToolSpec:
    if tool.type not in (None, "custom"):
        raise FacadeError(f"tools.{i}.type: server tools ({tool.type!r}) are served by Anthropic models only",
                          param=f"tools.{i}.type")
    try:
        return ToolSpec(name=tool.name, description=tool.description, parameters=tool.input_schema, strict=tool.strict,
                        cache_control=tool.cache_control, eager_input_streaming=tool.eager_input_streaming)
    except ValidationError as exc:
        raise FacadeError(f"tools.{i}: {validation_reason(exc)}", param=f"tools.{i}") from None


def _choice(choice: ToolChoiceIn | None, tools: tuple[ToolSpec, ...]) -> str | None:
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name or choice.name not in {t.name for t in tools}:
            raise FacadeError(f"tool_choice.name: {choice.name!r} is not among tools", param="tool_choice.name")
        return choice.name
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


def _system(system: str | list[dict[str, Any]] | None) -> str | tuple[ContentPart, ...]:
    """Text blocks stay blocks (each with its `cache_control`), so Anthropic gets them as sent."""
    if system is None or isinstance(system, str):
        return system or ""
    return tuple(_text_block(f"system.{j}", b) for j, b in enumerate(system))


def _text_block(param: str, block: dict[str, Any]) -> ContentPart:
    if block.get("type") != "text":
        raise FacadeError(f"{param}.type: only text blocks are supported here, got {block.get('type')!r}",
                          param=f"{param}.type")
    return anthropic_part(param, block)


def _message(i: int, m: MessageIn) -> list[Message]:
    param = f"messages.{i}.content"
    if isinstance(m.content, str):
        return [_build(param, role=m.role, content=m.content)]
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    reasoning: list[ReasoningBlock] = []
    results: list[Message] = []
    for j, block in enumerate(m.content):
        kind, where = block.get("type"), f"{param}.{j}"
        if kind == "text" or (kind in ("image", "document") and m.role == "user"):
            parts.append(anthropic_part(where, block))
        elif kind == "tool_use" and m.role == "assistant":
            calls.append(_call(where, block))
        elif kind in ("thinking", "redacted_thinking") and m.role == "assistant":
            reasoning.append(_thinking(where, block))
        elif kind == "tool_result" and m.role == "user":
            results.append(_result(where, block))
        else:
            raise FacadeError(f"{where}.type: unsupported content block {kind!r} in a {m.role} message",
                              param=f"{where}.type")
    out = list(results)
    if parts or calls or reasoning or not results:
        out.append(_build(param, role=m.role, content=tuple(parts), tool_calls=tuple(calls),
                          reasoning=tuple(reasoning)))
    return out


def _call(where: str, block: dict[str, Any]) -> ToolCall:
    try:
        return ToolCall(id=block.get("id"), name=block.get("name"), arguments=block.get("input", {}),
                        cache_control=block.get("cache_control"))
    except ValidationError as exc:
        raise FacadeError(f"{where}: {validation_reason(exc)}", param=where) from None


def _thinking(where: str, block: dict[str, Any]) -> ReasoningBlock:
    """Thinking goes back unchanged with its signature (the provider checks it); redacted as its data;
    a signature the gateway wrapped (another provider's reasoning) back to that provider only."""
    signature = block.get("signature") or None
    if isinstance(signature, str) and signature.startswith(OPAQUE_PREFIX):  # another provider's, which the gateway wrapped
        return opaque_block(signature, block.get("thinking", ""), f"{where}.signature")
    try:
        if block["type"] == "redacted_thinking":
            return ReasoningBlock(redacted=block.get("data"), provider="anthropic")
        return ReasoningBlock(text=block.get("thinking", ""), signature=signature, provider="anthropic")
    except ValidationError as exc:
        raise FacadeError(f"{where}: {validation_reason(exc)}", param=where) from None


def _result(where: str, block: dict[str, Any]) -> Message:
    content: Any = block.get("content", "")
    if isinstance(content, list):
        content = tuple(_result_part(f"{where}.content.{k}", b) for k, b in enumerate(content))
    if not isinstance(content, (str, tuple)):
        raise FacadeError(f"{where}.content: must be a string or content blocks", param=f"{where}.content")
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise FacadeError(f"{where}.tool_use_id: required", param=f"{where}.tool_use_id")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise FacadeError(f"{where}.is_error: must be a boolean", param=f"{where}.is_error")
    # An empty output is a fact to pass on (as the gateway's own tool loop does).
    cache = block.get("cache_control")
    try:
        cache_control = None if cache is None else CacheControl.model_validate(cache)
    except ValidationError as exc:
        raise FacadeError(f"{where}.cache_control: {validation_reason(exc)}", param=f"{where}.cache_control") from None
    return Message.model_construct(role="tool", content=content, tool_call_id=call_id, name=None, tool_calls=(),
                                   reasoning=(), is_error=is_error, cache_control=cache_control)


def _result_part(where: str, block: dict[str, Any]) -> ContentPart:
    if block.get("type") not in ("text", "image", "document"):
        raise FacadeError(f"{where}.type: a tool result carries text, image and document blocks, got "
                          f"{block.get('type')!r}", param=f"{where}.type")
    return anthropic_part(where, block)


def _build(param: str, **fields: Any) -> Message:
    try:
        return Message(**fields)
    except ValidationError as exc:
        raise FacadeError(f"{param}: {validation_reason(exc)}", param=param) from None

