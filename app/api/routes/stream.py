"""POST /v1/stream (run and stream SSE), GET /v1/stream/{id} (subscribe, replay, follow) and
POST /v1/stream/{id}/cancel (end a run on whichever replica runs it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query
from starlette.responses import Response

from app.api.access import JsonCallerDep, PrincipalDep, not_found_unless_owner, open_run
from app.api.convert import to_spec
from app.api.deps import GatewayDep, WriterDep
from app.api.json_body import JSONBodyRoute
from app.api.responses import JSON
from app.api.routes.runs import stored_run
from app.api.schemas import CancelResult, GenerateRequest
from app.api.sse import SSEResponse
from app.auth import Principal
from app.core.errors import RequestError
from app.pipeline import Gateway
from app.records import RecordWriter
from app.streams.errors import CursorAhead, FinalDelivered, StoreUnavailable
from app.streams.memory import parse_cursor

router = APIRouter(tags=["stream"], route_class=JSONBodyRoute)

RETRY_MS = 1000
"""The `retry:` hint sent once at the start of a native stream: how long an EventSource waits before it
reconnects (with Last-Event-ID, which resumes the stream where it was cut)."""

_SSE_DOC = {
    "description": (
        "Server-Sent Events. Each frame has `id` (1, 2, 3, ...), `event` (start, token, reasoning, "
        "tool_call, tool_result, final) and one `data` line of JSON: see the `*Data` schemas and "
        "`FinalPayload`. `start` is first and exactly one `final` is last."
    ),
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def json_errors(*codes: int) -> dict[int | str, dict[str, object]]:
    """Error responses of an SSE route: JSON (`ErrorBody`), not the route's event-stream type."""
    schema = {"$ref": "#/components/schemas/ErrorBody"}
    return {code: {"description": "Error", "content": {"application/json": {"schema": schema}}} for code in codes}


async def stream(body: GenerateRequest, caller: JsonCallerDep) -> SSEResponse:
    caller.record.model = body.model
    gateway = caller.gateway
    cancel = body.on_disconnect != "continue"
    handle, limit_headers = await open_run(caller, to_spec(body, held=cancel))
    # A reader of the run's log: its client leaving cancels the run, unless asked to let it go on
    # (then it can come back by id, GET /v1/stream/{id}). The reader that owns its run holds its
    # place in the log: a slow client slows the run rather than losing events.
    return SSEResponse(handle.log.follow(0, hold=cancel), ping_seconds=gateway.settings.ping_seconds, retry_ms=RETRY_MS,
                       send_timeout=gateway.settings.send_timeout_seconds,
                       headers={"x-stream-id": handle.run.stream_id, **limit_headers},
                       on_disconnect=(lambda: handle.cancel("client_gone")) if cancel else None)


router.add_api_route(
    "/v1/stream", stream, methods=["POST"],
    response_class=SSEResponse,
    responses={200: _SSE_DOC, **json_errors(400, 401, 403, 404, 413, 415, 422, 429, 502, 503, 504)},
    summary="Run and stream canonical events as SSE",
)


