"""POST /v1/messages in Anthropic's shapes, on the same pipeline as /v1/stream (see openai_routes)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.access import Authenticated, PrincipalDep
from app.api.compat.anthropic_request import FORWARDED, MessagesRequest, to_run_spec
from app.api.compat.anthropic_response import AnthropicErrors, MessageWriter, message
from app.api.compat.common import FacadeRoute, answer, forwarded_fields, open_run
from app.api.deps import GatewayDep, RecordDep

__all__ = ["router"]

ERRORS = AnthropicErrors()


class AnthropicRoute(FacadeRoute):
    writer = ERRORS
    brackets = False


router = APIRouter(tags=["anthropic-compatible"], route_class=AnthropicRoute, dependencies=[Authenticated])

_ERROR_DOC = {
    "description": 'Anthropic\'s error format: `{"type": "error", "error": {"type", "message"}}`.',
    "content": {"application/json": {"example": AnthropicErrors.body(400, "messages.0.role: invalid")}},
}
_STREAM_DOC = {
    "description": "`stream: false`: a `message` object. `stream: true`: Server-Sent Events with `event:` lines "
                   "(message_start, ping, content_block_start/delta/stop, message_delta, message_stop; `error` "
                   "after a failure).",
    "content": {"application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "string"}}},
}


@router.post(
    "/v1/messages",
    response_class=Response,
    responses={200: _STREAM_DOC, **{c: _ERROR_DOC for c in (400, 401, 403, 404, 413, 429, 502, 503, 504)}},
    summary="Anthropic Messages (drop-in): the same run as /v1/stream, in Anthropic's shapes",
)
async def messages(body: MessagesRequest, gateway: GatewayDep, record: RecordDep, request: Request,
                   principal: PrincipalDep) -> Response:
    forwarded = forwarded_fields(body, FORWARDED, body.provider_options)
    run, limit_headers = await open_run(gateway, to_run_spec(body), record, request=request, principal=principal,
                                        forwarded=forwarded)
    writer = MessageWriter(run, model=body.model) if body.stream else None
    return await answer(gateway, run, stream=writer, headers=limit_headers,
                        build=lambda events, final: message(run, body.model, events, final),
                        error=lambda status, text, code: ERRORS.body(status, text))
