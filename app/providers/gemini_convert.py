"""Google Gemini's request mapping (pure): a `ProviderRequest` -> a generateContent body.

Request mapping decisions:
- Every system message goes into `systemInstruction` (Gemini has no system turn), in order.
- Roles are `user` and `model`; consecutive turns of one role are merged, so the function
  responses of one model turn arrive together in one `user` turn, as the API requires.
- Tool calls go out as `functionCall` parts without an id (Gemini matches responses by name and
  order, and the gateway's ids are its own); a tool message becomes a `functionResponse` named
  after the call it answers (found by `tool_call_id` among earlier calls, else the message's
  `name`). Its `response` is the tool output when that is a JSON object, else `{"output": text}`;
  a failed tool's (`is_error`) is `{"error": text}`, the key Gemini documents for errors.
- Thought signatures round-trip: the first signature kept on an assistant message (a reasoning
  block from this provider) goes on its first `functionCall` part, or on its first text part when
  it has no calls, which is where Gemini puts it. Thought text is not sent back.
- Tools are `functionDeclarations` with `parametersJsonSchema` (full JSON Schema, no conversion
  to the OpenAPI subset of `parameters`). Tool specs and `tool_choice` are checked by the Chat
  converters, so every provider accepts and refuses the same things.
- `temperature`, `max_tokens`, `stop` (as `stopSequences`) and `output_schema` (as
  `responseJsonSchema` with `responseMimeType: application/json`) go into `generationConfig`. Gemini
  has no strict flag and caches by itself: a tool's `strict` / `cache_control` /
  `eager_input_streaming` and the top-level `cache_control` are accepted and not sent (the
  documented no-op). It has no switch for one call per response either: `parallel_tool_calls:
  false` with tools is refused (400), `true` is its default. `provider_options`: a
  `generationConfig` object merges into ours (thinkingConfig, topP, stopSequences, ...),
  `builtin_tools` (e.g. `[{"googleSearch": {}}, {"codeExecution": {}}]`) join the tools, any
  other key goes into the body as given (safetySettings, cachedContent, ...); a None value drops
  a field, and the fields the gateway owns (contents, systemInstruction, tools) are refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from app.core import safejson
from app.core.messages import AdapterError, Message, ToolSpec, thaw
from app.core.parts import TextPart
from app.providers.base import ProviderRequest, ToolChoice
from app.providers.tool_specs import ForcedTool, checked_tool_choice, checked_tools

__all__ = ["gemini_request", "messages_to_gemini", "tool_choice_to_gemini", "tool_specs_to_gemini"]

_RESERVED_OPTIONS = frozenset({"contents", "systemInstruction", "system_instruction", "tools"})
_CHOICE_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


# -- request mapping (pure) ------------------------------------------------------------------


def messages_to_gemini(
    messages: Sequence[Message], *, provider: str = "gemini"
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Foundry messages -> (`systemInstruction`, `contents`) of a generateContent request."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> function name, from earlier assistant messages

    def append(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise AdapterError(f"messages[{i}] is not a Foundry Message")
        if message.role == "system":
            system.extend({"text": part.text} for part in message.parts if isinstance(part, TextPart))
        elif message.role == "user":
            append("user", _parts(message, i))
        elif message.role == "assistant":
            names.update((call.id, call.name) for call in message.tool_calls)
            append("model", _model_parts(message, provider))
        else:
            name = names.get(message.tool_call_id or "") or message.name
            if not name:
                raise AdapterError(f"messages[{i}]: tool result {message.tool_call_id!r} answers no earlier "
                                   "tool call and has no name (Gemini matches results by function name)")
            if any(not isinstance(part, TextPart) for part in message.parts):
                where = f"messages.{i}.content"
                raise AdapterError(f"{where}: Gemini takes text only in a tool result (a function response); send "
                                   "the image or document in a user message", field=where)
            append("user", [{"functionResponse": {"name": name, "response": _tool_response(message.text, message.is_error)}}])
    if not contents:
        raise AdapterError("the conversation needs at least one user or assistant message")
    return ({"parts": system} if system else None), contents


def _model_parts(message: Message, provider: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": part.text} for part in message.parts if isinstance(part, TextPart)]
    parts.extend({"functionCall": {"name": c.name, "args": thaw(c.arguments)}} for c in message.tool_calls)
    signature = next((b.signature for b in message.reasoning if b.provider == provider and b.signature), None)
    if signature:
        target = next((p for p in parts if "functionCall" in p), parts[0])
        target["thoughtSignature"] = signature
    return parts


def _parts(message: Message, i: int) -> list[dict[str, Any]]:
    """Parts as Gemini `parts`: `text`, and media as `inlineData` (base64 with its mime type).
    A URL is refused: the Gemini API fetches only its own Files API and Cloud Storage URIs
    (`fileData`), not a caller's https URL, and the gateway never fetches one itself."""
    out: list[dict[str, Any]] = []
    for j, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            out.append({"text": part.text})
        elif part.url is not None:
            where = f"messages.{i}.content.{j}.url"
            raise AdapterError(f"{where}: Gemini does not fetch https URLs; send the {part.type} as base64 `data` "
                               "with its media_type (sent as inline_data)", field=where)
        else:
            out.append({"inlineData": {"mimeType": part.media_type, "data": part.data}})
    return out


