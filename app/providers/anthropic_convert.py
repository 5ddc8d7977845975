"""Pure converters between Foundry messages/tools and Anthropic Messages API payloads.

Re-exported by `anthropic`. Anything outside the Foundry schema raises `AdapterError`. Decisions:
- System messages are lifted into `system` (a string, or text blocks when there are several or one
  carries a cache breakpoint). Content parts become `text`, `image` and `document` blocks (a
  `base64` or `url` source), each with its `cache_control`; a lone plain text block is sent as a
  string, as the docs write it.
- Tool results become `tool_result` blocks (a `tool_use` or `tool_result` keeps its
  `cache_control`); consecutive turns of one role are merged into one, so the results of one
  assistant turn's calls arrive in a single user turn, as the API requires.
- An assistant message sends its reasoning first (signed `thinking`, `redacted_thinking`), then
  its text, then its `tool_use` blocks, so a tool loop with extended thinking round-trips as
  received. Unsigned blocks and blocks another provider produced are left out: the API only
  accepts thinking it signed.
- `max_tokens` is required by the API; without one we send DEFAULT_MAX_TOKENS (4096), plus the
  thinking budget when `provider_options.thinking.budget_tokens` is set (it must exceed it).
- `temperature` is not sent: the SDK (anthropic 2.x) pins API version 2026-10-21, which refuses
  `temperature`, `top_p` and `top_k` at any value with a 400, so a portable request that carries
  the gateway's default temperature would always fail. A caller who talks to a server that takes
  them passes them under `provider_options`, which go out as given.
- Carried from the canonical request: a tool result's `is_error`; a tool's `strict`,
  `cache_control` and `eager_input_streaming`; `stop` as `stop_sequences`; `parallel_tool_calls:
  false` as `tool_choice.disable_parallel_tool_use` (with `auto` when no choice was given); the
  top-level `cache_control` (automatic prompt caching); `output_schema` as `output_config.format`.
- `provider_options` (`thinking`, `metadata`, `stop_sequences`, ...) are added to the body; they may
  not replace what the typed fields own (model, messages, system, tool_choice, max_tokens, stream):
  that raises AdapterError, as does anything else outside the Foundry schema. One exception adds
  rather than replaces: `provider_options.tools` lists Anthropic's server tools (entries with a
  versioned `type`, e.g. `{"type": "web_search_20250305", "name": "web_search"}`), appended after
  the request's own tools, since a Foundry ToolSpec can only describe a client tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.core.messages import AdapterError, Message, ReasoningBlock, ToolSpec, thaw
from app.core.parts import ContentPart, TextPart
from app.providers.base import ProviderRequest, ToolChoice

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "build_anthropic_request",
    "messages_to_anthropic",
    "tool_choice_to_anthropic",
    "tool_specs_to_anthropic",
]

DEFAULT_MAX_TOKENS = 4096
_RESERVED_OPTIONS = frozenset({"model", "messages", "system", "tool_choice", "max_tokens", "stream"})
_TOOL_FLAGS = ("strict", "cache_control", "eager_input_streaming")
"""ToolSpec fields sent under the same name on an Anthropic tool, when set."""


# -- request mapping (pure) ------------------------------------------------------------------


def messages_to_anthropic(
    messages: Sequence[Message], *, provider: str = "anthropic"
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Foundry messages -> (`system`, `messages`) of a Messages API request."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    pending: set[str] = set()  # tool_use ids of the last assistant turn still unanswered

    def append(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise AdapterError(f"messages[{i}] is not a Foundry Message")
        if message.role != "tool" and pending:
            raise AdapterError(
                f"messages[{i}]: tool calls {sorted(pending)} have no tool result before this message"
            )
        if message.role == "system":
            system.extend(_blocks(message))
        elif message.role == "user":
            append("user", _blocks(message))
        elif message.role == "tool":
            if message.tool_call_id not in pending:
                raise AdapterError(
                    f"messages[{i}]: tool result {message.tool_call_id!r} does not answer a call of the "
                    "assistant message just before it"
                )
            pending.discard(message.tool_call_id)
            append("user", [_tool_result(message)])
        else:
            append("assistant", _assistant_blocks(message, provider))
            pending = {call.id for call in message.tool_calls}
    if pending:
        raise AdapterError(f"tool calls {sorted(pending)} have no tool result")
    if not turns:
        raise AdapterError("the conversation needs at least one user or assistant message")
    return _system(system), [_plain(turn) for turn in turns]


def _tool_result(message: Message) -> dict[str, Any]:
    content = message.content if isinstance(message.content, str) else _blocks(message)
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": content}
    if message.is_error:
        result["is_error"] = True
    if message.cache_control is not None:
        result["cache_control"] = message.cache_control.model_dump(exclude_none=True)
    return result


def _plain(turn: dict[str, Any]) -> dict[str, Any]:
    """A lone text block (with no cache breakpoint) reads best as the plain string the docs use."""
    content = turn["content"]
    if len(content) == 1 and content[0]["type"] == "text" and "cache_control" not in content[0]:
        turn["content"] = content[0]["text"]
    return turn


def _system(system: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    if not system:
        return None
    if len(system) == 1 and "cache_control" not in system[0]:
        return str(system[0]["text"])
    return system


def _blocks(message: Message) -> list[dict[str, Any]]:
    """A message's content as Messages API blocks: `text`, `image` and `document` with a `base64`
    or `url` source, each with its `cache_control` breakpoint."""
    return [_block(part) for part in message.parts]


def _block(part: ContentPart) -> dict[str, Any]:
    block: dict[str, Any]
    if isinstance(part, TextPart):
        block = {"type": "text", "text": part.text}
    else:
        source = ({"type": "url", "url": part.url} if part.url is not None
                  else {"type": "base64", "media_type": part.media_type, "data": part.data})
        block = {"type": part.type, "source": source}
        if part.type == "document" and part.title:
            block["title"] = part.title
    if part.cache_control is not None:
        block["cache_control"] = part.cache_control.model_dump(exclude_none=True)
    return block


def _assistant_blocks(message: Message, provider: str) -> list[dict[str, Any]]:
    blocks = [b for r in message.reasoning if (b := _reasoning_block(r, provider)) is not None]
    blocks.extend(_blocks(message))
    for call in message.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": thaw(call.arguments)}
        if call.cache_control is not None:
            block["cache_control"] = call.cache_control.model_dump(exclude_none=True)
        blocks.append(block)
    if not blocks:
        raise AdapterError("an assistant message needs content, tool calls or signed reasoning")
    return blocks


def _reasoning_block(block: ReasoningBlock, provider: str) -> dict[str, Any] | None:
    if block.provider not in (None, provider):
        return None
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None


def tool_specs_to_anthropic(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Foundry tool specs -> Messages API `tools` (custom tools with an `input_schema`)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, ToolSpec):
            raise AdapterError(f"tools[{i}] is not a Foundry ToolSpec")
        if tool.name in seen:
            raise AdapterError(f"duplicate tool name: {tool.name}")
        seen.add(tool.name)
        spec: dict[str, Any] = {"name": tool.name, "input_schema": thaw(tool.parameters)}
        if tool.description:
            spec["description"] = tool.description
        spec.update((key, thaw(value)) for key in _TOOL_FLAGS if (value := getattr(tool, key)) is not None)
        out.append(spec)
    return out


def tool_choice_to_anthropic(choice: ToolChoice | None, tools: Sequence[ToolSpec]) -> dict[str, Any] | None:
    """auto/none/required/<tool name> -> the Messages API `tool_choice` object (None: omit)."""
    if choice is None:
        return None
    if not tools:
        if choice in ("auto", "none"):
            return None
        raise AdapterError(f"tool_choice {choice!r} needs tools")
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if not isinstance(choice, str) or choice not in {t.name for t in tools}:
        raise AdapterError(f"tool_choice {choice!r} names no tool of this request")
    return {"type": "tool", "name": choice}


def build_anthropic_request(request: ProviderRequest, *, provider: str = "anthropic") -> dict[str, Any]:
    """The whole Messages API body for one request (without `stream`)."""
    options = request.options or {}
    if not isinstance(options, Mapping):
        raise AdapterError("provider_options must be an object")
    clash = _RESERVED_OPTIONS.intersection(options)
    if clash:
        raise AdapterError(f"provider_options may not set {sorted(clash)}: use the request's own fields")
    system, messages = messages_to_anthropic(request.messages, provider=provider)
    body: dict[str, Any] = {"model": request.model, "max_tokens": _max_tokens(request, options), "messages": messages}
    if system is not None:
        body["system"] = system
    tools = tool_specs_to_anthropic(request.tools) + _server_tools(options.get("tools"), request.tools)
    if tools:
        body["tools"] = tools
    choice = tool_choice_to_anthropic(request.tool_choice, request.tools)
    if request.parallel_tool_calls is False and request.tools and (choice or {}).get("type") != "none":
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        body["tool_choice"] = choice
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.cache_control is not None:
        body["cache_control"] = dict(request.cache_control)
    body.update((k, v) for k, v in options.items() if v is not None and k != "tools")  # None: "do not send"
    if request.output_schema is not None:  # structured output, beside any output_config option (effort)
        config = body.get("output_config")
        body["output_config"] = {**(config if isinstance(config, Mapping) else {}),
                                 "format": {"type": "json_schema", "schema": request.output_schema}}
    return body


def _server_tools(extra: Any, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """`provider_options.tools`: server tool definitions, added to (never replacing) the tools."""
    if extra is None:
        return []
    if not isinstance(extra, (list, tuple)):
        raise AdapterError("provider_options.tools must be a list of server tool definitions")
    names = {t.name for t in tools}
    out: list[dict[str, Any]] = []
    for i, spec in enumerate(extra):
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if not isinstance(kind, str) or kind == "custom" or not isinstance(spec.get("name"), str):
            raise AdapterError(
                f"provider_options.tools[{i}] must be a server tool with a `type` and a `name`; "
                "client tools go in `tools`"
            )
        if spec["name"] in names:
            raise AdapterError(f"duplicate tool name: {spec['name']}")
        names.add(spec["name"])
        out.append(dict(spec))
    return out


def _max_tokens(request: ProviderRequest, options: Mapping[str, Any]) -> int:
    if request.max_tokens is not None:
        if request.max_tokens < 1:
            raise AdapterError("max_tokens must be at least 1")
        return request.max_tokens
    thinking = options.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        return budget + DEFAULT_MAX_TOKENS
    return DEFAULT_MAX_TOKENS


