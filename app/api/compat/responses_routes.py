"""POST /v1/responses in OpenAI's Responses shapes, on the same pipeline as /v1/stream (see
openai_routes): the request becomes the canonical RunSpec, the run is opened by the same Gateway
with the same admission, and its released events are translated (responses_response.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from app.api.access import Caller, CallerDep
from app.api.compat.common import FacadeError, FacadeRoute, answer, open_run, route_responses
from app.api.compat.fields import takes_option
from app.api.compat.openai_response import OpenAIErrors
from app.api.compat.relay import ResponsesEnding, passthrough_spec, relay_answer, same_wire
from app.api.compat.responses_history import previous_conversation, referenced_answers
from app.api.compat.responses_request import OPTION_FIELDS, referenced_stream, to_run_spec
from app.api.compat.responses_response import ResponseWriter
from app.api.compat.responses_schema import OPTIONAL, ResponsesRequest
from app.core.errors import GatewayError
from app.core.events import FinalEvent, StreamEvent
from app.core.messages import Message
from app.pipeline import RunHandle, RunSpec
from app.providers.passthrough import Wire

__all__ = ["router"]

ERRORS = OpenAIErrors()
WIRE: Wire = "openai-responses"


class ResponsesRoute(FacadeRoute):
    writer = ERRORS


router = APIRouter(tags=["openai-compatible"], route_class=ResponsesRoute)


@router.post(
    "/v1/responses",
    response_class=Response,
    responses=route_responses(
        answer="`stream: false`: a `response` object. `stream: true`: Server-Sent Events with `event:` lines "
               "(response.created, response.in_progress, response.output_item.added/done, "
               "response.content_part.added/done, response.output_text.delta/done, "
               "response.reasoning_summary_part/text, response.function_call_arguments.delta/done, then "
               "response.completed, response.incomplete, or error and response.failed), each with its "
               "`sequence_number`.",
        errors='OpenAI\'s error format: `{"error": {"message", "type", "param", "code"}}`.',
        example=OpenAIErrors.body(400, "tools[0].type: only function tools are supported", "tools[0].type",
                                  "invalid_request")),
    summary="OpenAI Responses (drop-in): the same run as /v1/stream, in the Responses API's shapes",
)
async def responses(body: ResponsesRequest, caller: CallerDep) -> Response:
    gateway, request = caller.gateway, caller.request
    body.model = gateway.registry.qualify(body.model, responses=True)  # `gpt-5` as Codex sends it
    same = same_wire(gateway, body.model, WIRE) and not _gateway_history(body)
    history: tuple[Message, ...] = ()
    if body.previous_response_id is not None and not same:
        history = await previous_conversation(caller, body.previous_response_id)
    references = {} if same else await referenced_answers(caller, body.input)
    carried = frozenset(name for name, option in OPTIONAL.items() if not same and getattr(body, name) is not None
                        and takes_option(gateway, body.model, option))  # `store`: only where the provider stores
    spec = to_run_spec(body, history, references, passthrough=same, carried=carried)
    if same:  # the client's own request; streamed, the upstream's own events (app/api/compat/relay.py)
        spec = await passthrough_spec(spec, request, WIRE, relay=bool(body.stream),
                                      provider_options=body.provider_options)
    handle, limit_headers = await _open(caller, spec, body=body, held=not (same and body.stream))
    run, echo = handle.run, _echo(body)
    if run.relay is not None:
        return relay_answer(gateway, handle, run.relay, ResponsesEnding(), limit_headers)

    encrypted = "reasoning.encrypted_content" in (body.include or ())

    def build(events: list[StreamEvent], final: FinalEvent) -> dict[str, Any]:
        writer = ResponseWriter(run, echo=echo, stream=False, encrypted=encrypted)
        writer.feed(events)
        return writer.response

    writer = ResponseWriter(run, echo=echo, stream=True, encrypted=encrypted) if body.stream else None
    return await answer(gateway, request, handle, stream=writer, headers=limit_headers, build=build,
                        error=lambda status, text, code: ERRORS.body(status, text, None, code))


def _gateway_history(body: ResponsesRequest) -> bool:
    """The request continues a response this gateway answered (its ids): its history is the
    gateway's to rebuild, so the request is translated, not passed through."""
    if (body.previous_response_id or "").startswith("resp_str_"):
        return True
    items = body.input if isinstance(body.input, list) else ()
    return any(item.get("type") == "item_reference" and referenced_stream(item.get("id")) for item in items)


async def _open(caller: Caller, spec: RunSpec, *, body: ResponsesRequest, held: bool) -> tuple[RunHandle, dict[str, str]]:
    """open_run, naming a provider option the provider refused as the field the caller wrote
    (`reasoning.effort`, `top_p`, ...) unless the caller set it in provider_options itself."""
    try:
        return await open_run(caller, spec, body=body, forwards=(), held=held)
    except GatewayError as exc:
        prefix, _, key = exc.field.partition(".") if isinstance(exc.field, str) else ("", "", "")
        name = OPTION_FIELDS.get(key.split(".")[0])
        if prefix != "provider_options" or name is None or key.split(".")[0] in body.provider_options:
            raise
        raise FacadeError(exc.message.replace(f"provider_options.{key}", name), param=name,
                          status=400 if exc.status == 422 else exc.status, code=exc.code) from None


def _echo(body: ResponsesRequest) -> dict[str, Any]:
    """The request's settings, as a Response object repeats them."""
    reasoning = body.reasoning
    fmt = body.text.format if body.text is not None else None
    return {
        "model": body.model, "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
        "previous_response_id": body.previous_response_id,
        "parallel_tool_calls": body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
        "reasoning": {"effort": reasoning.effort if reasoning else None,
                      "summary": (reasoning.summary or reasoning.generate_summary) if reasoning else None},
        "store": body.store if body.store is not None else True,
        "temperature": body.temperature, "top_p": body.top_p,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt is not None else {"type": "text"}},
        "tool_choice": body.tool_choice or "auto",
        "tools": [{"description": None, "parameters": None, "strict": None, **t} for t in body.tools or ()],
        "truncation": "disabled", "user": body.user, "metadata": body.metadata or {},
    }
