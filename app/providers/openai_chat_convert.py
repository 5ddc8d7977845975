"""Pure converters between Foundry messages/tools and OpenAI Chat Completions payloads.

The reference's converters (reference/foundry-adapters.md), re-exported by `openai_chat`:
`messages_to_openai` / `openai_to_messages` round-trip (tool calls and tool messages included),
`tool_specs_to_openai`, `normalize_tool_calls`, and the `tool_choice` mapping. Anything outside
the Foundry schema raises `AdapterError`. Two fields have no place on OpenAI's wire and are
dropped on the way out: a tool message's `name`, and assistant `reasoning` blocks (DeepSeek
rejects `reasoning_content` sent back; OpenAI has no field for it). A tool message's `is_error`
has no field either: it is kept in the text, as `Error: <output>`. A tool's `strict` goes out as
`function.strict`; its Anthropic-only `cache_control` and `eager_input_streaming` have nothing to
say here (OpenAI caches prompt prefixes by itself and streams arguments as they come).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from app.core import safejson
from app.core.messages import AdapterError, Message, ToolCall, ToolSpec, thaw
from app.core.parts import DocumentPart, ImagePart, TextPart
from app.providers.tool_specs import ForcedTool, checked_tool_choice, checked_tools, first_error

Content = str | list[dict[str, Any]]

__all__ = [
    "messages_to_openai",
    "normalize_tool_calls",
    "openai_to_messages",
    "plain",
    "json_schema_format",
    "tool_choice_to_openai",
    "tool_output",
    "tool_specs_to_openai",
]

_MESSAGE_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
ERROR_PREFIX = "Error: "
"""Marks a failed tool's output where the wire has no error flag (OpenAI's tool messages)."""
_TOOL_CALL_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})


def plain(value: Any) -> Any:
    """An SDK model (pydantic) as a plain dict; anything else unchanged."""
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


# -- messages -------------------------------------------------------------------------------


def messages_to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Foundry messages -> the `messages` list of a chat completion request."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise AdapterError(f"messages[{i}] is not a Message")
        content = _content(message, i)
        if message.role == "tool":
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": tool_output(message, content)})
            continue
        item: dict[str, Any] = {"role": message.role, "content": content}
        if message.name is not None:
            item["name"] = message.name
        if message.tool_calls:
            item["content"] = content or None
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": orjson.dumps(thaw(call.arguments)).decode()},
                }
                for call in message.tool_calls
            ]
        out.append(item)
    return out


def _content(message: Message, i: int) -> str | list[dict[str, Any]]:
    """A string stays a string; parts become Chat Completions content parts (`text`, `image_url`
    with a data or https URL, `file` with base64 `file_data`). `cache_control` has no place here:
    OpenAI caches prompt prefixes on its own."""
    if isinstance(message.content, str):
        return message.content
    if len(message.content) == 1 and isinstance(message.content[0], TextPart):
        return message.content[0].text  # one text part is a string to every compatible server
    return [_part(part, i, j, message.role) for j, part in enumerate(message.content)]


def _part(part: TextPart | ImagePart | DocumentPart, i: int, j: int, role: str) -> dict[str, Any]:
    where = f"messages.{i}.content.{j}"
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if role != "user":
        raise AdapterError(f"{where}: OpenAI Chat Completions takes {part.type} parts in user messages only",
                           field=where)
    if isinstance(part, ImagePart):
        url = part.url if part.url is not None else f"data:{part.media_type};base64,{part.data}"
        image: dict[str, Any] = {"url": url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if part.url is not None:
        raise AdapterError(f"{where}.url: OpenAI Chat Completions takes a document as base64 data only; send "
                           "`data` with media_type application/pdf", field=f"{where}.url")
    file = {"filename": part.title or "document.pdf", "file_data": f"data:{part.media_type};base64,{part.data}"}
    return {"type": "file", "file": file}


def tool_output(message: Message, content: Content, text_type: str = "text") -> Content:
    """A tool message's content; a failed tool's is marked in its text (`Error: ...`), since
    OpenAI's tool message (and Responses' function_call_output) has no error field."""
    if not message.is_error:
        return content
    if isinstance(content, str):
        return content if content.startswith(ERROR_PREFIX) else ERROR_PREFIX + content
    return [{"type": text_type, "text": ERROR_PREFIX.rstrip()}, *content]


def openai_to_messages(payload: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """A chat completion `messages` list -> Foundry messages; the inverse of `messages_to_openai`."""
    if isinstance(payload, (str, bytes)) or not isinstance(payload, Sequence):
        raise AdapterError("messages must be a list")
    out: list[Message] = []
    for i, item in enumerate(payload):
        if not isinstance(item, Mapping):
            raise AdapterError(f"messages[{i}] is not an object")
        role = item.get("role")
        allowed = _MESSAGE_KEYS.get(role) if isinstance(role, str) else None
        if allowed is None:
            raise AdapterError(f"messages[{i}].role {role!r} is not one of {', '.join(_MESSAGE_KEYS)}")
        unknown = set(item) - allowed
        if unknown:
            raise AdapterError(f"messages[{i}] ({role}) has fields outside the schema: {', '.join(sorted(unknown))}")
        content = item.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise AdapterError(f"messages[{i}].content must be a string")
        raw_calls = item.get("tool_calls")
        if raw_calls is not None:
            _check_wire_tool_calls(raw_calls, i)
        try:
            out.append(Message(
                role=role, content=content, name=item.get("name"), tool_call_id=item.get("tool_call_id"),
                tool_calls=normalize_tool_calls(raw_calls),
            ))
        except ValidationError as exc:
            raise AdapterError(f"messages[{i}]: {first_error(exc)}") from None
    return tuple(out)


def _check_wire_tool_calls(raw: Any, i: int) -> None:
    """A request's tool calls carry exactly OpenAI's fields (a response's may carry more)."""
    if not isinstance(raw, (list, tuple)):
        raise AdapterError(f"messages[{i}].tool_calls must be a list")
    for j, call in enumerate(raw):
        if not isinstance(call, Mapping) or set(call) - _TOOL_CALL_KEYS:
            raise AdapterError(f"messages[{i}].tool_calls[{j}] must have only id, type and function")
        function = call.get("function")
        if not isinstance(function, Mapping) or set(function) - _FUNCTION_KEYS:
            raise AdapterError(f"messages[{i}].tool_calls[{j}].function must have only name and arguments")


# -- tools ----------------------------------------------------------------------------------


def normalize_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """Provider tool calls (dicts or SDK objects) -> immutable ToolCalls, arguments parsed.

    Empty arguments mean `{}`; arguments that are not a JSON object raise AdapterError.
    """
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise AdapterError("tool_calls must be a list")
    calls: list[ToolCall] = []
    seen: set[str] = set()
    for j, call in enumerate(raw):
        call = plain(call)
        if not isinstance(call, Mapping):
            raise AdapterError(f"tool_calls[{j}] is not an object")
        kind = call.get("type", "function")
        if kind != "function":
            raise AdapterError(f"tool_calls[{j}].type {kind!r} is not supported (only 'function')")
        function = plain(call.get("function"))
        if not isinstance(function, Mapping):
            raise AdapterError(f"tool_calls[{j}].function is missing")
        arguments = _parse_arguments(function.get("arguments"), j)
        try:
            tool_call = ToolCall(id=call.get("id"), name=function.get("name"), arguments=arguments)
        except ValidationError as exc:
            raise AdapterError(f"tool_calls[{j}]: {first_error(exc)}") from None
        if tool_call.id in seen:
            raise AdapterError(f"tool_calls[{j}].id {tool_call.id!r} is used twice")
        seen.add(tool_call.id)
        calls.append(tool_call)
    return tuple(calls)


def _parse_arguments(raw: Any, j: int) -> Mapping[str, Any]:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            raw = safejson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise AdapterError(f"tool_calls[{j}].function.arguments is not valid JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise AdapterError(f"tool_calls[{j}].function.arguments must be a JSON object")
    return raw


def json_schema_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A structured-output schema as OpenAI's `json_schema` format. `strict` only when the schema
    closes its objects (`additionalProperties: false`), which strict mode demands."""
    return {"name": "output", "schema": dict(schema), "strict": schema.get("additionalProperties") is False}


def tool_specs_to_openai(tools: Sequence[ToolSpec | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool specs -> OpenAI `tools` (`type: function`); duplicate names and bad schemas raise."""
    out: list[dict[str, Any]] = []
    for tool in checked_tools(tools):
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parameters"] = thaw(tool.parameters)
        if tool.strict is not None:
            function["strict"] = tool.strict
        out.append({"type": "function", "function": function})
    return out


def tool_choice_to_openai(
    choice: str | None, tools: Sequence[ToolSpec | Mapping[str, Any]]
) -> str | dict[str, Any] | None:
    """`auto` / `none` / `required` / a tool's name -> OpenAI `tool_choice` (None: leave it out)."""
    checked = checked_tool_choice(choice, tools)
    if isinstance(checked, ForcedTool):
        return {"type": "function", "function": {"name": checked.name}}
    return checked
