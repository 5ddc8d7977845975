"""One error vocabulary for store faults (issue 25): Redis unreachable is 503 `store_unavailable`,
retryable, whichever check notices it first (rate limits, budget, streams); the key database
unreachable is 503 `auth_unavailable`, retryable, for key lookups and the admin routes alike, and
/readyz is not ready while keys are required and their database is down. Native API and facades."""

from __future__ import annotations

import pytest

from tests.auth_support import ADMIN, SIMPLE, bearer, free_port, gateway, make_key
from tests.records_support import postgres, postgres_url, proxied  # noqa: F401

FACADES = [("/v1/chat/completions", {**SIMPLE, "max_tokens": 50}), ("/v1/messages", {**SIMPLE, "max_tokens": 50})]


@pytest.mark.parametrize("fields", [{"rpm": 10}, {"budget_usd": 5}, {"max_concurrent": 2}, {}],
                         ids=["rpm", "budget", "concurrency", "no-limits"])
async def test_redis_unreachable_is_store_unavailable_whichever_check_notices(fields) -> None:
    async with gateway(redis_url=f"redis://127.0.0.1:{free_port()}/0") as (_, client):
        key = (await make_key(client, **fields))["key"]
        response = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "store_unavailable" and error["retryable"] is True
        openai_facade = await client.post(FACADES[0][0], json=FACADES[0][1], headers=bearer(key))
        assert openai_facade.status_code == 503
        assert openai_facade.json()["error"]["code"] == "store_unavailable"
        anthropic_facade = await client.post(FACADES[1][0], json=FACADES[1][1], headers=bearer(key))
        assert anthropic_facade.status_code == 503 and anthropic_facade.json()["type"] == "error"


async def test_key_database_unreachable_is_auth_unavailable_and_not_ready(postgres_url: str) -> None:  # noqa: F811
    proxy, through = await proxied(postgres_url)
    async with gateway(database_url=through, key_cache_seconds=0.001) as (_, client):
        key = (await make_key(client, name="team-db"))["key"]
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        assert (await client.get("/readyz")).json()["keys"] == "ok"
        await proxy.cut()
        response = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "auth_unavailable" and error["retryable"] is True
        for path, body in FACADES:
            facade = await client.post(path, json=body, headers=bearer(key))
            assert facade.status_code == 503, (path, facade.text)
        listed = await client.get("/v1/admin/keys", headers=bearer(ADMIN))
        created = await client.post("/v1/admin/keys", json={"name": "team-b"}, headers=bearer(ADMIN))
        one = await client.get("/v1/admin/keys/key_x", headers=bearer(ADMIN))
        for answer in (listed, created, one):
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "auth_unavailable" and answer.json()["error"]["retryable"]
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["keys"] == "unreachable"
        assert "key database" in ready.json()["reason"]
        # the admin key itself needs no database: it still reaches what does not need one
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(ADMIN))).status_code == 200
