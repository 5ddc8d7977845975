"""Every tool call through /mcp, recorded durably in the records database (`mcp_calls`).

The endpoint (app/api/mcp_rpc.py) hands each call to `McpCallLog.submit()`, which never waits:
the call joins a bounded queue (FOUNDRY_RECORDS_QUEUE_SIZE) and a background task writes what is
queued in batches (FOUNDRY_RECORDS_BATCH_SIZE per transaction), after the records database is
migrated (the run-record writer migrates it, app/records/writer.py). A full queue or a batch the
database does not take is dropped, counted (`foundry_records_dropped_total{reason="mcp_queue_full"}`,
`{reason="mcp_write_failed"}`) and logged, never retried forever, never delaying the call.
Shutdown writes what is queued (bounded). Retention deletes them with the runs (store.py).

Read back newest first with filters and the runs' cursor pagination (GET /v1/mcp/calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime

import sqlalchemy as sa

from app.observability import get_logger
from app.records.record import as_utc
from app.records.store import encode_cursor
from app.records.tables import mcp_calls
from app.records.writer import RecordWriter

__all__ = ["McpCall", "McpCallLog", "McpCallPage", "McpCallQuery", "new_call_id"]

_MAX_BACKOFF = 5.0


def new_call_id() -> str:
    return secrets.token_hex(16)


@dataclass(slots=True, frozen=True, kw_only=True)
class McpCall:
    id: str
    key_id: str
    """The API key id, or `admin` / `open`."""
    server: str
    tool: str
    """As the MCP server names it (the gateway's name is `<server>__<tool>`)."""
    args_sha256: str
    status: str
    """ok, error, timeout, unavailable."""
    duration_ms: float
    bytes: int
    created_at: datetime


@dataclass(slots=True, frozen=True, kw_only=True)
class McpCallQuery:
    key_id: str | None = None
    server: str | None = None
    since: datetime | None = None
    limit: int = 50
    after: tuple[datetime, str] | None = None
    """A decoded cursor: calls older than this position."""


@dataclass(slots=True, frozen=True, kw_only=True)
class McpCallPage:
    calls: list[McpCall]
    next_cursor: str | None


class McpCallLog:
    def __init__(self, writer: RecordWriter, *, queue_size: int = 10_000, batch_size: int = 200,
                 on_drop: Callable[[str, int], None] = lambda reason, n: None) -> None:
        self.writer = writer
        self.batch_size = batch_size
        self._on_drop = on_drop
        self._queue: asyncio.Queue[McpCall] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.log = get_logger("foundry.records")

    def submit(self, call: McpCall) -> None:
        """Queue the call for writing (never waits; full or closing: dropped and counted)."""
        if self._closing:
            self._drop(1, "mcp_shutting_down")
            return
        try:
            self._queue.put_nowait(call)
        except asyncio.QueueFull:
            self._drop(1, "mcp_queue_full")
            return
        if self._task is None:  # started by the first call (on the loop that serves /mcp)
            self._task = asyncio.create_task(self._write_loop(), name="mcp-calls-writer")

    def _drop(self, count: int, reason: str, error: BaseException | None = None) -> None:
        self._on_drop(reason, count)
        self.log.warning("mcp_calls_dropped", reason=reason, count=count,
                         error=type(error).__name__ if error is not None else None)

    async def flush(self) -> None:
        """Wait until every call submitted so far was written or dropped."""
        if self._task is not None:
            await self._queue.join()

    async def aclose(self, grace: float = 5.0) -> None:
        """Write what is queued (for at most `grace` seconds), then stop."""
        self._closing = True
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self._queue.join()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if left := self._queue.qsize():
            self._drop(left, "mcp_shutting_down")

    async def _write_loop(self) -> None:
        failures = 0
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
                failures = 0
            except Exception as exc:  # counted and logged; the next batch tries again
                failures += 1
                self._drop(len(batch), "mcp_write_failed", exc)
            finally:
                for _ in batch:
                    self._queue.task_done()
            if failures:
                await asyncio.sleep(min(0.1 * 2 ** (failures - 1), _MAX_BACKOFF))

    async def _write(self, batch: list[McpCall]) -> None:
        await self.writer.ensure_schema()
        if not self.writer.migrated:
            raise ConnectionError("the records database is not migrated (unreachable at start?)")
        async with asyncio.timeout(self.writer.write_timeout), self.writer.store.engine.begin() as conn:
            await conn.execute(sa.insert(mcp_calls), [asdict(call) for call in batch])

    async def list(self, query: McpCallQuery) -> McpCallPage:
        """Newest first; `limit` calls and the cursor of the next page (None on the last)."""
        c = mcp_calls.c
        stmt = sa.select(mcp_calls)
        if query.key_id is not None:
            stmt = stmt.where(c.key_id == query.key_id)
        if query.server is not None:
            stmt = stmt.where(c.server == query.server)
        if query.since is not None:
            stmt = stmt.where(c.created_at >= as_utc(query.since))
        if query.after is not None:
            at, call_id = query.after
            stmt = stmt.where(sa.or_(c.created_at < at, sa.and_(c.created_at == at, c.id < call_id)))
        stmt = stmt.order_by(c.created_at.desc(), c.id.desc()).limit(query.limit + 1)
        async with self.writer.store.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        calls = [McpCall(**{**row, "created_at": as_utc(row["created_at"])}) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return McpCallPage(calls=calls, next_cursor=encode_cursor(calls[-1].created_at, calls[-1].id)
                           if more and calls else None)
