"""Access control on each engine: keys and usage sums on SQLite and PostgreSQL (the day grouping is
dialect-specific), the in-memory and Redis limiters deciding alike, and a Redis that cannot be
reached refusing work (503) rather than letting it through unlimited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.auth import MemoryLimiter, RedisLimiter
from app.auth.limiter import Denied, Limits
from app.records import RecordStore
from tests.auth_support import ADMIN, MID_MINUTE, SIMPLE, bearer, free_port, gateway, make_key, redis_url  # noqa: F401
from tests.records_support import record


async def test_keys_and_usage_on_each_engine(database_url: str) -> None:
    prices = {"mock/*": {"input": 0, "output": 1_000_000}}
    async with gateway(database_url=database_url, prices=prices) as (app, client):
        created = await make_key(client, name="team-pg", models=["mock/*"], budget_usd=100)
        key = created["key"]
        for _ in range(2):
            assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        await app.state.records.flush()
        # a run from yesterday, seeded straight into the store, shows up as its own day
        yesterday = datetime.now(UTC) - timedelta(days=1)
        old = record("str_old", created_at=yesterday)
        old.owner = created["id"]
        old.cost_usd = 1.5
        await app.state.records.store.insert([old])
        by_day = (await client.get("/v1/usage", params={"group_by": "day"}, headers=bearer(key))).json()
        assert [g["group"] for g in by_day["data"]] == [yesterday.strftime("%Y-%m-%d"),
                                                        datetime.now(UTC).strftime("%Y-%m-%d")]
        assert by_day["data"][0]["requests"] == 1 and by_day["data"][0]["cost_usd"] == 1.5
        assert by_day["data"][1]["requests"] == 2 and by_day["data"][1]["cost_usd"] == pytest.approx(6.0)
        assert by_day["total"]["tokens"]["total_tokens"] > 7
        revoked = await client.delete(f"/v1/admin/keys/{created['id']}", headers=bearer(ADMIN))
        assert revoked.status_code == 204
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 401
    store = RecordStore(database_url)
    try:
        assert (await store.get("str_old")).owner == created["id"]
    finally:
        await store.aclose()


async def _decisions(limiter) -> list[str]:
    limits = Limits(rpm=3, tpm=50, max_concurrent=2)
    out = []
    slots = []
    for _ in range(3):
        try:
            slots.append((await limiter.admit("key_x", limits)).slot)
            out.append("ok")
        except Denied as denied:
            out.append(denied.reason)
    await limiter.release("key_x", slots[0])
    try:
        admission = await limiter.admit("key_x", limits)
        out.append("ok " + admission.headers["x-ratelimit-remaining-requests"])
    except Denied as denied:
        out.append(denied.reason)
    await limiter.add_tokens("key_x", 60)
    try:
        await limiter.admit("key_y", Limits(tpm=50))
        await limiter.add_tokens("key_y", 60)
        await limiter.admit("key_y", Limits(tpm=50))
    except Denied as denied:
        out.append(denied.reason + " " + denied.headers["x-ratelimit-remaining-tokens"])
    assert await limiter.spend("key_x", "2026-11") is None
    await limiter.add_spend("key_x", "2026-11", 0.25)  # a counter the store lost is not restarted from 0
    out.append(str(await limiter.spend("key_x", "2026-11")))
    await limiter.put_spend("key_x", "2026-11", 2.5, 5)
    await limiter.put_spend("key_x", "2026-11", 99, 5)  # not newer (the same runs): ignored
    await limiter.put_spend("key_x", "2026-11", 1.5, 3)  # an older total, arriving late: ignored
    await limiter.add_spend("key_x", "2026-11", 0.5)
    out.append(str(await limiter.spend("key_x", "2026-11")))
    await limiter.put_spend("key_x", "2026-11", 4.0, 6)  # a newer total replaces it
    out.append(str(await limiter.spend("key_x", "2026-11")))
    return out


async def _redis_decisions(redis: RedisLimiter) -> list[str]:
    """`_decisions` within one minute of the Redis clock (the windows follow it): a run that
    straddled a minute boundary, its counters reset half-way, is run again on an empty database."""
    for _ in range(2):
        await redis.client.flushdb()
        minute = (await redis.client.time())[0] // 60
        out = await _decisions(redis)
        if (await redis.client.time())[0] // 60 == minute:
            return out
    pytest.fail("two runs in a row straddled a minute of the Redis clock")


async def test_memory_and_redis_limiters_decide_alike(redis_url: str) -> None:  # noqa: F811
    redis = RedisLimiter(redis_url)
    try:
        assert await _decisions(MemoryLimiter(clock=lambda: MID_MINUTE)) == await _redis_decisions(redis) == [
            "ok", "ok", "concurrency", "ok 0", "tokens 0", "None", "3.0", "4.0"]
    finally:
        await redis.aclose()


async def test_unreachable_redis_refuses_with_503() -> None:
    async with gateway(redis_url=f"redis://127.0.0.1:{free_port()}/0") as (_, client):
        assert (await client.get("/readyz")).json()["limits"] == "unreachable"
        limited = (await make_key(client, rpm=10))["key"]
        response = await client.post("/v1/generate", json=SIMPLE, headers=bearer(limited))
        assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
        # A key with no limits needs no counters, but FOUNDRY_REDIS_URL also holds the shared stream
        # store (issue 13): with Redis away no run can start, and the refusal names the store.
        unlimited = (await make_key(client, name="team-free"))["key"]
        response = await client.post("/v1/generate", json=SIMPLE, headers=bearer(unlimited))
        assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
        assert response.json()["error"]["retryable"] is True
