"""On SQLite a batch of records is one INSERT a table (app/records/sqlite_rows.py), where
SQLAlchemy's own statement stepped once a row: what it stores is byte for byte what SQLAlchemy
stores, a run written twice is still recorded once and counted once in its key's spend, and a batch
past SQLite's bound on parameters is split."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from app.core.events import Usage
from app.records import RunRecord
from app.records.sqlite_rows import MAX_VARIABLES
from app.records.store import RecordStore
from app.records.tables import runs
from tests.records_support import record


def _varied(i: int) -> RunRecord:
    """Records that use every kind of column: text with quotes and non-ASCII, JSON, booleans, nulls,
    floats, big counts, datetimes with microseconds."""
    at = datetime(2026, 3, 1, 12, 0, i % 60, 123456 + i, tzinfo=UTC)
    base = record(f"str_{i:04d}", created_at=at, model="openai/gpt-'x'", status="ok" if i % 3 else "error",
                  transcript={"messages": [{"role": "user", "content": f"héllo \"{i}\" \u2603"}]} if i % 4 else None)
    return dataclasses.replace(
        base, owner=f"key_{i % 2}" if i % 5 else None, finished_at=at,
        usage=Usage(input_tokens=2**40 + i, output_tokens=i, total_tokens=2**40 + 2 * i, cost_usd=0.25 * i),
        cost_usd=0.25 * i if i % 2 else None, validation={"regex": {"blocked": i % 2 == 0}} if i % 3 else None,
        ttft_ms=None if i % 7 == 0 else 1.5 * i, cache_hit=i % 4 == 1, cache_charged=(i % 8 == 1) if i % 4 == 1 else None,
        opened=i % 6 != 0, judge_cost_usd=0.001 if i % 8 == 0 else None)


def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as db:
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("runs", "run_transcripts", "key_spend")}


async def _store(path: Path, *, one_statement: bool) -> RecordStore:
    store = RecordStore(f"sqlite+aiosqlite:///{path}")
    await store.migrate()
    if not one_statement:
        store._multi_row = None  # SQLAlchemy's own statement, for the comparison
    return store


async def test_one_statement_stores_what_sqlalchemys_own_statement_stores(tmp_path: Path) -> None:
    records = [_varied(i) for i in range(40)]
    dumps = []
    for one_statement in (True, False):
        path = tmp_path / f"{one_statement}.db"
        store = await _store(path, one_statement=one_statement)
        try:
            first = await store.insert(records[:30])
            again = await store.insert(records[25:])  # five written before: recorded and counted once
            assert first.run_ids == {r.stream_id for r in records[:30]}
            assert again.run_ids == {r.stream_id for r in records[30:]}
            assert await store.get(records[7].stream_id) == dataclasses.replace(records[7], transcript=None)
            assert await store.transcript(records[9].stream_id) == records[9].transcript
        finally:
            await store.aclose()
        dumps.append(_dump(path))
    assert dumps[0] == dumps[1]
    spend = {owner: (usd, count) for owner, _, usd, count in dumps[0]["key_spend"]}
    for owner in ("key_0", "key_1"):
        mine = [r for r in records if r.owner == owner]
        charged = [0.0 if r.cache_hit and not r.cache_charged else r.cost_usd or 0.0 for r in mine]
        assert spend[owner] == (sum(charged) + sum(r.judge_cost_usd or 0.0 for r in mine), len(mine))
        assert spend[owner][0] > 0


async def test_a_batch_is_one_insert_a_table_and_a_big_one_is_split_at_sqlites_bound(tmp_path: Path) -> None:
    store = await _store(tmp_path / "r.db", one_statement=True)
    statements: list[tuple[str, bool]] = []
    sa.event.listen(store.engine.sync_engine, "before_cursor_execute",
                    lambda conn, cursor, sql, params, context, many: statements.append((sql.split(" (")[0], many)))
    now = datetime.now(UTC)
    try:
        await store.insert([record(f"str_a{i}", created_at=now, transcript={"n": i}) for i in range(200)])
        assert statements.count(("INSERT INTO runs", False)) == 1, statements
        assert statements.count(("INSERT INTO run_transcripts", False)) == 1, statements
        assert not [s for s in statements if s[1]], "a statement stepped once a row (executemany)"

        per_statement = MAX_VARIABLES // len(runs.c)
        statements.clear()
        big = [record(f"str_b{i}", created_at=now) for i in range(per_statement + 5)]
        assert len((await store.insert(big)).run_ids) == len(big)
        assert statements.count(("INSERT INTO runs", False)) == 2, statements
    finally:
        await store.aclose()
    with sqlite3.connect(tmp_path / "r.db") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (200 + per_statement + 5,)
