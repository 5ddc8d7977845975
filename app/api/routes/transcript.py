"""GET /v1/stream/{id}/transcript: the record of a stream for redisplay, live or from the record store."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from app.api.deps import GatewayDep
from app.api.responses import JSON
from app.api.routes.runs import stored_transcript
from app.api.schemas import ErrorBody, Transcript
from app.core.errors import RequestError
from app.recording import live_transcript

router = APIRouter(tags=["stream"])


@router.get(
    "/v1/stream/{stream_id}/transcript",
    response_model=Transcript,
    responses={404: {"model": ErrorBody}, 503: {"model": ErrorBody}},
    summary="The stream's transcript: request, reasoning and response messages, tool calls with their outputs",
)
async def transcript(
    gateway: GatewayDep, request: Request, stream_id: Annotated[str, Path(max_length=64)]
) -> Response:
    # Live here, else the shared stream store (another replica's stream), else the record store.
    log = gateway.store.get(stream_id)
    body = live_transcript(log) if log is not None else None
    if body is None:
        shared = await gateway.store.transcript(stream_id)
        if shared is not None:
            body = {"stream_id": shared.stream_id, "model": shared.model, "provider": shared.provider,
                    "created_at": shared.created_at, **shared.transcript, "content_recorded": True}
    if body is None:  # expired, or from before a restart: the record store has it
        body = await stored_transcript(request, stream_id)
    if body is None:
        raise RequestError(f"no stream {stream_id!r} (unknown, or expired and not recorded)",
                           code="stream_not_found", status=404, field="stream_id")
    return JSON(body)
