"""OpenAI Responses API: request mapping and the registry builder.

Served as `openai-responses/<model>` with the same key and client as `openai`. The stream
normalizer lives in `openai_responses_stream.py`. Request mapping decisions:
- Leading system messages become `instructions` (joined by a blank line); a system message
  later in the conversation stays in place as a `system` message item.
- Assistant tool calls become `function_call` items (`call_id` = the Foundry call id) and tool
  messages `function_call_output` items answering them, so a tool round trip needs no stored
  state upstream.
- Function tools are sent with `strict: false` unless the tool asks for `strict: true`: strict
  mode demands schemas Foundry does not (every property required, `additionalProperties: false`). Tool specs and `tool_choice` are
  checked by the Chat converters, so every OpenAI wire accepts and refuses the same things.
- A failed tool's output (`is_error`) is kept in the text, `Error: <output>` (no error field).
  `parallel_tool_calls` goes out as given; `stop` is refused (the API has no stop sequences);
  the Anthropic-only `cache_control` is not sent (OpenAI caches prompt prefixes by itself).
- Reasoning blocks this provider signed (its `encrypted_content` with the item's id, kept as the
  block's signature by openai_responses_stream) go back as `reasoning` items before the turn's
  message; others (no signature, or another provider's) are not sent: they would not verify.
- `temperature` is not sent to reasoning models (`o1`, `o3`, `o4-mini`, `gpt-5*`) nor when
  reasoning options are set: those models refuse it with a 400 at any value.
- `provider_options`: `reasoning_effort` and `reasoning_summary` become `reasoning`;
  `builtin_tools` (tool objects such as `{"type": "web_search"}`) join the function tools; any
  other key goes into the body as given (`store`, `include`, `truncation`, ...), after the
  gateway's own fields, so it may replace `temperature` or `tool_choice` (a None value drops the
  field), never the reserved ones (model, input, instructions, stream, tools).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from app.core.messages import AdapterError, Message, ToolSpec, thaw
from app.core.parts import ImagePart, TextPart
from app.providers.base import ProviderAdapter, ProviderRequest, ToolChoice
from app.providers.config import ProviderConfig
from app.providers.openai_chat_convert import json_schema_format, tool_output
from app.providers.openai_responses_stream import reasoning_input_item
from app.providers.openai_wire import OPENAI_BASE_URL, OpenAITarget, responses_upstream
from app.providers.tool_specs import ForcedTool, checked_tool_choice, checked_tools

__all__ = [
    "build_openai_responses",
    "messages_to_responses",
    "responses_request",
    "tool_choice_to_responses",
    "tool_specs_to_responses",
]

PROVIDER = "openai-responses"
_NO_TEMPERATURE_RE = re.compile(r"^(o\d|gpt-5)")
_RESERVED_OPTIONS = frozenset({"model", "input", "instructions", "stream", "tools"})


# -- request mapping (pure) ------------------------------------------------------------------


def messages_to_responses(messages: tuple[Message, ...] | list[Message], *, provider: str = PROVIDER,
                          ) -> tuple[str | None, list[dict[str, Any]]]:
    """Foundry messages -> (`instructions`, `input` items) of a Responses API request; `provider`:
    whose signed reasoning is sent back."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise AdapterError(f"messages[{i}] is not a Foundry Message")
        if message.role == "system":
            if items:
                items.append({"type": "message", "role": "system", "content": _content(message)})
            else:
                instructions.append(message.text)
        elif message.role == "user":
            items.append({"type": "message", "role": "user", "content": _content(message)})
        elif message.role == "assistant":
            items += [item for block in message.reasoning if block.provider == provider and block.signature
                      and (item := reasoning_input_item(block.text, block.signature)) is not None]
            if message.content:
                items.append({"type": "message", "role": "assistant", "content": _content(message)})
            for call in message.tool_calls:
                items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                              "arguments": orjson.dumps(thaw(call.arguments)).decode()})
        else:
            items.append({"type": "function_call_output", "call_id": message.tool_call_id,
                          "output": tool_output(message, _content(message), "input_text")})
    if not items:
        raise AdapterError("the conversation needs at least one user or assistant message")
    return ("\n\n".join(instructions) if instructions else None), items


