"""`previous_response_id`: the conversation of an earlier response, rebuilt from its transcript
(live, in the shared stream store, or in the run records; app/api/routes/transcript.py), for
the key that ran it only. Another key's response, an unknown one, or one no longer kept is a 404
in OpenAI's shape. As at OpenAI, the earlier `instructions` are not carried over.

`item_reference` input items that point at this gateway's own output items (`msg_`, `fc_`,
`rs_` ids name their response's stream) are resolved the same way: the first reference to a
response stands for its whole answer.

The rebuilt conversation: the earlier request's messages (without its leading system messages),
then per provider call (`step`) one assistant message with that call's text and the tool calls
the model made (not the provider's server tools), followed by the outputs of the calls the
gateway ran. The caller's calls are answered by the new request's `function_call_output` items.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import ValidationError

from app.api.access import Caller
from app.api.compat.common import FacadeError
from app.api.compat.responses_request import referenced_stream
from app.api.routes.transcript import find_transcript
from app.core.messages import Message, ToolCall

__all__ = ["answer_messages", "conversation", "previous_conversation", "referenced_answers"]

_PARAM = "previous_response_id"


async def previous_conversation(caller: Caller, previous_id: str) -> tuple[Message, ...]:
    missing = FacadeError(f"Previous response with id {previous_id!r} not found.", param=_PARAM, status=404,
                          code="previous_response_not_found")
    stream_id = previous_id.removeprefix("resp_")
    if stream_id == previous_id or not stream_id:
        raise missing
    document = await find_transcript(caller.gateway, caller.records, caller.principal, stream_id, missing)
    return conversation(document)


async def referenced_answers(caller: Caller, items: str | list[dict[str, Any]]) -> dict[str, tuple[Message, ...]]:
    """The answers of the responses that `item_reference` input items point into (what clients
    such as the Vercel AI SDK send for earlier output when `store` is on), by stream id: each
    rebuilt from its transcript as for previous_response_id, for the key that ran it only."""
    out: dict[str, tuple[Message, ...]] = {}
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if item.get("type") != "item_reference":
            continue
        param = f"input[{i}].id"
        stream_id = referenced_stream(item.get("id"))
        missing = FacadeError(f"Item with id {item.get('id')!r} not found.", param=param, status=404,
                              code="item_not_found")
        if stream_id is None:
            raise missing
        if stream_id not in out:
            document = await find_transcript(caller.gateway, caller.records, caller.principal, stream_id, missing)
            out[stream_id] = tuple(answer_messages(document, param))
    return out


def conversation(document: dict[str, Any]) -> tuple[Message, ...]:
    """The messages of a transcript document (GET /v1/stream/{id}/transcript's shape)."""
    answer = answer_messages(document, _PARAM)
    try:
        messages = [_message(m) for m in document.get("request_messages", ())]
    except (KeyError, TypeError, ValidationError) as exc:
        raise _unusable(_PARAM, exc) from None
    while messages and messages[0].role == "system":
        messages.pop(0)
    return (*messages, *answer)


def answer_messages(document: dict[str, Any], param: str) -> list[Message]:
    """What the run answered: per provider call, the assistant's text and tool calls, then the
    outputs of the calls the gateway ran."""
    if document.get("content_recorded") is False:
        raise FacadeError(f"{param}: this gateway records no message content (FOUNDRY_RECORD_CONTENT=false); "
                          "send the whole conversation in input", param=param)
    if document.get("truncated"):
        raise FacadeError(f"{param}: that response's transcript was cut at its size limit; send the whole "
                          "conversation in input", param=param)
    messages: list[Message] = []
    try:
        texts: dict[int, list[str]] = defaultdict(list)
        calls: dict[int, list[ToolCall]] = defaultdict(list)
        outputs: dict[int, list[Message]] = defaultdict(list)
        for part in (*document.get("reasoning_messages", ()), *document.get("response_messages", ())):
            if part["type"] in ("assistant_text", "response") and part["content"]:
                texts[part["step"]].append(part["content"])
        for call in document.get("tool_calls", ()):
            if call["origin"] != "stream" or call["server"] or call["input"] is None:
                continue
            calls[call["step"]].append(ToolCall(id=call["id"], name=call["name"], arguments=call["input"]))
            if call["gateway"] and call["output"] is not None:
                outputs[call["step"]].append(_message({"role": "tool", "content": call["output"],
                                                       "tool_call_id": call["id"]}))
        for step in sorted(texts.keys() | calls.keys()):
            if texts[step] or calls[step]:
                messages.append(Message(role="assistant", content="".join(texts[step]), tool_calls=tuple(calls[step])))
            messages += outputs[step]
    except (KeyError, TypeError, ValidationError) as exc:
        raise _unusable(param, exc) from None
    return messages


def _unusable(param: str, exc: Exception) -> FacadeError:
    return FacadeError(f"{param}: that response's transcript cannot be continued ({type(exc).__name__})", param=param)


def _message(data: dict[str, Any]) -> Message:
    if data.get("role") == "tool" and not data.get("content"):  # an empty tool output is kept as it was
        return Message.model_construct(role="tool", content="", tool_call_id=data["tool_call_id"], name=None,
                                       tool_calls=(), reasoning=())
    return Message.model_validate(data)
