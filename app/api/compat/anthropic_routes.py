"""POST /v1/messages in Anthropic's shapes, on the same pipeline as /v1/stream (see openai_routes)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.access import Authenticated, PrincipalDep
from app.api.compat.anthropic_request import FORWARDED, MessagesRequest, to_run_spec
from app.api.compat.anthropic_response import AnthropicErrors, MessageWriter, message
from app.api.compat.common import FacadeRoute, answer, open_run, route_responses
from app.api.deps import GatewayDep, RecordDep

__all__ = ["router"]

ERRORS = AnthropicErrors()


class AnthropicRoute(FacadeRoute):
    writer = ERRORS
    brackets = False


router = APIRouter(tags=["anthropic-compatible"], route_class=AnthropicRoute, dependencies=[Authenticated])


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
async def messages(body: MessagesRequest, gateway: GatewayDep, record: RecordDep, request: Request,
                   principal: PrincipalDep) -> Response:
    handle, limit_headers = await open_run(gateway, to_run_spec(body), record, request=request, principal=principal,
                                           body=body, forwards=FORWARDED)
    run = handle.run
    writer = MessageWriter(run, model=body.model) if body.stream else None
    return await answer(gateway, request, handle, stream=writer, headers=limit_headers,
                        build=lambda events, final: message(run, body.model, events, final),
                        error=lambda status, text, code: ERRORS.body(status, text))