@router.get(
    "/v1/stream/{stream_id}",
    response_class=SSEResponse,
    responses={200: _SSE_DOC, 204: {"description": "The stream's final was already delivered (the cursor is its "
                                                    "id): nothing more will come; an EventSource stops reconnecting."},
               **json_errors(400, 401, 404, 410)},
    summary="Subscribe to a stream: replay after Last-Event-ID or ?after=N, then follow live",
)
async def subscribe(
    principal: PrincipalDep,
    gateway: GatewayDep,
    writer: WriterDep,
    stream_id: Annotated[str, Path(max_length=64)],
    after: Annotated[int | None, Query(ge=0, description="Replay events after this id.")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    await _check_owner(gateway, principal, stream_id)
    cursor = parse_cursor(last_event_id, after)
    try:
        frames = await gateway.store.open(stream_id, cursor)
    except FinalDelivered:
        # The client has the final already (this replica ran the stream or another did): 204 makes an
        # EventSource stop reconnecting (WHATWG HTML, "server-sent events": a response other than
        # 200 fails the connection for good).
        return Response(status_code=204, headers={"x-stream-id": stream_id})
    except CursorAhead as exc:  # no client can have seen an event that does not exist yet
        field = "Last-Event-ID" if last_event_id is not None else "after"
        raise RequestError(f"{field} {cursor} is past the stream's last event ({exc.last_seq})",
                           code="cursor_ahead", status=400, field=field) from None
    if frames is None:
        if await gateway.store.recovering():  # its replica may be writing it back: come again, not "gone"
            raise StoreUnavailable(f"stream {stream_id!r} is not in the stream store while it recovers "
                                   f"(Redis failed or restarted moments ago); retry shortly", retry_after="2")
        raise await _expired_or_not_found(writer, gateway, principal, stream_id)
    return SSEResponse(frames, ping_seconds=gateway.settings.ping_seconds, retry_ms=RETRY_MS,
                       send_timeout=gateway.settings.send_timeout_seconds, headers={"x-stream-id": stream_id})


@router.post(
    "/v1/stream/{stream_id}/cancel",
    response_model=CancelResult,
    responses=json_errors(404, 503),
    summary="Cancel a running stream, on whichever replica runs it",
    description=(
        "The run ends with one `final{status: \"cancelled\"}` and its upstream request is closed. "
        "`status` is `cancelled` when the run ended on this replica before the answer, `cancelling` when "
        "the replica running it was asked (it ends within a second), `finished` when the stream had already "
        "ended: cancelling a finished stream is a no-op answered 200, so a retried cancel is harmless."
    ),
)
async def cancel(principal: PrincipalDep, gateway: GatewayDep,
                 stream_id: Annotated[str, Path(max_length=64)]) -> JSON:
    await _check_owner(gateway, principal, stream_id)
    outcome = await gateway.store.cancel(stream_id)
    if outcome is None:
        raise _not_found(stream_id)
    if outcome == "cancelled":
        log = gateway.store.get(stream_id)
        if log is not None:
            await log.wait_final()
    return JSON({"stream_id": stream_id, "status": outcome})


async def _expired_or_not_found(writer: RecordWriter | None, gateway: Gateway, principal: Principal,
                                stream_id: str) -> RequestError:
    """A stream the store does not have: 410 when its run record says it ended within the stream
    TTL (`stream_lost` on Redis, which keeps every stream its TTL: a Redis restarted empty lost
    it; `stream_expired` in memory, whose bounds let a finished stream go first), else 404."""
    run = await stored_run(writer, stream_id)
    if run is None or not principal.may_see(run.owner):
        return _not_found(stream_id)
    # A run no target served is recorded too, but it never had a stream (`opened` false). Runs
    # recorded before that was kept: one that had no content time, did not end ok or blocked and
    # was not claimed for its lost owner is taken for one that never opened.
    never = run.ttft_ms is None and run.status not in ("ok", "blocked") and run.error_code != "replica_lost"
    if run.opened is False or (run.opened is None and never):
        return _not_found(stream_id)
    if run.finished_at < datetime.now(UTC) - timedelta(seconds=gateway.settings.stream_ttl_seconds):
        return _not_found(stream_id)
    transcript = f"its transcript: GET /v1/stream/{stream_id}/transcript"
    if gateway.store.name == "redis":  # Redis keeps every stream its TTL: one missing within it was lost
        return RequestError(f"stream {stream_id!r} ended, but the stream store lost it before its retention "
                            f"passed (Redis restarted empty while no replica held it), so it cannot be "
                            f"replayed; {transcript}", code="stream_lost", status=410, field="stream_id")
    return RequestError(f"stream {stream_id!r} ended and is no longer retained (its store's bounds let it go "
                        f"first, or the process restarted), so it cannot be replayed; {transcript}",
                        code="stream_expired", status=410, field="stream_id")


def _not_found(stream_id: str) -> RequestError:
    return RequestError(f"no stream {stream_id!r} (unknown or expired)", code="stream_not_found",
                        status=404, field="stream_id")


async def _check_owner(gateway: Gateway, principal: Principal, stream_id: str) -> None:
    """Another key's stream is unknown to the caller (404), on whichever replica it runs."""
    if principal.sees_everything:
        return
    exists, owner = await gateway.store.key_owner(stream_id)
    if exists:
        not_found_unless_owner(principal, owner, _not_found(stream_id))
