"""One poisoned record never takes others with it: a batch the database refuses is split until
the record it refuses is alone, and that one is kept with its error (`run_rejects`) and counted
(`foundry_records_dropped_total{reason="rejected"}`). Token columns hold 64-bit counts. On the real
engines (tests/records_support.py: PostgreSQL skips locally without a server, fails under CI)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa

from app.core.events import Usage
from app.records import RunRecord
from app.records.store import Inserted, RecordStore
from app.records.tables import run_rejects, runs
from app.records.writer import RecordQueue, RecordWriter
from tests.records_support import record, utc

T0 = utc(2026, 11, 28, 6)


def _batch(poisoned: dict[int, RunRecord]) -> list[RunRecord]:
    out = [record(f"run_{i:02d}", created_at=T0 + timedelta(seconds=i)) for i in range(30)]
    for i, bad in poisoned.items():
        out[i] = bad
    return out


async def _write_all(url: str, batch: Sequence[RunRecord]) -> tuple[RecordWriter, Counter[str], set[str]]:
    drops: Counter[str] = Counter()
    committed: set[str] = set()

    async def on_committed(records: Sequence[RunRecord], inserted: Inserted) -> None:
        committed.update(r.stream_id for r in records)

    queue = RecordQueue(batch_size=len(batch), on_drop=lambda reason, n: drops.update({reason: n}))
    writer = RecordWriter(RecordStore(url), queue, on_committed=on_committed)
    await writer.start()
    for r in batch:
        writer.submit(r)
    await writer.flush()
    return writer, drops, committed


async def test_billions_of_tokens_fit_the_columns(postgres_url: str) -> None:
    """3e9 prompt tokens (a long multi-step run of checked counts) is a number the columns hold."""
    big = dataclasses.replace(record("run_big", created_at=T0), usage=Usage(
        input_tokens=3_000_000_000, output_tokens=4, total_tokens=3_000_000_004))
    writer, drops, _ = await _write_all(postgres_url, _batch({7: big}))
    try:
        got = await writer.store.get("run_big")
        assert got is not None and got.usage.input_tokens == 3_000_000_000
        assert not drops
    finally:
        await writer.aclose()


async def test_a_record_the_database_refuses_loses_no_other_record(postgres_url: str) -> None:
    """A served model with a NUL (PostgreSQL text refuses it) and a count past 64 bits, in one batch
    of 30: the 28 others are recorded, the two are kept in `run_rejects` with their error, counted
    as rejected, and the outbox is told all 30 are done (a rejected record is not retried forever)."""
    nul = dataclasses.replace(record("run_nul", created_at=T0), served_model="gpt\x00x")
    huge = dataclasses.replace(record("run_huge", created_at=T0), usage=Usage(input_tokens=1 << 70))
    batch = _batch({3: nul, 20: huge})
    writer, drops, committed = await _write_all(postgres_url, batch)
    try:
        async with writer.store.engine.connect() as conn:
            ids = set((await conn.execute(sa.select(runs.c.id))).scalars())
            rejects = {row.run_id: row for row in await conn.execute(sa.select(run_rejects))}
        assert ids == {r.stream_id for r in batch} - {"run_nul", "run_huge"}
        assert set(rejects) == {"run_nul", "run_huge"}
        assert all(row.error and row.record for row in rejects.values())
        assert drops == Counter({"rejected": 2})
        assert committed == {r.stream_id for r in batch}
    finally:
        await writer.aclose()


async def test_a_count_no_column_holds_is_rejected_before_the_database(database_url: str) -> None:
    """On both engines (SQLite would take 2^70 as an overflow error, PostgreSQL as a data error):
    checked against 64 bits before the insert, kept in `run_rejects`, the batch's others written."""
    huge = dataclasses.replace(record("run_huge", created_at=T0), usage=Usage(input_tokens=1 << 70, output_tokens=-1))
    batch = _batch({0: huge})
    writer, drops, committed = await _write_all(database_url, batch)
    try:
        async with writer.store.engine.connect() as conn:
            ids = set((await conn.execute(sa.select(runs.c.id))).scalars())
            (reject,) = (await conn.execute(sa.select(run_rejects))).all()
        assert ids == {r.stream_id for r in batch} - {"run_huge"}
        assert reject.run_id == "run_huge" and "out of range" in reject.error
        assert drops == Counter({"rejected": 1}) and committed == {r.stream_id for r in batch}
    finally:
        await writer.aclose()