def _content(message: Message) -> str | list[dict[str, Any]]:
    """A string stays a string; parts become `input_text` (`output_text` on an assistant turn),
    `input_image` (`image_url`: a data or https URL) and `input_file` (`file_data` as a data URL,
    or `file_url`). `cache_control` is a no-op: OpenAI caches prompt prefixes on its own."""
    if isinstance(message.content, str):
        return message.content
    out: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            out.append({"type": "output_text" if message.role == "assistant" else "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            url = part.url if part.url is not None else f"data:{part.media_type};base64,{part.data}"
            out.append({"type": "input_image", "image_url": url, "detail": part.detail or "auto"})
        elif part.url is not None:
            out.append({"type": "input_file", "file_url": part.url})
        else:
            out.append({"type": "input_file", "filename": part.title or "document.pdf",
                        "file_data": f"data:{part.media_type};base64,{part.data}"})
    return out


def tool_specs_to_responses(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Foundry tool specs -> Responses `function` tools (strict only when asked; see the module docstring).

    Duplicate names and malformed specs raise AdapterError.
    """
    out = []
    for tool in checked_tools(tools):
        function: dict[str, Any] = {"type": "function", "name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parameters"] = thaw(tool.parameters)
        function["strict"] = bool(tool.strict)
        out.append(function)
    return out


def tool_choice_to_responses(choice: ToolChoice | None, tools: Sequence[ToolSpec], *, builtin_tools: bool = False) -> Any:
    """auto/none/required/<tool name> -> Responses `tool_choice` (None: omit)."""
    if builtin_tools and not tools and choice in ("auto", "none", "required"):
        return choice  # only built-in tools: the words still apply
    checked = checked_tool_choice(choice, tools)
    return {"type": "function", "name": checked.name} if isinstance(checked, ForcedTool) else checked


def responses_request(request: ProviderRequest, *, provider: str = PROVIDER) -> dict[str, Any]:
    """The whole Responses API body for one (streamed) request to `provider`."""
    options = dict(request.options or {})
    clash = _RESERVED_OPTIONS.intersection(options)
    if clash:
        raise AdapterError(f"provider_options may not set {sorted(clash)}: use the request's own fields")
    instructions, items = messages_to_responses(request.messages, provider=provider)
    tools = tool_specs_to_responses(request.tools)
    builtin = options.pop("builtin_tools", None) or []
    if not isinstance(builtin, list) or not all(isinstance(t, Mapping) and "type" in t for t in builtin):
        raise AdapterError("provider_options.builtin_tools must be a list of tool objects with a type")
    body: dict[str, Any] = {"model": request.model, "input": items, "stream": True}
    if instructions is not None:
        body["instructions"] = instructions
    if tools or builtin:
        body["tools"] = tools + [dict(t) for t in builtin]
    choice = tool_choice_to_responses(request.tool_choice, request.tools, builtin_tools=bool(builtin))
    if choice is not None:
        body["tool_choice"] = choice
    reasoning = {key: options.pop(f"reasoning_{key}") for key in ("effort", "summary") if f"reasoning_{key}" in options}
    if reasoning:
        body["reasoning"] = reasoning
    elif request.temperature is not None and not _NO_TEMPERATURE_RE.match(request.model):
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    _carry_controls(request, body)
    for key, value in options.items():
        body.pop(key, None)
        if value is not None:
            body[key] = value
    return body


def _carry_controls(request: ProviderRequest, body: dict[str, Any]) -> None:
    if request.stop:
        raise AdapterError("stop: the Responses API has no stop sequences")
    if request.output_schema is not None:
        body["text"] = {"format": {"type": "json_schema", **json_schema_format(request.output_schema)}}
    if request.parallel_tool_calls is not None and "tools" in body:
        body["parallel_tool_calls"] = request.parallel_tool_calls


# -- registry builder -------------------------------------------------------------------------


def build_openai_responses(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`openai-responses` from OPENAI_API_KEY / OPENAI_BASE_URL on the gateway's own client (an
    injected `aiohttp.ClientSession` in clients["openai-responses"] or clients["openai"] is used,
    never closed by the adapter)."""
    client = clients.get(PROVIDER) or clients.get("openai")
    key = config.secret("openai_api_key")
    if key is None:
        return {}
    from app.providers.openai_spec import OPENAI_RESPONSES
    from app.providers.upstream import HttpAdapter

    target = OpenAITarget(name=PROVIDER, base_url=config.secret("openai_base_url") or OPENAI_BASE_URL, key=key)
    return {PROVIDER: HttpAdapter(OPENAI_RESPONSES, config, session=client,
                                  build=lambda request: responses_upstream(request, target))}
