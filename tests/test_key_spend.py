"""Each key's recorded spend (the key_spend table, app/records/spend.py) and the budget counter
built from it: kept in the records' own transaction (a run recorded twice counts once), filled from
the runs already recorded when the table arrives, and a counter Redis lost rebuilt so that it equals
the records even while runs are being written (the chaos soak's finding, issue 29)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.records import RecordStore
from app.records.migrate import upgrade
from app.records.spend import month_of
from app.records.tables import key_spend, runs
from tests.auth_support import SIMPLE, bearer, gateway, make_key, redis_url  # noqa: F401
from tests.records_support import record, utc


def _priced(stream_id: str, owner: str | None, created_at: datetime, cost: float | None,
            judge: float | None = None):
    run = record(stream_id, created_at=created_at)
    run.owner, run.cost_usd, run.judge_cost_usd = owner, cost, judge
    return run


async def test_a_run_counts_once_whoever_records_it(database_url: str) -> None:
    store = RecordStore(database_url)
    try:
        await store.migrate()
        first = await store.insert([_priced("str_a", "key_1", utc(2026, 11, 3), 0.25, judge=0.05)])
        assert [(t.owner, t.month, t.usd, t.runs) for t in first.spend] == [("key_1", "2026-11", 0.3, 1)]
        # The owner and a replica that swept the same run both record it: the second changes nothing.
        again = await store.insert([_priced("str_a", "key_1", utc(2026, 11, 3), 0.25, judge=0.05),
                                    _priced("str_b", "key_1", utc(2026, 11, 4), 0.5),
                                    _priced("str_c", "key_2", utc(2026, 10, 31), None),
                                    _priced("str_d", None, utc(2026, 11, 4), 9.0)])
        assert again.run_ids == {"str_b", "str_c", "str_d"}
        assert {(t.owner, t.month): (round(t.usd, 9), t.runs) for t in again.spend} == {
            ("key_1", "2026-11"): (0.8, 2), ("key_2", "2026-10"): (0.0, 1)}
        total = await store.spend("key_1", "2026-11")
        assert (round(total.usd, 9), total.runs) == (0.8, 2)
        assert (await store.spend("key_1", "2026-12")).runs == 0
    finally:
        await store.aclose()


async def test_a_cache_hit_spends_only_when_its_rule_charges(database_url: str) -> None:
    store = RecordStore(database_url)
    try:
        await store.migrate()
        free, charged = _priced("str_h1", "key_h", utc(2026, 11, 5), 0.25), _priced("str_h2", "key_h", utc(2026, 11, 5), 0.5)
        free.cache_hit, free.cache_charged = True, False
        charged.cache_hit, charged.cache_charged = True, True
        await store.insert([free, charged, _priced("str_h3", "key_h", utc(2026, 11, 5), 1.0)])
        total = await store.spend("key_h", "2026-11")
        assert (round(total.usd, 9), total.runs) == (1.5, 3)  # the uncharged hit's original cost is not spent
    finally:
        await store.aclose()


async def test_the_table_starts_from_the_runs_already_recorded(database_url: str) -> None:
    store = RecordStore(database_url)
    try:
        if store.is_sqlite:
            Path(str(store.url.database)).parent.mkdir(parents=True, exist_ok=True)
        await upgrade(store.engine, "0004_runs_judge_usage")  # before key_spend, with runs recorded
        async with store.engine.begin() as conn:
            rows = [_priced("str_1", "key_1", utc(2026, 10, 30, 23, 59), 1.0).row(),
                    _priced("str_2", "key_1", utc(2026, 11, 1, 0, 1), 2.0, judge=0.5).row(),
                    _priced("str_3", "key_1", utc(2026, 11, 20), None).row(),
                    _priced("str_4", None, utc(2026, 11, 20), 7.0).row()]
            later = {"opened", "cache_hit", "cache_charged", "cache_write_1h_tokens", "price_source", "cost_input_usd",
                     "cost_cache_read_usd", "cost_cache_write_usd", "cost_output_usd"}  # 0006's, 0009's and 0010's columns
            before = [{name: value for name, value in row.items() if name not in later} for row in rows]
            await conn.execute(sa.insert(runs), before)
        await upgrade(store.engine)
        async with store.engine.connect() as conn:
            table = (await conn.execute(sa.select(key_spend).order_by(key_spend.c.month))).all()
        assert [(r.owner, r.month, r.usd, r.runs) for r in table] == [
            ("key_1", "2026-10", 1.0, 1), ("key_1", "2026-11", 2.5, 2)]
    finally:
        await store.aclose()


async def test_a_counter_redis_lost_is_rebuilt_equal_to_the_records(redis_url: str, tmp_path) -> None:  # noqa: F811
    # A run ends, its record still lingers in the writer's queue, and Redis loses the key's counter
    # (a restart without disk). The next request's budget check rebuilds the counter from the
    # records, which do not hold that run yet. Before, the counter then stayed one run short for the
    # rest of the month; now the record's commit brings it to the records' total.
    prices = {"mock/*": {"input": 0.0, "output": 1000.0}}
    async with gateway(redis_url=redis_url, prices=prices, data_dir=str(tmp_path), records_linger=0.5) as (
            app, client):
        created = await make_key(client, budget_usd=100)
        key, key_id = created["key"], created["id"]
        month = month_of(datetime.now(UTC))
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        await app.state.auth.settled()
        await app.state.auth.limiter.client.flushdb()  # the record of that run has not been written yet
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        await app.state.auth.settled()
        await app.state.records.flush()
        await asyncio.sleep(0)
        recorded = await app.state.records.store.spend(key_id, month)
        assert recorded.runs == 2 and recorded.usd == pytest.approx(2 * 3 * 0.001)
        assert await app.state.auth.limiter.spend(key_id, month) == pytest.approx(recorded.usd)