def _tool_response(content: str, is_error: bool) -> dict[str, Any]:
    if is_error:  # Gemini's documented key for a failed call: `error` (`output` for a result)
        return {"error": content}
    try:
        value = safejson.loads(content)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"output": content}


def tool_specs_to_gemini(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Foundry tool specs -> `functionDeclarations` (duplicate names and malformed specs raise
    AdapterError), schemas as `parametersJsonSchema`."""
    declarations = []
    for tool in checked_tools(tools):
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parametersJsonSchema"] = thaw(tool.parameters)
        declarations.append(function)
    return declarations


def tool_choice_to_gemini(choice: ToolChoice | None, tools: Sequence[ToolSpec]) -> dict[str, Any] | None:
    """auto/none/required/<tool name> -> `toolConfig` (None: omit)."""
    checked = checked_tool_choice(choice, tools)
    if checked is None:
        return None
    if isinstance(checked, ForcedTool):
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [checked.name]}}
    return {"functionCallingConfig": {"mode": _CHOICE_MODES[checked]}}


def gemini_request(request: ProviderRequest, *, provider: str = "gemini") -> dict[str, Any]:
    """The whole generateContent body for one request (the model goes in the URL)."""
    options = dict(request.options or {})
    clash = _RESERVED_OPTIONS.intersection(options)
    if clash:
        raise AdapterError(f"provider_options may not set {sorted(clash)}: use the request's own fields")
    if request.parallel_tool_calls is False and request.tools:
        raise AdapterError("parallel_tool_calls: false cannot be carried: Gemini has no switch for one call per "
                           "response")
    system, contents = messages_to_gemini(request.messages, provider=provider)
    body: dict[str, Any] = {"contents": contents}
    if system is not None:
        body["systemInstruction"] = system
    builtin = options.pop("builtin_tools", None) or []
    if not isinstance(builtin, list) or not all(isinstance(t, Mapping) for t in builtin):
        raise AdapterError("provider_options.builtin_tools must be a list of tool objects")
    declarations = tool_specs_to_gemini(request.tools)
    tools = ([{"functionDeclarations": declarations}] if declarations else []) + [dict(t) for t in builtin]
    if tools:
        body["tools"] = tools
    choice = tool_choice_to_gemini(request.tool_choice, request.tools)
    if choice is not None:
        body["toolConfig"] = choice
    config = _generation_config(request)
    extra_config = options.pop("generationConfig", None) or {}
    if not isinstance(extra_config, Mapping):
        raise AdapterError("provider_options.generationConfig must be an object")
    config.update(extra_config)
    body["generationConfig"] = {k: v for k, v in config.items() if v is not None}
    for key, value in options.items():
        body.pop(key, None)
        if value is not None:
            body[key] = value
    return body


def _generation_config(request: ProviderRequest) -> dict[str, Any]:
    config: dict[str, Any] = {} if request.temperature is None else {"temperature": request.temperature}
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if request.output_schema is not None:  # structured output
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = request.output_schema
    return config
