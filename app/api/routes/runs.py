"""GET /v1/runs (newest first, filtered, cursor-paginated) and GET /v1/runs/{id}: durable run records."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from starlette.responses import Response

from app.api.access import PrincipalDep, not_found_unless_owner
from app.api.deps import WriterDep
from app.api.responses import JSON
from app.api.run_schemas import RunList, RunOut, RunStatus
from app.api.schemas import ErrorBody
from app.auth.service import AccessDenied
from app.core.errors import GatewayError, RequestError
from app.records import RecordStore, RecordWriter, RunQuery, RunRecord, decode_cursor

router = APIRouter(tags=["runs"])

MAX_LIMIT = 200


class RecordsUnavailable(GatewayError):
    status = 503
    code = "records_unavailable"
    retryable = True


async def _records(writer: WriterDep) -> RecordStore:
    if writer is None:
        raise RequestError("run records are off on this gateway (FOUNDRY_RECORDS=off)", code="records_disabled",
                           status=404)
    return await _migrated(writer)


async def _migrated(writer: RecordWriter) -> RecordStore:
    """The store, its schema migrated (a database that was down at start is migrated now)."""
    await writer.ensure_schema()
    if not writer.migrated:
        raise RecordsUnavailable("the records database is unavailable (not migrated: unreachable?)")
    return writer.store


RecordsDep = Annotated[RecordStore, Depends(_records)]


async def stored_transcript(writer: RecordWriter | None, stream_id: str) -> dict[str, Any] | None:
    """A finished stream's transcript from the record store; None when there is none (or records are off)."""
    if writer is None:
        return None
    store = await _migrated(writer)
    with database_errors():
        return await store.transcript(stream_id)


async def stored_run(writer: RecordWriter | None, stream_id: str) -> RunRecord | None:
    """A recorded run (None: unknown, records off, or the database unreachable: a lookup that
    only refines another answer never fails it)."""
    if writer is None:
        return None
    try:
        with database_errors():
            return await writer.store.get(stream_id)
    except RecordsUnavailable:
        return None


async def stored_owner(writer: RecordWriter | None, stream_id: str) -> str | None:
    """The key that ran a recorded run (None: unknown run, or run in open mode / by the admin key)."""
    if writer is None:
        return None
    with database_errors():
        record = await writer.store.get(stream_id)
    return record.owner if record is not None else None


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """A failing database is a 503 (retryable), never a 500 or a hang."""
    try:
        yield
    except Exception as exc:  # the database's failure, told as such
        raise RecordsUnavailable(f"the records database is unavailable ({type(exc).__name__})") from None


@router.get(
    "/v1/runs",
    response_model=RunList,
    responses={c: {"model": ErrorBody} for c in (400, 401, 403, 404, 422, 503)},
    summary="Run records, newest first, with filters and cursor pagination",
)
async def list_runs(
    principal: PrincipalDep,
    store: RecordsDep,
    model: Annotated[str | None, Query(max_length=256, description="As requested (provider/model or alias).")] = None,
    status: Annotated[RunStatus | None, Query(description="The final status.")] = None,
    request_id: Annotated[str | None, Query(max_length=128, description="The X-Request-ID of the request that "
                                            "started the run (also a run no target served: an HTTP error).")] = None,
    provider: Annotated[str | None, Query(max_length=64, description="The provider that served it.")] = None,
    key_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.-]{1,32}$",
                                        description="The key that ran it (another key's: the admin key only).")] = None,
    since: Annotated[datetime | None, Query(description="Created at or after (ISO 8601; UTC if no zone).")] = None,
    until: Annotated[datetime | None, Query(description="Created before (ISO 8601; UTC if no zone).")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Runs per page.")] = 50,
    cursor: Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page.")] = None,
) -> Response:
    after = None
    if cursor is not None:
        try:
            after = decode_cursor(cursor)
        except ValueError as exc:
            raise RequestError(f"cursor: {exc}", code="invalid_cursor", field="cursor") from None
    if not principal.sees_everything and key_id is not None and key_id != principal.owner:
        raise AccessDenied("only the admin key reads another key's runs", code="admin_only", status=403,
                           field="key_id")
    owner = key_id if principal.sees_everything else principal.owner
    query = RunQuery(owner=owner, model=model, status=status, request_id=request_id, provider=provider, since=_utc(since),
                     until=_utc(until), limit=limit, after=after)
    with database_errors():
        page = await store.list(query)
    body = RunList(data=[RunOut.of(r) for r in page.runs], next_cursor=page.next_cursor)
    return JSON(body.model_dump(mode="json"))


@router.get(
    "/v1/runs/{run_id}",
    response_model=RunOut,
    responses={c: {"model": ErrorBody} for c in (401, 404, 503)},
    summary="One run's record (its transcript: GET /v1/stream/{id}/transcript)",
)
async def get_run(principal: PrincipalDep, store: RecordsDep,
                  run_id: Annotated[str, Path(max_length=64)]) -> Response:
    with database_errors():
        record = await store.get(run_id)
    missing = RequestError(f"no run {run_id!r}", code="run_not_found", status=404, field="run_id")
    if record is None:
        raise missing
    not_found_unless_owner(principal, record.owner, missing)
    return JSON(RunOut.of(record).model_dump(mode="json"))


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
