"""The record store: SQL through SQLAlchemy 2 (async), SQLite (aiosqlite) by default, PostgreSQL
(asyncpg) for deployments. One engine per process, disposed on shutdown. Reads and batched writes;
the writer (writer.py) keeps all of it off the streaming path."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.records import spend
from app.records.migrate import upgrade
from app.records.record import RunRecord, as_utc
from app.records.spend import SpendTotal
from app.records.sqlite_rows import MultiRowInsert
from app.records.tables import mcp_calls, run_rejects, run_transcripts, runs

__all__ = ["Inserted", "RecordStore", "RunPage", "RunQuery", "decode_cursor", "encode_cursor"]


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def encode_cursor(created_at: datetime, run_id: str) -> str:
    """An opaque position in the newest-first order: after (created_at, id)."""
    raw = orjson.dumps({"t": as_utc(created_at).isoformat(), "i": run_id})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Raise ValueError for anything encode_cursor did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = orjson.loads(raw)
        created_at, run_id = datetime.fromisoformat(data["t"]), data["i"]
    except (binascii.Error, ValueError, TypeError, KeyError, orjson.JSONDecodeError):
        raise ValueError("not a cursor this gateway issued") from None
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("not a cursor this gateway issued")
    return as_utc(created_at), run_id


@dataclass(slots=True, kw_only=True, frozen=True)
class RunQuery:
    owner: str | None = None
    """Only this key's runs (None: every run)."""
    model: str | None = None
    status: str | None = None
    request_id: str | None = None
    provider: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 50
    after: tuple[datetime, str] | None = None
    """A decoded cursor: runs older than this position."""


@dataclass(slots=True, kw_only=True, frozen=True)
class Inserted:
    """What one insert did: the runs it recorded (not those already there), their keys' new spend."""

    run_ids: frozenset[str]
    spend: list[SpendTotal]


@dataclass(slots=True, kw_only=True, frozen=True)
class RunPage:
    runs: list[RunRecord]
    next_cursor: str | None


