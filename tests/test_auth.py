"""Access control through the HTTP API under uvicorn: keys (401), admin (403, 422), models (403),
limits (429 with headers), budget (429 budget_exceeded), ownership (404), usage, open mode,
the metrics token, and no key material anywhere after creation."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.accounting import estimate
from app.auth.policy import KeyFields, Price
from app.config_file import ConfigError
from app.core.messages import Message
from app.main import create_app
from app.settings import Settings
from tests.auth_support import ADMIN, SIMPLE, bearer, gateway, make_key, pin_the_minute
from tests.support import parse_sse, serve

SLOW = {**SIMPLE, "model": "mock/lorem-30", "provider_options": {"delay_ms": 10}}
SHARED = pytest.mark.asyncio(loop_scope="module")
"""For the tests on the shared gateway: they run in the module's loop, where it serves."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """One keyed gateway and its database for the tests that need no settings, state or listing of
    their own: each makes its own keys and reads only what those keys own."""
    async with gateway() as (_, shared):
        yield shared


# -- open mode -------------------------------------------------------------------------------------


async def test_open_mode_needs_no_key_but_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    async with gateway(admin_key=None) as (_, client):
        assert (await client.post("/v1/generate", json=SIMPLE)).status_code == 200
        ready = (await client.get("/readyz")).json()
        assert ready["auth"] == "open" and ready["limits"] == "memory"
        admin = await client.get("/v1/admin/keys")
        assert admin.status_code == 403 and admin.json()["error"]["code"] == "admin_disabled"
    assert '"auth_open"' in capsys.readouterr().out


def test_auth_required_refuses_to_start_without_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """create_app() as the server calls it, reading the environment: the mistake is one ConfigError line."""
    monkeypatch.setenv("FOUNDRY_AUTH", "required")
    monkeypatch.setenv("FOUNDRY_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("FOUNDRY_ADMIN_KEY", raising=False)
    with pytest.raises(ConfigError) as refused:
        create_app()
    assert [line for line in refused.value.lines if "FOUNDRY_AUTH=required" in line] != []
    Settings(auth="required", admin_key=ADMIN)  # with a key it starts


# -- who is calling ----------------------------------------------------------------------------------


@SHARED
@pytest.mark.parametrize("headers, code", [
    ({}, "missing_api_key"),
    ({"Authorization": "Basic dXNlcjpwYXNz"}, "invalid_authorization"),
    ({"Authorization": "Bearer"}, "invalid_authorization"),
    ({"Authorization": "Bearer a b"}, "invalid_authorization"),
    ({"Authorization": "Bearer fgw-short"}, "invalid_api_key"),
    ({"Authorization": "Bearer " + "fgw-" + "!" * 43}, "invalid_api_key"),
    ({"Authorization": "Bearer " + "x" * 4000}, "invalid_api_key"),
    ({"x-api-key": "fgw-" + "A" * 43}, "invalid_api_key"),
    ({"x-api-key": "sk-not-ours"}, "invalid_api_key"),
    ({"Authorization": "Bearer fgw-\u00e9\u00e9"}, "invalid_api_key"),
])
async def test_missing_malformed_and_unknown_keys_are_401(client: httpx.AsyncClient, headers: dict[str, str],
                                                          code: str) -> None:
    for method, path, body in (("POST", "/v1/generate", SIMPLE), ("POST", "/v1/stream", SIMPLE),
                               ("GET", "/v1/stream/str_x", None), ("GET", "/v1/stream/str_x/transcript", None),
                               ("GET", "/v1/runs", None), ("GET", "/v1/runs/str_x", None),
                               ("GET", "/v1/usage", None), ("GET", "/v1/admin/keys", None)):
        encoded = {k: v.encode() for k, v in headers.items()}
        response = await client.request(method, path, json=body, headers=encoded)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == code
        assert response.headers["www-authenticate"] == "Bearer"
    for path in ("/healthz", "/readyz"):
        assert (await client.get(path)).status_code == 200
    assert (await client.get("/readyz")).json()["auth"] == "keys"


async def test_admin_creates_lists_changes_and_revokes_a_key() -> None:
    async with gateway() as (_, client):
        created = await make_key(client, name="team-a", models=["mock/*"], rpm=100)
        key, key_id = created["key"], created["id"]
        assert key.startswith("fgw-") and len(key) == 47 and key_id.startswith("key_")
        # Bearer and x-api-key both work
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        assert (await client.post("/v1/generate", json=SIMPLE, headers={"x-api-key": key})).status_code == 200
        listed = await client.get("/v1/admin/keys", headers=bearer(ADMIN))
        one = await client.get(f"/v1/admin/keys/{key_id}", headers=bearer(ADMIN))
        assert [k["id"] for k in listed.json()["data"]] == [key_id] and one.json()["rpm"] == 100
        for response in (listed, one):
            assert key not in response.text and "key" not in response.json().get("data", [response.json()])[0]
        patched = await client.patch(f"/v1/admin/keys/{key_id}", json={"rpm": None, "models": ["mock/simple"]},
                                     headers=bearer(ADMIN))
        assert patched.status_code == 200 and patched.json()["rpm"] is None
        assert patched.json()["models"] == ["mock/simple"] and patched.json()["name"] == "team-a"
        # a normal key is not the admin
        for method, path in (("GET", "/v1/admin/keys"), ("POST", "/v1/admin/keys"), ("GET", f"/v1/admin/keys/{key_id}"),
                             ("PATCH", f"/v1/admin/keys/{key_id}"), ("DELETE", f"/v1/admin/keys/{key_id}")):
            response = await client.request(method, path, json={"name": "x"}, headers=bearer(key))
            assert response.status_code == 403 and response.json()["error"]["code"] == "admin_only"
        assert (await client.delete(f"/v1/admin/keys/{key_id}", headers=bearer(ADMIN))).status_code == 204
        refused = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        again = await client.delete(f"/v1/admin/keys/{key_id}", headers=bearer(ADMIN))
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_revoked"
        assert again.json()["error"]["field"] == "key_id" and "already revoked at" in again.json()["error"]["message"]
        assert (await client.delete("/v1/admin/keys/key_nope", headers=bearer(ADMIN))).status_code == 404
        assert (await client.get("/v1/admin/keys/key_nope", headers=bearer(ADMIN))).status_code == 404
        assert (await client.get(f"/v1/admin/keys/{key_id}", headers=bearer(ADMIN))).json()["revoked_at"]


async def test_a_key_past_its_expiry_is_listed_expired_not_active() -> None:
    async with gateway() as (app, client):
        live = await make_key(client, name="live", expires_at=(datetime.now(UTC) + timedelta(days=30)).isoformat())
        row, _ = await app.state.auth.keystore.create(KeyFields(name="old", expires_at=datetime.now(UTC)))
        listed = (await client.get("/v1/admin/keys", headers=bearer(ADMIN))).json()["data"]
        assert {k["name"]: k["state"] for k in listed} == {"live": "active", "old": "expired"}
        one = await client.get(f"/v1/admin/keys/{row.policy.id}", headers=bearer(ADMIN))
        assert one.json()["state"] == "expired"
        await client.delete(f"/v1/admin/keys/{live['id']}", headers=bearer(ADMIN))
        assert (await client.get(f"/v1/admin/keys/{live['id']}", headers=bearer(ADMIN))).json()["state"] == "revoked"


@SHARED
@pytest.mark.parametrize("body, field", [
    ({"name": "a", "rpm": 0}, "rpm"),
    ({"name": "a", "tpm": -5}, "tpm"),
    ({"name": "a", "max_concurrent": "many"}, "max_concurrent"),
    ({"name": "a", "budget_usd": -1}, "budget_usd"),
    ({"name": "a", "models": ["openai/gpt 4"]}, "models"),
    ({"name": "a", "models": "mock/*"}, "models"),
    ({"name": "a", "expires_at": "tomorrow"}, "expires_at"),
    ({"name": "a", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    ({"name": "a", "validators": [{"name": "no_such_validator"}]}, "validators"),
    ({"name": "", "rpm": 1}, "name"),
    ({"rpm": 1}, "name"),
    ({"name": "a", "key": "fgw-" + "A" * 43}, "key"),
])
async def test_invalid_key_fields_are_422_naming_the_field(client: httpx.AsyncClient, body: dict, field: str) -> None:
    response = await client.post("/v1/admin/keys", json=body, headers=bearer(ADMIN))
    assert response.status_code == 422 and response.json()["error"]["field"] == field, response.text
    if "name" in body and body.get("name"):
        key_id = (await make_key(client))["id"]
        patch = {k: v for k, v in body.items() if k != "name"}
        response = await client.patch(f"/v1/admin/keys/{key_id}", json=patch, headers=bearer(ADMIN))
        assert response.status_code == 422 and response.json()["error"]["field"] == field, response.text


async def test_expired_key_is_401() -> None:
    async with gateway() as (app, client):  # a key whose expiry passed (the API refuses to make one so)
        await make_key(client)  # the key database is ready
        _, key = await app.state.auth.keystore.create(KeyFields(name="old", expires_at=datetime.now(UTC)))
        response = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert response.status_code == 401 and response.json()["error"]["code"] == "key_expired"


# -- models, limits, budget --------------------------------------------------------------------------


async def test_key_limited_to_mock_models() -> None:
    async with gateway(aliases={"cheap": "mock/simple", "smart": "openai/gpt-4o"}) as (_, client):
        key = (await make_key(client, models=["mock/*"]))["key"]
        for model in ("mock/simple", "cheap"):
            ok = await client.post("/v1/generate", json={**SIMPLE, "model": model}, headers=bearer(key))
            assert ok.status_code == 200, ok.text
        for model in ("openai/gpt-4o", "smart", "anthropic/claude"):
            for path in ("/v1/generate", "/v1/stream"):
                denied = await client.post(path, json={**SIMPLE, "model": model}, headers=bearer(key))
                assert denied.status_code == 403, denied.text
                assert denied.json()["error"] | {"message": ""} == {
                    "code": "model_not_allowed", "message": "", "retryable": False, "field": "model"}


async def test_requests_per_minute_429_with_headers() -> None:
    async with gateway() as (app, client):
        pin_the_minute(app)  # every request in one window: the counts below are exact
        key = (await make_key(client, rpm=2))["key"]
        first = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert first.headers["x-ratelimit-reset-requests"] == "30s"  # the window's end, half a minute away
        second = await client.post("/v1/stream", json=SIMPLE, headers=bearer(key))
        assert second.status_code == 200 and second.headers["x-ratelimit-remaining-requests"] == "0"
        third = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert third.status_code == 429
        error = third.json()["error"]
        assert error["code"] == "rate_limited" and error["limit"] == "requests" and error["retryable"] is True
        assert third.headers["retry-after"] == "30"
        assert third.headers["x-ratelimit-remaining-requests"] == "0"
        # another key has its own counters
        other = (await make_key(client, name="team-b", rpm=2))["key"]
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(other))).status_code == 200


async def test_tokens_per_minute() -> None:
    async with gateway() as (app, client):
        pin_the_minute(app)  # the tokens counted and the next admission in one window
        key = (await make_key(client, tpm=2))["key"]
        first = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert first.status_code == 200 and first.json()["usage"]["total_tokens"] >= 2
        await app.state.auth.settled()
        second = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert second.status_code == 429 and second.json()["error"]["limit"] == "tokens"
        assert second.headers["x-ratelimit-limit-tokens"] == "2" and second.headers["x-ratelimit-remaining-tokens"] == "0"


async def test_concurrency_limit() -> None:
    async with gateway() as (app, client):
        key = (await make_key(client, max_concurrent=1))["key"]
        async with client.stream("POST", "/v1/stream", json=SLOW, headers=bearer(key)) as running:
            assert running.status_code == 200
            lines = running.aiter_lines()
            assert (await anext(lines)).startswith("id: 1")  # the run is under way
            busy = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
            assert busy.status_code == 429 and busy.json()["error"]["limit"] == "concurrency"
            assert busy.headers["retry-after"] == "1"
            rest = "".join([line + "\n" async for line in lines])
            assert "event: final" in rest
        await app.state.auth.settled()
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200
        # a run that fails to open gives its slot back
        bad = await client.post("/v1/generate", json={**SIMPLE, "model": "mock/no_such"}, headers=bearer(key))
        assert bad.status_code == 404
        await app.state.auth.settled()
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 200


async def test_budget_exhaustion_with_a_price_table(tmp_path: Path) -> None:
    prices = {"mock/*": {"input": 0.0, "output": 1_000_000.0}}  # 1 USD per output token
    async with gateway(prices=prices, data_dir=str(tmp_path)) as (app, client):
        created = await make_key(client, budget_usd=5)
        key = created["key"]
        first = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        usage = first.json()["usage"]
        assert usage["cost_usd"] == pytest.approx(usage["output_tokens"] * 1.0)
        await app.state.records.flush()  # a run counts toward the budget once its record is written
        second = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))  # 3 of 5 spent: admitted
        assert second.status_code == 200
        await app.state.records.flush()
        spent = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert spent.status_code == 429, spent.text
        error = spent.json()["error"]
        assert error["code"] == "budget_exceeded" and error["budget_usd"] == 5 and error["spent_usd"] == 6
        assert int(spent.headers["retry-after"]) > 0
        await app.state.records.flush()
        usage = (await client.get("/v1/usage", headers=bearer(key))).json()
        assert usage["key_id"] == created["id"]
        assert usage["total"]["requests"] == 2 and usage["total"]["cost_usd"] == pytest.approx(6.0)
    # after a restart the month's spend comes back from the run records
    async with gateway(prices=prices, data_dir=str(tmp_path)) as (_, client):
        assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code == 429


async def test_a_burst_of_one_replica_passes_budget_and_tpm_by_one_estimate_at_most() -> None:
    """The memory limiter reserves like the Redis one (tests/test_auth_replicas.py runs two replicas)."""
    price = Price(input=1000.0, output=1000.0)
    body = {**SIMPLE, "model": "mock/lorem-40", "max_tokens": 40, "provider_options": {"delay_ms": 5}}
    reserved = estimate([Message(**m) for m in SIMPLE["messages"]], 40, 1024, price.rates())
    async with gateway(prices={"mock/*": price.model_dump()}) as (app, client):
        pin_the_minute(app)
        budget = (await make_key(client, budget_usd=0.05))["key"]
        tpm = (await make_key(client, tpm=100))["key"]
        for key in (budget, tpm):
            answers = await asyncio.gather(*(client.post("/v1/generate", json=body, headers=bearer(key))
                                             for _ in range(12)))
            ran = [r.json()["usage"] for r in answers if r.status_code == 200]
            assert ran and {r.status_code for r in answers} == {200, 429}
            if key == budget:
                assert sum(u["cost_usd"] for u in ran) <= 0.05 + reserved.usd
            else:
                assert sum(u["total_tokens"] for u in ran) <= 100 + reserved.tokens


@pytest.mark.parametrize("where", ["this replica", "the database"])
async def test_a_revoked_keys_running_stream_ends_with_key_revoked(where: str) -> None:
    """Revoked through this replica's admin API, its runs here end at once; revoked elsewhere (the
    database, as another replica's revocation reaches it), within FOUNDRY_KEY_CACHE_SECONDS."""
    long = {**SIMPLE, "model": "mock/lorem-2000", "provider_options": {"delay_ms": 20}}  # 40 s unrevoked
    async with gateway(key_cache_seconds=0.5) as (app, client):
        created = await make_key(client)
        async with client.stream("POST", "/v1/stream", json=long, headers=bearer(created["key"])) as running:
            lines = running.aiter_lines()
            async for line in lines:
                if line.startswith("event: token"):
                    break
            if where == "this replica":
                assert (await client.delete(f"/v1/admin/keys/{created['id']}", headers=bearer(ADMIN))).status_code == 204
            else:
                assert await app.state.auth.keystore.revoke(created["id"])
            events = parse_sse("\n".join([line async for line in lines]))
        assert [kind for _, kind, _ in events].count("final") == 1 and events[-1][1] == "final"
        final = events[-1][2]
        assert final["status"] == "error" and final["error"]["code"] == "key_revoked"
        assert final["error"]["retryable"] is False and len(final["message"]["content"].split()) < 2000


