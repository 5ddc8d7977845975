"""The JSON the admin console reads: runs filtered by key and provider, usage per period, key and
model (GET /v1/usage/series), the health page's one answer (GET /v1/admin/health), and a record's
upstream attempts kept in its transcript."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from app.core.events import Usage
from app.records import RunRecord
from tests.auth_support import ADMIN, SIMPLE, bearer, gateway, make_key


def _record(i: int, *, owner: str | None, model: str, at: datetime, cost: float | None = 0.01) -> RunRecord:
    return RunRecord(
        stream_id=f"str_series_{i}", request_id=None, owner=owner, created_at=at, finished_at=at + timedelta(seconds=1),
        model=model, served_model=model, provider=model.split("/")[0], status="error" if i % 5 == 0 else "ok",
        stop_reason="stop", error_code=None,
        usage=Usage(input_tokens=10, output_tokens=5, total_tokens=15, cache_read_tokens=2, cache_write_tokens=1,
                    reasoning_tokens=3, cost_usd=cost),
        steps=1, tools_run=0, validation=None, ttft_ms=5.0, duration_ms=1000.0, content_recorded=True,
        cost_usd=cost, transcript=None)


async def test_runs_filter_by_key_and_provider() -> None:
    async with gateway() as (app, client):
        a = await make_key(client, name="team-a")
        b = await make_key(client, name="team-b")
        for key in (a["key"], a["key"], b["key"]):
            assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        await app.state.records.flush()
        mine = await client.get("/v1/runs", params={"key_id": a["id"]}, headers=bearer(ADMIN))
        assert mine.status_code == 200 and [r["owner"] for r in mine.json()["data"]] == [a["id"]] * 2
        mocks = await client.get("/v1/runs", params={"provider": "mock"}, headers=bearer(ADMIN))
        assert len(mocks.json()["data"]) == 3
        none = await client.get("/v1/runs", params={"provider": "openai"}, headers=bearer(ADMIN))
        assert none.json()["data"] == []
        # a key asks for its own runs by id (allowed) or another's (refused, naming the field)
        own = await client.get("/v1/runs", params={"key_id": b["id"]}, headers=bearer(b["key"]))
        assert [r["owner"] for r in own.json()["data"]] == [b["id"]]
        other = await client.get("/v1/runs", params={"key_id": a["id"]}, headers=bearer(b["key"]))
        assert other.status_code == 403 and other.json()["error"]["field"] == "key_id"


async def test_usage_series_by_day_week_and_month_with_token_splits(database_url: str) -> None:
    async with gateway(database_url=database_url) as (app, client):
        base = datetime(2026, 3, 30, 12, tzinfo=UTC)  # a Monday; the 1st of April is the Wednesday
        records = [_record(i, owner="key_a" if i % 2 else "key_b", model="mock/simple" if i < 6 else "openai/x",
                           at=base + timedelta(days=i % 4)) for i in range(8)]
        assert (await client.get("/healthz")).status_code == 200  # served: the lifespan migrated the database
        await app.state.records.store.insert(records)
        params = {"since": "2026-03-01T00:00:00Z", "until": "2026-05-01T00:00:00Z"}
        day = (await client.get("/v1/usage/series", params={**params, "bucket": "day"}, headers=bearer(ADMIN))).json()
        assert {p["period"] for p in day["data"]} == {"2026-03-30", "2026-03-31", "2026-04-01", "2026-04-02"}
        assert sum(p["requests"] for p in day["data"]) == 8
        week = (await client.get("/v1/usage/series", params={**params, "bucket": "week"}, headers=bearer(ADMIN))).json()
        assert {p["period"] for p in week["data"]} == {"2026-03-30"}
        month = (await client.get("/v1/usage/series", params={**params, "bucket": "month"}, headers=bearer(ADMIN))).json()
        assert [p["period"] for p in month["data"]] == sorted(p["period"] for p in month["data"])
        assert {p["period"] for p in month["data"]} == {"2026-03", "2026-04"}
        one = next(p for p in week["data"] if p["key_id"] == "key_a" and p["model"] == "openai/x")
        assert one["requests"] == 1 and one["tokens"] == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                                          "cache_read_tokens": 2, "cache_write_tokens": 1,
                                                          "reasoning_tokens": 3, "cache_write_1h_tokens": 0}
        assert sum(p["errors"] for p in week["data"]) == 2 and round(sum(p["cost_usd"] for p in week["data"]), 6) == 0.08
        only_a = (await client.get("/v1/usage/series", params={**params, "key_id": "key_a"}, headers=bearer(ADMIN))).json()
        assert {p["key_id"] for p in only_a["data"]} == {"key_a"}
        bad = await client.get("/v1/usage/series", params={**params, "bucket": "year"}, headers=bearer(ADMIN))
        assert bad.status_code == 422
        key = await make_key(client, name="team-c")
        own = await client.get("/v1/usage/series", params=params, headers=bearer(key["key"]))
        assert own.status_code == 200 and own.json()["key_id"] == key["id"] and own.json()["data"] == []
        other = await client.get("/v1/usage/series", params={**params, "key_id": "key_a"}, headers=bearer(key["key"]))
        assert other.status_code == 403 and other.json()["error"]["field"] == "key_id"


async def test_admin_health_lists_providers_breakers_and_active_runs() -> None:
    async with gateway() as (_, client):
        slow = {**SIMPLE, "model": "mock/lorem-100000", "provider_options": {"delay_ms": 50}, "stream": True}
        started = await client.post("/v1/generate", json=slow, headers=bearer(ADMIN))
        assert started.status_code == 202
        stream_id = started.json()["stream_id"]
        health = await client.get("/v1/admin/health", headers=bearer(ADMIN))
        assert health.status_code == 200
        body = health.json()
        assert body["ready"] is True and body["readiness"]["status"] == "ready"
        providers = {p["name"]: p for p in body["providers"]}
        assert providers["mock"]["served"] is True and providers["openai"]["served"] is False
        assert "OPENAI_API_KEY" in providers["openai"]["why"]
        assert [r["stream_id"] for r in body["active_runs"]] == [stream_id]
        assert body["active_runs"][0]["model"] == "mock/lorem-100000" and isinstance(body["circuits"], dict)
        await client.post(f"/v1/stream/{stream_id}/cancel", headers=bearer(ADMIN))
        key = await make_key(client, name="team-h")
        refused = await client.get("/v1/admin/health", headers=bearer(key["key"]))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_only"


@pytest.mark.parametrize("model", ["mock/tool_call"])
async def test_a_recorded_transcript_keeps_the_upstream_attempts(model: str) -> None:
    async with gateway() as (app, client):
        done = await client.post("/v1/generate", json={**SIMPLE, "model": model}, headers=bearer(ADMIN))
        assert done.status_code == 200
        await app.state.records.flush()
        run = (await client.get("/v1/runs", headers=bearer(ADMIN))).json()["data"][0]
        for _ in range(100):  # the live log may still hold it: the record's is what this asks for
            if app.state.gateway.store.get(run["id"]) is None:
                break
            await asyncio.sleep(0)
        transcript = await app.state.records.store.transcript(run["id"])
        attempts = transcript["attempts"]
        assert attempts and attempts[0]["target"] == model and attempts[0]["outcome"] == "ok"
        assert attempts[0]["duration_ms"] >= 0
