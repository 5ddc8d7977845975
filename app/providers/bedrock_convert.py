"""Foundry requests -> Bedrock `Converse` / `ConverseStream` bodies (pure; AdapterError otherwise).

https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html. Decisions:
- System messages become `system` text blocks; roles are `user` and `assistant`; consecutive turns
  of one role merge, so the `toolResult` blocks answering one assistant turn share one user turn.
- Content parts: `text`; images as `image {format, source.bytes}` (base64 in JSON, as the REST API
  takes blobs); PDFs as `document {format: pdf, name, source.bytes}` (the name is the part's title,
  cleaned to the characters Bedrock allows, else `document-N`). An `https` URL has no Converse
  equivalent (Bedrock reads only bytes or S3): refused, naming the field.
- A part's (or tool's) `cache_control` breakpoint becomes a `cachePoint {type: default}` block right
  after it, the Converse way of marking a prompt-cache boundary; the top-level `cache_control`
  puts one after the system prompt.
- Assistant turns send their reasoning first (`reasoningContent.reasoningText {text, signature}`,
  or `redactedContent`), only blocks this provider signed, then text, then `toolUse` blocks.
- Tools are `toolConfig.tools[].toolSpec {name, description, inputSchema.json}`; `tool_choice`
  auto/required/<name> -> `{auto: {}}` / `{any: {}}` / `{tool: {name}}`; `none` has no Converse
  equivalent and is refused with tools, as is `parallel_tool_calls: false` (no switch for it).
- `max_tokens`, `temperature`, `stop` -> `inferenceConfig {maxTokens, temperature, stopSequences}`.
- `provider_options`: `inferenceConfig` merges into ours (topP, ...), `additionalModelRequestFields`
  (e.g. Claude's `thinking`), `guardrailConfig`, `performanceConfig`, `promptVariables`,
  `requestMetadata` and `additionalModelResponseFieldPaths` go into the body as given; anything else is
  refused by name (Converse rejects unknown fields, better said before the call).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from app.core.messages import AdapterError, Message, ReasoningBlock, ToolSpec, thaw
from app.core.parts import ContentPart, DocumentPart, ImagePart, TextPart
from app.providers.base import ProviderRequest, ToolChoice

__all__ = ["OPTIONS", "converse_request", "messages_to_converse", "tool_config"]

OPTIONS = frozenset({"inferenceConfig", "additionalModelRequestFields", "guardrailConfig", "performanceConfig",
                     "promptVariables", "requestMetadata", "additionalModelResponseFieldPaths"})
"""The `provider_options` a Converse request carries."""
_CACHE_POINT = {"cachePoint": {"type": "default"}}
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9\s\-\(\)\[\]]")


def messages_to_converse(messages: Sequence[Message], *, provider: str = "bedrock",
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Foundry messages -> (`system`, `messages`) of a Converse request."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    pending: set[str] = set()

    def append(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for i, message in enumerate(messages):
        if message.role != "tool" and pending:
            raise AdapterError(f"messages[{i}]: tool calls {sorted(pending)} have no tool result before this message")
        if message.role == "system":
            system.extend(_blocks(message, i))
        elif message.role == "user":
            append("user", _blocks(message, i))
        elif message.role == "tool":
            if message.tool_call_id not in pending:
                raise AdapterError(f"messages[{i}]: tool result {message.tool_call_id!r} does not answer a call of "
                                   "the assistant message just before it", field=f"messages.{i}.tool_call_id")
            pending.discard(message.tool_call_id)
            append("user", [_tool_result(message, i)])
        else:
            append("assistant", _assistant_blocks(message, i, provider))
            pending = {call.id for call in message.tool_calls}
    if pending:
        raise AdapterError(f"tool calls {sorted(pending)} have no tool result")
    if not turns:
        raise AdapterError("the conversation needs at least one user or assistant message")
    return system, turns


def _blocks(message: Message, i: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for j, part in enumerate(message.parts):
        out.append(_block(part, f"messages.{i}.content.{j}", j))
        if part.cache_control is not None:
            out.append(dict(_CACHE_POINT))
    return out


def _block(part: ContentPart, where: str, j: int) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    if part.url is not None:
        raise AdapterError("Bedrock takes media as bytes, not a URL: send `data` with `media_type`",
                           field=f"{where}.url")
    if isinstance(part, ImagePart):
        return {"image": {"format": str(part.media_type).removeprefix("image/"), "source": {"bytes": part.data}}}
    assert isinstance(part, DocumentPart)
    name = " ".join(_NAME_UNSAFE.sub(" ", part.title or "").split())[:200] or f"document-{j}"
    return {"document": {"format": "pdf", "name": name, "source": {"bytes": part.data}}}


def _tool_result(message: Message, i: int) -> dict[str, Any]:
    content = ([{"text": message.content}] if isinstance(message.content, str)
               else [_block(part, f"messages.{i}.content.{j}", j) for j, part in enumerate(message.parts)])
    return {"toolResult": {"toolUseId": message.tool_call_id, "content": content,
                           "status": "error" if message.is_error else "success"}}


def _assistant_blocks(message: Message, i: int, provider: str) -> list[dict[str, Any]]:
    blocks = [b for r in message.reasoning if (b := _reasoning(r, provider)) is not None]
    blocks.extend(_blocks(message, i))
    blocks.extend({"toolUse": {"toolUseId": call.id, "name": call.name, "input": thaw(call.arguments)}}
                  for call in message.tool_calls)
    if not blocks:
        raise AdapterError(f"messages[{i}]: an assistant message needs content, tool calls or signed reasoning")
    return blocks


def _reasoning(block: ReasoningBlock, provider: str) -> dict[str, Any] | None:
    if block.provider not in (None, provider):
        return None
    if block.redacted:
        return {"reasoningContent": {"redactedContent": block.redacted}}
    if block.signature:
        return {"reasoningContent": {"reasoningText": {"text": block.text, "signature": block.signature}}}
    return None


def tool_config(tools: Sequence[ToolSpec], choice: ToolChoice | None) -> dict[str, Any] | None:
    """`toolConfig` for the request's tools (None: no tools)."""
    if not tools:
        if choice not in (None, "auto", "none"):
            raise AdapterError(f"tool_choice {choice!r} needs tools", field="tool_choice")
        return None
    specs: list[dict[str, Any]] = []
    for tool in tools:
        spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": thaw(tool.parameters)}}
        if tool.description:
            spec["description"] = tool.description
        specs.append({"toolSpec": spec})
        if tool.cache_control is not None:
            specs.append(dict(_CACHE_POINT))
    config: dict[str, Any] = {"tools": specs}
    if choice == "none":
        raise AdapterError("tool_choice 'none' has no Converse equivalent: leave the tools out", field="tool_choice")
    if choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif choice is not None:
        if choice not in {t.name for t in tools}:
            raise AdapterError(f"tool_choice {choice!r} names no tool of this request", field="tool_choice")
        config["toolChoice"] = {"tool": {"name": choice}}
    return config