@SHARED
async def test_key_validators_apply_to_its_requests(client: httpx.AsyncClient) -> None:
    key = (await make_key(client, validators=[{"name": "regex_deny", "config": {"patterns": ["(?i)world"]}}]))["key"]
    blocked = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
    assert blocked.json()["status"] == "blocked"
    other = (await make_key(client, name="team-b"))["key"]
    assert (await client.post("/v1/generate", json=SIMPLE, headers=bearer(other))).json()["status"] == "ok"


# -- ownership and usage -----------------------------------------------------------------------------


async def test_another_keys_stream_transcript_and_run_are_404() -> None:
    async with gateway() as (app, client):
        a, b = (await make_key(client, name="team-a"))["key"], (await make_key(client, name="team-b"))["key"]
        accepted = await client.post("/v1/generate", json={**SIMPLE, "stream": True}, headers=bearer(a))
        stream_id = accepted.json()["stream_id"]
        own = await client.get(f"/v1/stream/{stream_id}", headers=bearer(a))
        assert own.status_code == 200 and parse_sse(own.content)[-1][1] == "final"
        await app.state.records.flush()
        for path in (f"/v1/stream/{stream_id}", f"/v1/stream/{stream_id}/transcript", f"/v1/runs/{stream_id}"):
            theirs = await client.get(path, headers=bearer(b))
            assert theirs.status_code == 404, path
            unknown = await client.get(path.replace(stream_id, "str_00000000000000000000000000000000"),
                                       headers=bearer(b))
            assert theirs.json()["error"]["code"] == unknown.json()["error"]["code"]  # nothing confirmed
            for key in (a, ADMIN):
                assert (await client.get(path, headers=bearer(key))).status_code == 200, path
        assert [r["id"] for r in (await client.get("/v1/runs", headers=bearer(b))).json()["data"]] == []
        assert [r["id"] for r in (await client.get("/v1/runs", headers=bearer(a))).json()["data"]] == [stream_id]
        # once the stream has expired, the transcript from the records keeps its owner
        app.state.gateway.store._logs.clear()
        assert (await client.get(f"/v1/stream/{stream_id}/transcript", headers=bearer(b))).status_code == 404
        assert (await client.get(f"/v1/stream/{stream_id}/transcript", headers=bearer(a))).status_code == 200