class RecordStore:
    def __init__(self, url: str, *, write_timeout: float = 10.0) -> None:
        self.url = make_url(url)
        connect_args: dict[str, Any] = {}
        if self.url.get_backend_name() == "postgresql":
            connect_args["timeout"] = min(write_timeout, 10.0)  # connecting to a dead host fails, not hangs
        # A ping before each checkout finds a network connection that died in the pool; a SQLite file
        # has none, and through aiosqlite the ping is a round trip to its thread and back on every
        # batch and read (docs/records.md#cost).
        self.engine: AsyncEngine = create_async_engine(
            self.url, json_serializer=_dumps, json_deserializer=orjson.loads, pool_pre_ping=not self.is_sqlite,
            connect_args=connect_args,
        )
        self._multi_row: MultiRowInsert | None = None
        if self.is_sqlite:
            sa.event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
            self._multi_row = MultiRowInsert(self.engine.dialect)

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @property
    def backend(self) -> str:
        return self.url.get_backend_name()

    async def migrate(self) -> None:
        """Create the data directory (SQLite) and bring the schema to the latest revision."""
        database = self.url.database
        if self.is_sqlite and database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        await upgrade(self.engine)

    async def insert(self, records: Sequence[RunRecord]) -> Inserted:
        """One batch in one transaction, idempotent by run id: `execute(insert(table), rows)`, which SQLAlchemy 2 sends as
        multi-row INSERTs ("insertmanyvalues") from one cached compiled statement: an
        `insert().values(rows)` is compiled again for each batch, on the event loop (docs/performance.md).
        The runs newly inserted (not already recorded) are added to their keys' spend (spend.py)
        in the same transaction."""
        if not records:
            return Inserted(run_ids=frozenset(), spend=[])
        if self._multi_row is not None and (inserted := await self._insert_all_new(records, self._multi_row)):
            return inserted
        async with self.engine.begin() as conn:
            result = await conn.execute(self._insert_new(runs).returning(runs.c.id), [r.row() for r in records])
            new = frozenset(result.scalars().all())
            fresh = list({r.stream_id: r for r in records if r.stream_id in new}.values())
            transcripts = _transcript_rows(fresh)
            if transcripts:
                await conn.execute(self._insert_new(run_transcripts), transcripts)
            totals = await spend.add_runs(conn, self.backend, fresh)
        return Inserted(run_ids=new, spend=totals)

    async def _insert_all_new(self, records: Sequence[RunRecord], insert: MultiRowInsert) -> Inserted | None:
        """SQLite: the batch in one statement a table (app/records/sqlite_rows.py), when none of its
        runs was recorded before, as is the rule: the row count says so. Otherwise (a run written
        twice: a replica's outbox, a retried batch) it is rolled back and `insert` takes the general
        path, which finds out which runs are new."""
        async with self.engine.connect() as conn, conn.begin() as transaction:
            if await insert(conn, runs, [r.row() for r in records]) != len(records):
                await transaction.rollback()
                return None
            await insert(conn, run_transcripts, _transcript_rows(records))
            totals = await spend.add_runs(conn, self.backend, records)
        return Inserted(run_ids=frozenset(r.stream_id for r in records), spend=totals)

    async def reject(self, record: RunRecord, error: str) -> None:
        """Keep a record the database refused (`run_rejects`), with why, as JSON bytes (which hold
        what a text column refuses, a NUL); the first rejection of a run id is kept."""
        try:
            kept = orjson.dumps(record.row())
        except TypeError:  # a number orjson cannot write (past 64 bits)
            kept = repr(record.row()).encode()
        row = {"run_id": record.stream_id, "rejected_at": datetime.now(UTC), "error": error[:1024], "record": kept}
        async with self.engine.begin() as conn:
            await conn.execute(self._insert_new(run_rejects), [row])

    async def spend(self, owner: str, month: str) -> SpendTotal:
        """A key's recorded spend for a month (spend.py)."""
        async with self.engine.connect() as conn:
            return await spend.read(conn, owner, month)

    def _insert_new(self, table: sa.Table) -> sa.Insert:
        """An INSERT that keeps the row already there (the same run id): a run is recorded exactly
        once, by whoever wrote its final first (a slow owner back after another replica claimed its
        run cannot double it, nor fail the batch it is in)."""
        dialect = postgresql if self.backend == "postgresql" else sqlite
        return dialect.insert(table).on_conflict_do_nothing()

    async def get(self, run_id: str) -> RunRecord | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(sa.select(runs).where(runs.c.id == run_id))).mappings().first()
        return RunRecord.from_row(row) if row is not None else None

    async def transcript(self, run_id: str) -> dict[str, Any] | None:
        query = sa.select(run_transcripts.c.transcript).where(run_transcripts.c.run_id == run_id)
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).scalar_one_or_none()

    async def list(self, query: RunQuery) -> RunPage:
        """Newest first; `limit` runs and the cursor of the next page (None on the last)."""
        stmt = sa.select(runs)
        if query.owner is not None:
            stmt = stmt.where(runs.c.owner == query.owner)
        if query.model is not None:
            stmt = stmt.where(runs.c.model == query.model)
        if query.status is not None:
            stmt = stmt.where(runs.c.status == query.status)
        if query.request_id is not None:
            stmt = stmt.where(runs.c.request_id == query.request_id)
        if query.provider is not None:
            stmt = stmt.where(runs.c.provider == query.provider)
        if query.since is not None:
            stmt = stmt.where(runs.c.created_at >= as_utc(query.since))
        if query.until is not None:
            stmt = stmt.where(runs.c.created_at < as_utc(query.until))
        if query.after is not None:
            at, run_id = query.after
            stmt = stmt.where(sa.or_(runs.c.created_at < at, sa.and_(runs.c.created_at == at, runs.c.id < run_id)))
        stmt = stmt.order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(query.limit + 1)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        records = [RunRecord.from_row(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        cursor = encode_cursor(records[-1].created_at, records[-1].stream_id) if more and records else None
        return RunPage(runs=records, next_cursor=cursor)

    async def prune(self, before: datetime) -> int:
        """Delete the runs created before `before` and their transcripts (and the calls through /mcp
        made before it); how many runs."""
        old = sa.select(runs.c.id).where(runs.c.created_at < as_utc(before))
        async with self.engine.begin() as conn:
            await conn.execute(sa.delete(run_transcripts).where(run_transcripts.c.run_id.in_(old)))
            await conn.execute(sa.delete(mcp_calls).where(mcp_calls.c.created_at < as_utc(before)))
            result = await conn.execute(sa.delete(runs).where(runs.c.created_at < as_utc(before)))
        return result.rowcount or 0

    async def ping(self) -> bool:
        """Reachable within a second (readiness must answer fast)."""
        try:
            async with asyncio.timeout(1.0):
                async with self.engine.connect() as conn:
                    await conn.execute(sa.text("SELECT 1"))
        except Exception:  # any failure means "not reachable" to readiness
            return False
        return True

    async def aclose(self) -> None:
        await self.engine.dispose()


def _transcript_rows(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """The `run_transcripts` rows of the records that have a transcript."""
    return [{"run_id": r.stream_id, "transcript": r.transcript} for r in records if r.transcript is not None]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # A rollback journal (TRUNCATE), not WAL: WAL keeps its index in a `-shm` file mapped into the
    # process, and a fault on that file (cut short, its disk full) is a SIGBUS that kills every
    # stream; with the journal every fault is an I/O error, counted and dropped by the writer
    # (docs/records.md). Readers and the writer then take turns: a busy database waits, not fails.
    # A database left in WAL mode by an older version is switched back here.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=TRUNCATE")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
