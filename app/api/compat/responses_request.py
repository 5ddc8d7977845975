"""OpenAI Responses request -> the canonical RunSpec (the one `/v1/stream` builds).

`input` becomes Foundry messages: a string is one user message; message items keep their role
(`developer` is `system`), `function_call` items join the assistant message before them as its
tool calls, `function_call_output` items are `tool` messages. `instructions` is a leading system
message. A continued response (`previous_response_id`) puts the recorded conversation between
the instructions and the new input (responses_history.py).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from app.api.compat.common import FacadeError, field_path, lenient, refuse_unknown, run_spec, validation_reason
from app.api.compat.parts import responses_content
from app.api.compat.responses_schema import FORWARDED, OPTIONAL, REFUSED, FunctionToolIn, ResponsesRequest
from app.core.messages import Message, ReasoningBlock, ToolCall, ToolSpec, check_unique_tool_names
from app.core.parts import ContentPart
from app.pipeline import RunSpec
from app.providers.base import ProviderRequest

__all__ = ["OPAQUE_PREFIX", "OPTION_FIELDS", "encrypted_reasoning", "input_messages", "messages_signature",
           "opaque_block", "opaque_reasoning", "referenced_stream", "to_run_spec"]

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_TEXT_PARTS = {"user": ("input_text",), "system": ("input_text",), "developer": ("input_text",),
               "assistant": ("output_text", "refusal", "input_text")}
_ITEM_ID = re.compile(r"^(?:msg|fc|rs)_\d+_(.+)$")
PART_SEPARATOR = "\n\n"
OPAQUE_PREFIX = "fgw-reasoning."
"""Starts every `encrypted_content` the gateway issues (a translated route's signed reasoning)."""
"""Between the text parts of one message: canonical messages hold one text, not a list of parts."""

OPTION_FIELDS = {option: field for field, option in (*FORWARDED.items(), *OPTIONAL.items())} | {
    "reasoning_effort": "reasoning.effort", "reasoning_summary": "reasoning.summary"}
"""provider option -> the request field the caller wrote (how a refused option is named)."""


def to_run_spec(body: ResponsesRequest, history: tuple[Message, ...] = (),
                references: Mapping[str, tuple[Message, ...]] | None = None, *, passthrough: bool = False,
                carried: frozenset[str] = frozenset()) -> RunSpec:
    """Map the request; FacadeError (400 naming the parameter) for what the gateway cannot honour.
    `passthrough`: an OpenAI Responses upstream gets the client's own request; what does not
    translate is only left out of the canonical one (records, validators). `carried`: the
    OPTIONAL fields the target takes (the others are a no-op)."""
    if not passthrough:
        refuse_unknown(body)
        _refuse_unsupported(body)
    specs: list[ToolSpec] = []
    for i, raw in enumerate(body.tools or ()):
        specs += lenient(lambda: [_tool(i, raw)], passthrough, [])  # noqa: B023
    tools = tuple(specs)
    try:
        check_unique_tool_names(tools)
    except ValueError as exc:
        raise FacadeError(str(exc), param="tools") from None
    messages: list[Message] = []
    if body.instructions:
        messages.append(Message(role="system", content=body.instructions))
    messages += history
    messages += input_messages(body.input, references or {}, skip_unknown=passthrough)
    if not any(m.role != "system" for m in messages):
        raise FacadeError("input: the conversation needs at least one message", param="input")
    return run_spec(ProviderRequest(model=body.model, messages=tuple(messages), tools=tools,
                                    tool_choice=_tool_choice(body.tool_choice, tools), temperature=body.temperature,
                                    max_tokens=body.max_output_tokens, options=_options(body, carried),
                                    output_schema=_output_schema(body)), body)


def _output_schema(body: ResponsesRequest) -> dict[str, Any] | None:
    """`text.format` json_schema: the canonical structured output, for every provider."""
    form = body.text.format if body.text is not None else None
    if form is None or form.type == "text":
        return None
    if form.schema_ is None:
        raise FacadeError("text.format.schema: a json_schema format needs its schema", param="text.format.schema")
    return form.schema_


def _options(body: ResponsesRequest, carried: frozenset[str]) -> dict[str, Any]:
    forwarded = {**FORWARDED, **{name: option for name, option in OPTIONAL.items() if name in carried}}
    options = {option: getattr(body, name) for name, option in forwarded.items() if getattr(body, name) is not None}
    if body.reasoning is not None:
        summary = body.reasoning.summary or body.reasoning.generate_summary
        if body.reasoning.effort is not None:
            options["reasoning_effort"] = body.reasoning.effort
        if summary is not None:
            options["reasoning_summary"] = summary
    return options


def _refuse_unsupported(body: ResponsesRequest) -> None:
    for name, why in REFUSED.items():
        if getattr(body, name) not in (None, False):
            raise FacadeError(f"{name}: {why}", param=name)
    for value in body.include or ():
        if value != "reasoning.encrypted_content":  # a no-op where the provider has no opaque reasoning
            raise FacadeError(f"include: the gateway includes nothing else (got {value!r})", param="include")
    if body.text is not None and body.text.verbosity is not None:
        raise FacadeError("text.verbosity: carried to OpenAI Responses models only", param="text.verbosity")


def _tool(i: int, raw: dict[str, Any]) -> ToolSpec:
    if raw.get("type") != "function":
        raise FacadeError(f"tools[{i}].type: only function tools are supported (got {raw.get('type')!r}); "
                          f"provider tools go in provider_options", param=f"tools[{i}].type")
    try:
        tool = FunctionToolIn.model_validate(raw)
        fields: dict[str, Any] = {"name": tool.name, "description": tool.description or ""}
        if tool.parameters is not None:
            fields["parameters"] = tool.parameters
        if tool.strict is not None and "strict" in ToolSpec.model_fields:  # carried once the spec has it
            fields["strict"] = tool.strict
        return ToolSpec(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = field_path(("tools", i, *err.get("loc", ())))
        raise FacadeError(f"{param}: {validation_reason(exc).split(': ', 1)[-1]}", param=param) from None


def _tool_choice(choice: str | dict[str, Any] | None, tools: tuple[ToolSpec, ...]) -> str | None:
    if choice is None or isinstance(choice, str):
        return choice
    name = choice.get("name")
    if choice.get("type") != "function" or not isinstance(name, str) or set(choice) - {"type", "name"}:
        raise FacadeError("tool_choice: only auto, none, required or {type: function, name} are supported",
                          param="tool_choice")
    if name not in {t.name for t in tools}:
        raise FacadeError(f"tool_choice names {name!r}, which is not among tools", param="tool_choice.name")
    return name


# -- input ----------------------------------------------------------------------------------------


def referenced_stream(item_id: Any) -> str | None:
    """The stream whose response holds the output item `msg_|fc_|rs_<n>_<stream id>`."""
    match = _ITEM_ID.match(item_id) if isinstance(item_id, str) else None
    return match.group(1) if match else None


def input_messages(value: str | list[dict[str, Any]],
                   references: Mapping[str, tuple[Message, ...]] | None = None, *, skip_unknown: bool = False,
                   ) -> list[Message]:
    """`input` -> Foundry messages: `function_call` items join the assistant turn before them; an
    `item_reference` stands for its response's answer (`references`, by stream id), once."""
    if isinstance(value, str):
        if not value:
            raise FacadeError("input: must not be empty", param="input")
        return [Message(role="user", content=value)]
    out: list[Message] = []
    text, calls, thinking = "", [], []  # the open assistant turn
    pending = dict(references or {})  # answers not placed yet
    for i, item in enumerate(value):
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "function_call":
            calls.append(_call(i, item))
            continue
        if kind == "reasoning":  # the turn stays open; only the gateway's own opaque reasoning is sent on
            thinking += [block] if (block := opaque_reasoning(item)) is not None else []
            continue
        if kind == "message" and item.get("role") == "assistant" and not calls:
            text = PART_SEPARATOR.join(t for t in (text, _content(i, item, "assistant")) if t)
            continue
        if text or calls:
            out.append(Message(role="assistant", content=text, tool_calls=tuple(calls), reasoning=tuple(thinking)))
            text, calls = "", []
        thinking = []  # reasoning belongs to the assistant turn it opens
        text = _item(i, kind, item, out, pending, skip_unknown)
    if text or calls:
        out.append(Message(role="assistant", content=text, tool_calls=tuple(calls), reasoning=tuple(thinking)))
    return out


def encrypted_reasoning(block: ReasoningBlock) -> str | None:
    """A signed (or redacted) reasoning block as a Responses `encrypted_content`: opaque to the
    client, the gateway's own spelling, so only what it issued is sent back (to the provider that
    signed it, as Anthropic's thinking signature)."""
    if not (block.signature or block.redacted) or block.provider is None:
        return None
    data = {"provider": block.provider, "signature": block.signature, "redacted": block.redacted}
    return OPAQUE_PREFIX + base64.urlsafe_b64encode(orjson.dumps(data)).decode()


def messages_signature(block: ReasoningBlock) -> str | None:
    """A thinking block's `signature` as a Messages client gets it: Anthropic's as it signed it,
    another provider's (OpenAI Responses' encrypted reasoning) in the gateway's opaque spelling, so
    it goes back only to the provider that issued it."""
    if not block.signature or block.redacted:
        return None
    return block.signature if block.provider in (None, "anthropic") else encrypted_reasoning(block)


def opaque_reasoning(item: dict[str, Any]) -> ReasoningBlock | None:
    """A `reasoning` input item whose `encrypted_content` the gateway issued -> the signed block
    (its text: the summary's); any other reasoning item is accepted and not sent on."""
    value = item.get("encrypted_content")
    if not isinstance(value, str) or not value.startswith(OPAQUE_PREFIX):
        return None
    summary = item.get("summary") or []
    if not isinstance(summary, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in summary):
        raise FacadeError("input: a reasoning item's summary must be a list of summary_text parts", param="input")
    return opaque_block(value, PART_SEPARATOR.join(p["text"] for p in summary), "input")


def opaque_block(value: str, text: str, param: str) -> ReasoningBlock:
    """The block behind an opaque value the gateway issued (`encrypted_reasoning`), with its text."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(value.removeprefix(OPAQUE_PREFIX)))
        return ReasoningBlock(text=text if data.get("signature") else "", signature=data.get("signature"),
                              redacted=data.get("redacted"), provider=data["provider"])
    except (ValueError, TypeError, KeyError, ValidationError):
        raise FacadeError(f"{param}: an opaque reasoning value that is not one this gateway issued intact",
                          param=param) from None


def _item(i: int, kind: Any, item: dict[str, Any], out: list[Message], pending: dict[str, tuple[Message, ...]],
          skip_unknown: bool) -> str:
    """Append what one item (not a call, not an assistant message) stands for; give the text of an
    assistant turn it opens. `skip_unknown`: an item that does not translate is left out."""
    if kind == "message":
        return _message(i, item, out)
    if kind == "item_reference":
        out += pending.pop(referenced_stream(item.get("id")) or "", ())
    elif kind == "function_call_output":
        out.append(_output(i, item))
    elif not skip_unknown:
        raise FacadeError(f"input[{i}].type: {kind!r} items are not supported", param=f"input[{i}].type")
    return ""


def _message(i: int, item: dict[str, Any], out: list[Message]) -> str:
    """Append a user/system message; give an assistant message's text (its turn stays open)."""
    role = item.get("role")
    if role not in _ROLES:
        raise FacadeError(f"input[{i}].role: must be one of user, assistant, system, developer",
                          param=f"input[{i}].role")
    if _ROLES[role] == "assistant":
        return _content(i, item, role)
    content = _parts(i, item, role)
    if not content:
        raise FacadeError(f"input[{i}].content: must not be empty", param=f"input[{i}].content")
    out.append(Message(role=_ROLES[role], content=content))
    return ""


def _parts(i: int, item: dict[str, Any], role: str) -> str | tuple[ContentPart, ...]:
    """A user, system or developer message's content: a string, or canonical parts (text, image,
    document; several text parts stay several)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise FacadeError(f"input[{i}].content: must be a string or a list of parts", param=f"input[{i}].content")
    return responses_content(content, f"input[{i}].content", role=role)


def _content(i: int, item: dict[str, Any], role: str) -> str:
    """An assistant turn's text (its parts joined: the turn is rebuilt as one message with its calls)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise FacadeError(f"input[{i}].content: must be a string or a list of parts", param=f"input[{i}].content")
    return _parts_text(content, f"input[{i}].content", _TEXT_PARTS[role])


def _parts_text(parts: list[Any], param: str, kinds: tuple[str, ...]) -> str:
    texts = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise FacadeError(f"{param}[{j}].type: {kind!r} parts are not supported here (expected "
                              f"{' or '.join(kinds)})", param=f"{param}[{j}].type")
        value = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(value, str):
            raise FacadeError(f"{param}[{j}].text must be a string", param=f"{param}[{j}].text")
        texts.append(value)
    return PART_SEPARATOR.join(texts)


def _call(i: int, item: dict[str, Any]) -> ToolCall:
    arguments = item.get("arguments")
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except orjson.JSONDecodeError:
        raise FacadeError(f"input[{i}].arguments is not valid JSON", param=f"input[{i}].arguments") from None
    if not isinstance(parsed, dict):
        raise FacadeError(f"input[{i}].arguments must be a JSON object", param=f"input[{i}].arguments")
    try:
        return ToolCall(id=item.get("call_id"), name=item.get("name"), arguments=parsed)
    except ValidationError as exc:
        raise FacadeError(f"input[{i}]: {validation_reason(exc)}", param=f"input[{i}]") from None


def _output(i: int, item: dict[str, Any]) -> Message:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise FacadeError(f"input[{i}].call_id: a function_call_output needs call_id", param=f"input[{i}].call_id")
    if isinstance(output, list):
        return Message(role="tool", content=responses_content(output, f"input[{i}].output", role="tool"),
                       tool_call_id=call_id)
    if not isinstance(output, str):
        raise FacadeError(f"input[{i}].output must be a string or a list of text parts", param=f"input[{i}].output")
    if not output:  # an empty output is a fact to pass on (as the gateway's own tool loop does)
        return Message.model_construct(role="tool", content="", tool_call_id=call_id, name=None, tool_calls=(),
                                       reasoning=())
    return Message(role="tool", content=output, tool_call_id=call_id)