async def test_usage_by_model_and_day_own_key_and_admin() -> None:
    async with gateway(prices={"mock/simple": {"input": 1, "output": 2}}) as (app, client):
        a_key = await make_key(client, name="team-a")
        b_key = await make_key(client, name="team-b")
        a, b = a_key["key"], b_key["key"]
        for body in (SIMPLE, SIMPLE, {**SIMPLE, "model": "mock/echo"}):
            assert (await client.post("/v1/generate", json=body, headers=bearer(a))).status_code == 200
        # Broken after its first text chunk: past the point of fallback (issue 16), the run ends with
        # final{error} and is recorded (a failure before any content is an HTTP error and no run).
        failing = {**SIMPLE, "provider_options": {"fail_after": 2}}
        broken = await client.post("/v1/generate", json=failing, headers=bearer(a))
        assert broken.status_code == 502 and broken.json()["status"] == "error", broken.text
        await client.post("/v1/generate", json=SIMPLE, headers=bearer(b))
        await app.state.records.flush()
        by_model = (await client.get("/v1/usage", params={"group_by": "model"}, headers=bearer(a))).json()
        groups = {g["group"]: g for g in by_model["data"]}
        assert set(groups) == {"mock/simple", "mock/echo"}
        assert groups["mock/simple"]["requests"] == 3 and groups["mock/simple"]["errors"] == 1
        assert groups["mock/simple"]["cost_usd"] > 0 and groups["mock/echo"]["cost_usd"] == 0
        assert set(groups["mock/simple"]["tokens"]) == {"input_tokens", "output_tokens", "total_tokens",
                                                        "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                                                        "cache_write_1h_tokens"}
        by_day = (await client.get("/v1/usage", params={"group_by": "day"}, headers=bearer(a))).json()
        assert [g["group"] for g in by_day["data"]] == [datetime.now(UTC).strftime("%Y-%m-%d")]
        assert by_day["total"]["requests"] == 4
        denied = await client.get("/v1/usage", params={"key_id": b_key["id"]}, headers=bearer(a))
        assert denied.status_code == 403 and denied.json()["error"]["field"] == "key_id"
        admin_b = (await client.get("/v1/usage", params={"key_id": b_key["id"]}, headers=bearer(ADMIN))).json()
        assert admin_b["total"]["requests"] == 1
        everyone = (await client.get("/v1/usage", headers=bearer(ADMIN))).json()
        assert everyone["key_id"] is None and everyone["total"]["requests"] == 5
        future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        empty = await client.get("/v1/usage", params={"since": future, "until": future}, headers=bearer(a))
        assert empty.status_code == 422 and empty.json()["error"]["field"] == "since"
        bad = await client.get("/v1/usage", params={"group_by": "week"}, headers=bearer(a))
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "query.group_by"


# -- configuration keys, metrics, no key material ----------------------------------------------------


async def test_keys_in_the_config_file_by_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "fgw-" + "k" * 43
    config = tmp_path / "gateway.toml"
    config.write_text(f'[[keys]]\nname = "ops"\nhash = "{hashlib.sha256(key.encode()).hexdigest()}"\n'
                      f'models = ["mock/*"]\nrpm = 50\n')
    monkeypatch.setenv("FOUNDRY_CONFIG", str(config))
    app = create_app(Settings())
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/readyz")).json()["auth"] == "keys"
        ok = await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert ok.status_code == 200 and ok.headers["x-ratelimit-limit-requests"] == "50"
        assert (await client.post("/v1/generate", json={**SIMPLE, "model": "openai/x"},
                                  headers=bearer(key))).status_code == 403
        assert (await client.post("/v1/generate", json=SIMPLE)).status_code == 401


async def test_metrics_token_and_per_key_counters() -> None:
    async with gateway(metrics_token="scrape-token-1") as (app, client):
        pin_the_minute(app)  # the second request falls in the first one's window: limited
        key = (await make_key(client, name="team-a", rpm=1))["key"]
        await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/metrics", headers=bearer("wrong"))).status_code == 401
        text = (await client.get("/metrics", headers=bearer("scrape-token-1"))).text
        assert 'foundry_key_requests_total{key="team-a",outcome="admitted"} 1.0' in text
        assert 'foundry_key_requests_total{key="team-a",outcome="limited_requests"} 1.0' in text
        assert 'foundry_key_runs_total{key="team-a",status="ok"} 1.0' in text


async def test_no_key_material_in_logs_metrics_or_responses(capsys: pytest.CaptureFixture[str]) -> None:
    async with gateway() as (app, client):
        created = await make_key(client, name="team-a", rpm=5)
        key = created["key"]
        secrets = (key, key[4:], hashlib.sha256(key.encode()).hexdigest(), ADMIN)
        texts = []
        accepted = await client.post("/v1/generate", json={**SIMPLE, "stream": True}, headers=bearer(key))
        stream_id = accepted.json()["stream_id"]
        texts.append(accepted.text)
        texts.append((await client.get(f"/v1/stream/{stream_id}", headers={"x-api-key": key})).text)
        await app.state.records.flush()
        for path in ("/v1/admin/keys", f"/v1/admin/keys/{created['id']}", "/v1/runs", f"/v1/runs/{stream_id}",
                     f"/v1/stream/{stream_id}/transcript", "/v1/usage", "/metrics", "/readyz"):
            response = await client.get(path, headers=bearer(ADMIN))
            texts.append(response.text + json.dumps(dict(response.headers)))
        texts.append((await client.post("/v1/generate", json=SIMPLE, headers=bearer(key[:-1] + "Z"))).text)
        texts.append((await client.post("/v1/generate", json={**SIMPLE, "model": "x/y"}, headers=bearer(key))).text)
    logs = capsys.readouterr()
    texts += [logs.out, logs.err]
    assert '"key_id": "' + created["id"] in logs.out  # the log names the key by id
    for text in texts:
        for secret in secrets:
            assert secret not in text


async def test_facades_take_the_same_keys_models_and_limits() -> None:
    async with gateway() as (app, client):
        pin_the_minute(app)  # the four admissions below share one window, whatever the wall clock
        key = (await make_key(client, models=["mock/*"], rpm=3))["key"]
        chat = {"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}
        anthropic = {**chat, "max_tokens": 32}
        for path, body in (("/v1/chat/completions", chat), ("/v1/messages", anthropic)):
            missing = await client.post(path, json=body)
            assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
            denied = await client.post(path, json={**body, "model": "openai/gpt-4o"}, headers=bearer(key))
            assert denied.status_code == 403, denied.text
        ok = await client.post("/v1/chat/completions", json=chat, headers=bearer(key))
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "Hello, world"
        assert ok.headers["x-ratelimit-limit-requests"] == "3"
        ok = await client.post("/v1/messages", json=anthropic, headers={"x-api-key": key})
        assert ok.status_code == 200 and ok.headers["x-ratelimit-remaining-requests"] == "1"
        assert (await client.post("/v1/messages", json=anthropic, headers={"x-api-key": key})).status_code == 200
        limited = await client.post("/v1/chat/completions", json=chat, headers=bearer(key))
        assert limited.status_code == 429 and limited.headers["x-ratelimit-remaining-requests"] == "0"
        assert "retry-after" in limited.headers
        assert (await client.get("/v1/models")).status_code == 401
        assert (await client.get("/v1/models", headers=bearer(key))).status_code == 200
        assert (await client.get("/")).status_code == 200  # the playground page stays open


async def test_count_tokens_counts_against_the_keys_requests_per_minute_only() -> None:
    counted: list[str] = []

    async def count(request: Request) -> JSONResponse:
        counted.append((await request.json())["model"])
        return JSONResponse({"input_tokens": 42})

    upstream = Starlette(routes=[Route("/v1/messages/count_tokens", count, methods=["POST"])])
    body = {"model": "anthropic/claude-x", "messages": [{"role": "user", "content": "hi"}]}
    async with serve(upstream) as up, gateway(anthropic_api_key="sk-ant-test-upstream", anthropic_base_url=up,
                                              upstream_max_retries=0) as (app, client):
        limiter = pin_the_minute(app)
        created = await make_key(client, models=["anthropic/*"], rpm=2, tpm=10, max_concurrent=1, budget_usd=0)
        key = created["key"]
        await limiter.add_tokens(created["id"], 10)  # its tokens spent, like its budget: neither is asked
        refused = await client.post("/v1/messages/count_tokens", json={**body, "model": "mock/simple"},
                                    headers={"x-api-key": key})  # a model the key may not use: not counted
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        answers = [await client.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": key})
                   for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429], answers[-1].text
        assert answers[0].json() == {"input_tokens": 42}  # and one run at once is no bar: it holds no slot
        assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["1", "0", "0"]
        limited = answers[-1]
        assert limited.json()["type"] == "error" and limited.json()["error"]["type"] == "rate_limit_error"
        assert limited.headers["retry-after"] == "30" and limited.headers["x-ratelimit-limit-requests"] == "2"
        assert "x-ratelimit-limit-tokens" not in limited.headers
        # the requests count with the key's runs: its next message is refused too
        anthropic = {**body, "max_tokens": 32}
        assert (await client.post("/v1/messages", json=anthropic, headers={"x-api-key": key})).status_code == 429
    assert counted == ["claude-x", "claude-x"]  # the refused call never reached the upstream


async def test_models_lists_only_what_the_calling_key_may_use() -> None:
    served = {"openai_api_key": "sk-test-upstream", "anthropic_api_key": "sk-ant-test-upstream",
              "aliases": {"fast": "openai/gpt-4o-mini", "deep": "anthropic/claude-x"}}
    async with gateway(**served) as (_, client):
        async def ids(key: str, anthropic: bool = False) -> list[str]:
            headers = {**bearer(key), **({"anthropic-version": "2023-06-01"} if anthropic else {})}
            response = await client.get("/v1/models", headers=headers)
            assert response.status_code == 200, response.text
            return [m["id"] for m in response.json()["data"]]

        everything = await ids(ADMIN)  # the admin key sees every served model
        # with the bare-name patterns clients use (`claude-*`, `gpt-*`: settings.model_patterns)
        assert everything == ["mock/simple", "mock/tool_call", "mock/echo", "mock/lorem-100", "deep", "fast",
                              "anthropic/*", "claude-*", "openai/*", "gpt-*", "o[0-9]*", "codex-*", "chatgpt-*",
                              "openai-responses/*"]
        narrow = (await make_key(client, models=["mock/simple", "openai/gpt-4o-mini"]))["key"]
        # the alias's target is allowed; the exact model also by its bare name
        assert await ids(narrow) == ["mock/simple", "fast", "openai/gpt-4o-mini", "gpt-4o-mini"]
        assert await ids(narrow, anthropic=True) == ["mock/simple", "fast", "openai/gpt-4o-mini", "gpt-4o-mini"]
        wide = (await make_key(client, models=["mock/*", "anthropic/*"]))["key"]
        assert await ids(wide) == ["mock/simple", "mock/tool_call", "mock/echo", "mock/lorem-100", "deep", "anthropic/*",
                                   "claude-*"]
        assert (await client.get("/v1/models/openai/gpt-4o-mini", headers=bearer(narrow))).status_code == 200
        refused = await client.get("/v1/models/openai/gpt-4o-mini", headers=bearer(wide))
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
        assert (await client.get("/v1/models/anthropic/claude-y", headers=bearer(wide))).status_code == 200
