"""OpenAI Chat Completions request -> the canonical RunSpec (the one `/v1/stream` builds)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from app.api.compat.common import FacadeError, lenient, refuse_unknown, run_spec, validation_reason
from app.api.compat.openai_schema import FORWARDED, REFUSED, ChatCompletionRequest, ChatMessageIn
from app.api.compat.parts import openai_chat_part
from app.core.messages import ContentPart, Message, ToolCall, ToolSpec, check_unique_tool_names
from app.pipeline import RunSpec
from app.providers.base import ProviderRequest

__all__ = ["to_run_spec"]

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def to_run_spec(body: ChatCompletionRequest, *, passthrough: bool = False) -> RunSpec:
    """Map the request; FacadeError (400 naming the parameter) for what the gateway cannot honour.
    `passthrough`: an OpenAI-compatible upstream gets the client's own request; what does not
    translate is only left out of the canonical one (records, validators)."""
    if not passthrough:
        refuse_unknown(body)
        _refuse_unsupported(body)
    tools = tuple(_tool(i, t.function) for i, t in enumerate(body.tools or ()))
    try:
        check_unique_tool_names(tools)
    except ValueError as exc:
        raise FacadeError(str(exc), param="tools") from None
    choice: str | None
    if body.tool_choice is None or isinstance(body.tool_choice, str):
        choice = body.tool_choice
    else:
        choice = body.tool_choice.function.name
        if choice not in {t.name for t in tools}:
            raise FacadeError(f"tool_choice names {choice!r}, which is not among tools", param="tool_choice")
    request = ProviderRequest(
        model=body.model,
        messages=tuple(_messages(body.messages, passthrough)),
        tools=tools,
        tool_choice=choice,
        temperature=body.temperature,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        options=_options(body),
        stop=_stop(body.stop),
        parallel_tool_calls=body.parallel_tool_calls,
        output_schema=output_schema(body.response_format),
    )
    return run_spec(request, body)


def _options(body: ChatCompletionRequest) -> dict[str, Any]:
    options = {name: getattr(body, name) for name in FORWARDED if getattr(body, name) is not None}
    if output_schema(body.response_format) is not None or (body.response_format or {}).get("type") == "text":
        del options["response_format"]  # the canonical structured output, or the default: nothing to pass on
    return options


def output_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """`response_format: {type: json_schema, json_schema: {schema}}`: the canonical structured
    output, translated for every provider (`json_object` stays a provider option)."""
    if (response_format or {}).get("type") != "json_schema":
        return None
    spec = (response_format or {}).get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise FacadeError("response_format.json_schema.schema: a json_schema format needs its schema",
                          param="response_format.json_schema.schema")
    return schema


def _stop(stop: str | list[str] | None) -> tuple[str, ...]:
    sequences = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(sequences) > 4:
        raise FacadeError("stop: at most 4 sequences", param="stop")
    if any(not s for s in sequences):
        raise FacadeError("stop: a stop sequence may not be empty", param="stop")
    return sequences


def _refuse_unsupported(body: ChatCompletionRequest) -> None:
    if body.n not in (None, 1):
        raise FacadeError("n: the gateway runs one choice per request; n must be 1", param="n")
    for name, why in REFUSED.items():
        value = getattr(body, name)
        if value not in (None, False):
            raise FacadeError(f"{name}: {why}", param=name)
    if body.modalities is not None and any(m != "text" for m in body.modalities):
        raise FacadeError("modalities: only text output is supported by the gateway", param="modalities")


def _tool(i: int, fn: Any) -> ToolSpec:
    try:
        if fn.parameters is None:
            return ToolSpec(name=fn.name, description=fn.description, strict=fn.strict)
        return ToolSpec(name=fn.name, description=fn.description, parameters=fn.parameters, strict=fn.strict)
    except ValidationError as exc:
        raise FacadeError(f"tools[{i}].function: {validation_reason(exc)}", param=f"tools[{i}].function") from None


def _messages(messages: list[ChatMessageIn], passthrough: bool) -> list[Message]:
    out: list[Message] = []
    for i, m in enumerate(messages):
        out += lenient(lambda: _message(i, m), passthrough, [])  # noqa: B023
    return out


def _message(i: int, m: ChatMessageIn) -> list[Message]:
    role = _ROLES[m.role]
    text = _text(m.content, f"messages[{i}].content", role=role)
    calls = tuple(_call(i, k, c) for k, c in enumerate(m.tool_calls or ()))
    if calls and role != "assistant":
        raise FacadeError(f"messages[{i}].tool_calls: only assistant messages carry tool_calls",
                          param=f"messages[{i}].tool_calls")
    if role == "tool" and not text:
        if not m.tool_call_id:
            raise FacadeError(f"messages[{i}].tool_call_id: a tool message needs tool_call_id",
                              param=f"messages[{i}].tool_call_id")
        # An empty output is a fact to pass on (as the gateway's own tool loop does).
        return [Message.model_construct(role="tool", content="", tool_call_id=m.tool_call_id,
                                        name=None, tool_calls=(), reasoning=())]
    try:
        return [Message(role=role, content=text, tool_calls=calls,
                        tool_call_id=m.tool_call_id if role == "tool" else None)]
    except ValidationError as exc:
        raise FacadeError(f"messages[{i}]: {validation_reason(exc)}", param=f"messages[{i}]") from None


def _text(content: str | list[dict[str, Any]] | None, param: str, *, role: str) -> str | tuple[ContentPart, ...]:
    """A string as it is; content parts as canonical parts (several text parts stay several)."""
    if content is None or isinstance(content, str):
        return content or ""
    return tuple(openai_chat_part(f"{param}[{j}]", part, role=role) for j, part in enumerate(content))


def _call(i: int, k: int, call: Any) -> ToolCall:
    param = f"messages[{i}].tool_calls[{k}].function.arguments"
    try:
        arguments = orjson.loads(call.function.arguments or "{}")
    except orjson.JSONDecodeError:
        raise FacadeError(f"{param} is not valid JSON", param=param) from None
    if not isinstance(arguments, dict):
        raise FacadeError(f"{param} must be a JSON object", param=param)
    try:
        return ToolCall(id=call.id, name=call.function.name, arguments=arguments)
    except ValidationError as exc:
        raise FacadeError(f"messages[{i}].tool_calls[{k}]: {validation_reason(exc)}",
                          param=f"messages[{i}].tool_calls[{k}]") from None

