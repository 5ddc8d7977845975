"""POST /v1/messages in Anthropic's shapes, on the same pipeline as /v1/stream (see openai_routes)."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter
from starlette.responses import Response

from app.api.access import CallerDep, admit_request
from app.api.compat.anthropic_request import FORWARDED, CountTokensRequest, MessagesRequest, to_run_spec
from app.api.compat.anthropic_response import AnthropicErrors, MessageWriter, message
from app.api.compat.common import FacadeError, FacadeRoute, answer, open_run, route_responses
from app.api.compat.relay import AnthropicEnding, passthrough_spec, relay_answer, same_wire
from app.api.media import check_media
from app.api.responses import JSON
from app.providers.base import TokenCounter
from app.providers.passthrough import Wire

__all__ = ["router"]

ERRORS = AnthropicErrors()
WIRE: Wire = "anthropic-messages"


class AnthropicRoute(FacadeRoute):
    writer = ERRORS
    brackets = False


router = APIRouter(tags=["anthropic-compatible"], route_class=AnthropicRoute)


@router.post(
    "/v1/messages",
    response_class=Response,
    responses=route_responses(
        answer="`stream: false`: a `message` object. `stream: true`: Server-Sent Events with `event:` lines "
               "(message_start, ping, content_block_start/delta/stop, message_delta, message_stop; `error` "
               "after a failure).",
        errors='Anthropic\'s error format: `{"type": "error", "error": {"type", "message"}}`.',
        example=AnthropicErrors.body(400, "messages.0.role: invalid")),
    summary="Anthropic Messages (drop-in): the same run as /v1/stream, in Anthropic's shapes",
)
async def messages(body: MessagesRequest, caller: CallerDep) -> Response:
    """To an Anthropic model, the client's own request and, streamed, the upstream's own events
    (app/api/compat/relay.py); to another provider, translated."""
    gateway, request = caller.gateway, caller.request
    body.model = gateway.registry.qualify(body.model)  # `claude-sonnet-4-5` as Claude Code sends it
    same = same_wire(gateway, body.model, WIRE)
    spec = to_run_spec(body, passthrough=same)
    if same:
        spec = await passthrough_spec(spec, request, WIRE, relay=body.stream, provider_options=body.provider_options)
    handle, limit_headers = await open_run(caller, spec, body=body, forwards=(*FORWARDED, "output_config"),
                                           held=not (same and body.stream))
    run = handle.run
    if run.relay is not None:
        return relay_answer(gateway, handle, run.relay, AnthropicEnding(), limit_headers)
    writer = MessageWriter(run, model=body.model) if body.stream else None
    return await answer(gateway, request, handle, stream=writer, headers=limit_headers,
                        build=lambda events, final: message(run, body.model, events, final),
                        error=lambda status, text, code: ERRORS.body(status, text))


@router.post(
    "/v1/messages/count_tokens",
    response_class=Response,
    responses=route_responses(
        answer="`{\"input_tokens\": N}` as the Anthropic upstream counted it.",
        errors='Anthropic\'s error format: `{"type": "error", "error": {"type", "message"}}`; a model not '
               'served by an Anthropic upstream is a 400 saying so.',
        example=AnthropicErrors.body(400, "model: count_tokens needs an Anthropic model")),
    summary="Anthropic token counting (drop-in): served when the model's provider is Anthropic",
)
async def count_tokens(body: CountTokensRequest, caller: CallerDep) -> Response:
    """The anthropic SDK's `messages.count_tokens`: the request mapped as a run would be, counted by
    the upstream. Another provider has no counting endpoint: refused in Anthropic's error shape.
    Each call reaches the upstream, so it counts against the key's requests per minute like any
    request (not its tokens per minute, runs at once or budget): past it, a 429 with Retry-After."""
    gateway = caller.gateway
    body.model = gateway.registry.qualify(body.model)
    spec = to_run_spec(body)
    check_media(spec.request.messages, gateway.settings, caller.request)  # the body limits of every entry point
    limit_headers = await admit_request(caller, body.model)
    adapter, provider, name = gateway.registry.resolve(body.model)
    if not isinstance(adapter, TokenCounter):
        raise FacadeError(f"model: count_tokens is served for Anthropic models; {body.model!r} is served by "
                          f"{provider!r}, which has no token counting", param="model")
    return JSON({"input_tokens": await adapter.count_tokens(replace(spec.request, model=name))}, headers=limit_headers)
