"""GET /v1/stream/{id}/transcript: the stored record of a stream, for redisplay."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.responses import Response

from app.api.deps import GatewayDep
from app.api.responses import JSON
from app.api.schemas import ErrorBody, Transcript
from app.core.errors import RequestError

router = APIRouter(tags=["stream"])


@router.get(
    "/v1/stream/{stream_id}/transcript",
    response_model=Transcript,
    responses={404: {"model": ErrorBody}},
    summary="The stream's transcript: request, reasoning and response messages, tool calls with their outputs",
)
async def transcript(gateway: GatewayDep, stream_id: Annotated[str, Path(max_length=64)]) -> Response:
    log = gateway.store.get(stream_id)
    record = log.info.transcript if log is not None else None
    if log is None or record is None:
        raise RequestError(f"no stream {stream_id!r} (unknown or expired)", code="stream_not_found",
                           status=404, field="stream_id")
    info = log.info
    body = {"stream_id": info.stream_id, "model": info.model, "provider": info.provider,
            "created_at": info.created_at, **record.snapshot()}
    return JSON(body)