def converse_request(request: ProviderRequest, *, provider: str = "bedrock") -> dict[str, Any]:
    """The whole Converse body for one request (the model id goes in the URL)."""
    options = request.options or {}
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise AdapterError(f"provider_options {unknown} are not Converse fields (allowed: {sorted(OPTIONS)})",
                           field="provider_options")
    if request.parallel_tool_calls is False and request.tools:
        raise AdapterError("parallel_tool_calls: false cannot be carried: Converse has no switch for it",
                           field="parallel_tool_calls")
    if request.output_schema is not None:
        raise AdapterError("output_schema is not carried to Bedrock Converse yet", field="output_schema")
    system, messages = messages_to_converse(request.messages, provider=provider)
    if request.cache_control is not None and system:
        system.append(dict(_CACHE_POINT))
    body: dict[str, Any] = {"messages": messages}
    if system:
        body["system"] = system
    config = tool_config(request.tools, request.tool_choice)
    if config is None and _mentions_tools(messages):
        raise AdapterError("the conversation carries tool calls: Converse needs the tools declared", field="tools")
    if config is not None:
        body["toolConfig"] = config
    inference = _inference(request, options.get("inferenceConfig"))
    if inference:
        body["inferenceConfig"] = inference
    body.update((k, v) for k, v in options.items() if k != "inferenceConfig" and v is not None)
    return body


def _inference(request: ProviderRequest, extra: Any) -> dict[str, Any]:
    inference: dict[str, Any] = {}
    if request.max_tokens is not None:
        inference["maxTokens"] = request.max_tokens
    if request.temperature is not None:
        inference["temperature"] = request.temperature
    if request.stop:
        inference["stopSequences"] = list(request.stop)
    if extra is not None and not isinstance(extra, Mapping):
        raise AdapterError("provider_options.inferenceConfig must be an object", field="provider_options.inferenceConfig")
    inference.update(extra or {})
    return inference


def _mentions_tools(messages: list[dict[str, Any]]) -> bool:
    return any("toolUse" in block or "toolResult" in block for turn in messages for block in turn["content"])
