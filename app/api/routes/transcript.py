"""GET /v1/stream/{id}/transcript: the record of a stream for redisplay, live or from the record store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.responses import Response

from app.api.access import PrincipalDep, not_found_unless_owner
from app.api.deps import GatewayDep, WriterDep
from app.api.responses import JSON
from app.api.routes.runs import stored_owner, stored_transcript
from app.api.schemas import ErrorBody, Transcript
from app.auth import Principal
from app.core.errors import RequestError
from app.pipeline import Gateway
from app.recording import live_transcript
from app.records import RecordWriter

router = APIRouter(tags=["stream"])


@router.get(
    "/v1/stream/{stream_id}/transcript",
    response_model=Transcript,
    responses={c: {"model": ErrorBody} for c in (401, 404, 503)},
    summary="The stream's transcript: request, reasoning and response messages, tool calls with their outputs",
)
async def transcript(
    principal: PrincipalDep, gateway: GatewayDep, writer: WriterDep, stream_id: Annotated[str, Path(max_length=64)]
) -> Response:
    missing = RequestError(f"no stream {stream_id!r} (unknown, or expired and not recorded)",
                           code="stream_not_found", status=404, field="stream_id")
    return JSON(with_iso_times(await find_transcript(gateway, writer, principal, stream_id, missing)))


def _iso(at: Any) -> Any:
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return at


def with_iso_times(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its instants in ISO 8601 (UTC), as the run records and every other answer
    give them; the stores keep Unix seconds, so live, shared and recorded transcripts alike are
    turned here, at the edge."""
    calls = [{**call, **{k: _iso(call.get(k)) for k in ("created_at", "completed_at", "output_at")}}
             for call in document.get("tool_calls", [])]
    messages = {kind: [{**m, "timestamp": _iso(m.get("timestamp"))} for m in document.get(kind, [])]
                for kind in ("reasoning_messages", "response_messages")}
    return {**document, "created_at": _iso(document.get("created_at")), "tool_calls": calls, **messages}


async def find_transcript(gateway: Gateway, writer: RecordWriter | None, principal: Principal, stream_id: str,
                          missing: Exception) -> dict[str, Any]:
    """A stream's transcript document if the caller may see it, else `missing` is raised (never
    confirming another key's stream): live here, else the shared stream store (another replica's
    stream), else the record store (expired, or from before a restart)."""
    log = gateway.store.get(stream_id)
    body = live_transcript(log) if log is not None else None
    if log is not None and body is not None:
        not_found_unless_owner(principal, log.info.owner, missing)
    if body is None:
        shared = await gateway.store.transcript(stream_id)
        if shared is not None:
            if not principal.sees_everything:
                not_found_unless_owner(principal, (await gateway.store.key_owner(stream_id))[1], missing)
            body = {"stream_id": shared.stream_id, "model": shared.model, "provider": shared.provider,
                    "created_at": shared.created_at, **shared.transcript, "content_recorded": True}
    if body is None:
        if not principal.sees_everything:
            not_found_unless_owner(principal, await stored_owner(writer, stream_id), missing)
        body = await stored_transcript(writer, stream_id)
    if body is None:
        raise missing
    return body
