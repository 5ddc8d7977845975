"""Two gateway processes on one database and one PRIVATE redis-server: the requests-per-minute cap
holds for their sum, a key revoked on one is refused by the other within seconds, concurrency is
shared, and the log files hold no key material."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from app.accounting import estimate
from app.auth.policy import Price
from app.core.events import Usage
from app.core.messages import Message
from app.redis_client import connect
from tests.auth_support import ADMIN, SIMPLE, bearer, free_port, redis_url  # noqa: F401 - fixture
from tests.support import REPO

pytestmark = pytest.mark.slow  # starts processes (make test runs the slow tests after the rest)


def _spawn(port: int, env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    log = open(log_path, "wb")  # closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port",
                             str(port), "--no-access-log"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log


def _read_logs(directory: Path) -> str:
    return "".join(p.read_text() for p in sorted(directory.glob("gateway-*.log")))


@contextlib.asynccontextmanager
async def replicas(n: int, tmp_path: Path, redis: str | None, **more: str) -> AsyncIterator[list[str]]:
    env = {**os.environ, "FOUNDRY_ADMIN_KEY": ADMIN, "FOUNDRY_DATA_DIR": str(tmp_path),
           "FOUNDRY_KEY_CACHE_SECONDS": "0.5", "FOUNDRY_LOG_LEVEL": "info", **more}
    if redis:
        env["FOUNDRY_REDIS_URL"] = redis
    procs, urls = [], []
    try:
        for i in range(n):
            port = free_port()
            procs.append(_spawn(port, env, tmp_path / f"gateway-{i}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        async with httpx.AsyncClient(timeout=5) as client:
            for url, (proc, _) in zip(urls, procs, strict=True):
                for _ in range(900):  # until it listens (a process start is not an awaitable event)
                    if proc.poll() is not None:
                        pytest.fail((tmp_path / "gateway-0.log").read_text())
                    with contextlib.suppress(httpx.TransportError):
                        if (await client.get(url + "/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
                else:
                    pytest.fail("gateway did not start")
        yield urls
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, log in procs:
            proc.wait(timeout=20)
            log.close()


async def _redis_minute(url: str) -> int:
    """The calendar minute of the Redis clock (the limiter's windows follow it)."""
    client = connect(url, socket_timeout=2, socket_connect_timeout=2)  # one Redis or a cluster
    try:
        seconds, _ = await client.time()
        return seconds // 60
    finally:
        await client.aclose()


async def test_limits_and_revocation_hold_across_two_processes(tmp_path: Path, redis_url: str) -> None:  # noqa: F811
    async with replicas(2, tmp_path, redis_url) as (a, b), httpx.AsyncClient(timeout=30) as client:
        assert (await client.get(a + "/readyz")).json()["limits"] == "redis"
        for _ in range(2):  # a burst that straddled a minute of the Redis clock is run again, with a new key
            created = await client.post(a + "/v1/admin/keys", json={"name": "team-r", "rpm": 5, "max_concurrent": 1},
                                        headers=bearer(ADMIN))
            key, key_id = created.json()["key"], created.json()["id"]
            # the other replica knows the key at once (same database)
            assert (await client.get(b + f"/v1/admin/keys/{key_id}", headers=bearer(ADMIN))).status_code == 200
            minute = await _redis_minute(redis_url)
            statuses = []
            for i in range(8):  # alternate: 4 to each replica, one after the other
                response = await client.post((a, b)[i % 2] + "/v1/generate", json=SIMPLE, headers=bearer(key))
                statuses.append(response.status_code)
            if await _redis_minute(redis_url) == minute:
                break
        else:
            pytest.fail("two bursts in a row straddled a minute of the Redis clock")
        assert statuses.count(200) == 5 and statuses.count(429) == 3, statuses  # the sum is capped, not each

        # concurrency is shared too: a run held open on A blocks the key on B
        other = (await client.post(a + "/v1/admin/keys", json={"name": "team-c", "max_concurrent": 1},
                                   headers=bearer(ADMIN))).json()["key"]
        slow = {**SIMPLE, "model": "mock/lorem-40", "provider_options": {"delay_ms": 25}}
        async with client.stream("POST", a + "/v1/stream", json=slow, headers=bearer(other)) as running:
            lines = running.aiter_lines()
            assert (await anext(lines)).startswith("id: 1")
            busy = await client.post(b + "/v1/generate", json=SIMPLE, headers=bearer(other))
            assert busy.status_code == 429 and busy.json()["error"]["limit"] == "concurrency"
            async for _ in lines:
                pass

        # revoked on A: refused by B within a few seconds (FOUNDRY_KEY_CACHE_SECONDS=0.5 here)
        assert (await client.get(b + "/v1/runs", headers=bearer(other))).status_code == 200  # B has it cached
        assert (await client.delete(a + "/v1/admin/keys/" + key_id, headers=bearer(ADMIN))).status_code == 204
        listed = (await client.get(a + "/v1/admin/keys", headers=bearer(ADMIN))).json()["data"]
        [revoked_other] = [k["id"] for k in listed if k["name"] == "team-c"]
        assert (await client.delete(a + "/v1/admin/keys/" + revoked_other, headers=bearer(ADMIN))).status_code == 204
        assert (await client.get(a + "/v1/runs", headers=bearer(other))).status_code == 401  # A: at once
        deadline = time.monotonic() + 10
        while (status := (await client.get(b + "/v1/runs", headers=bearer(other))).status_code) != 401:
            assert status == 200 and time.monotonic() < deadline, "B still accepts a revoked key"
            await asyncio.sleep(0.1)
        metrics = (await client.get(a + "/metrics")).text + (await client.get(b + "/metrics")).text
    logs = _read_logs(tmp_path)
    assert key_id in logs and "team-r" in logs
    for secret in (key, other, ADMIN, key[4:]):
        assert secret not in logs and secret not in metrics


async def test_ownership_holds_on_the_replica_that_does_not_run_the_stream(
        tmp_path: Path, redis_url: str) -> None:  # noqa: F811
    """A stream started on A with key 1 is unknown (404) to key 2 on B, for subscribe, transcript and
    cancel; key 1 and the admin key reach it on B (the owning key travels with the shared stream)."""
    async with replicas(2, tmp_path, redis_url) as (a, b), httpx.AsyncClient(timeout=30) as client:
        one, two = [(await client.post(a + "/v1/admin/keys", json={"name": name}, headers=bearer(ADMIN))).json()["key"]
                    for name in ("team-one", "team-two")]
        slow = {**SIMPLE, "model": "mock/lorem-40", "provider_options": {"delay_ms": 25}, "stream": True}
        started = await client.post(a + "/v1/generate", json=slow, headers=bearer(one))
        assert started.status_code == 202, started.text
        stream_id = started.json()["stream_id"]
        for path in (f"/v1/stream/{stream_id}?after=0", f"/v1/stream/{stream_id}/transcript"):
            assert (await client.get(b + path, headers=bearer(two))).status_code == 404, path
        refused = await client.post(b + f"/v1/stream/{stream_id}/cancel", headers=bearer(two))
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "stream_not_found"
        frames = []
        async with client.stream("GET", b + f"/v1/stream/{stream_id}?after=0", headers=bearer(one)) as mine:
            assert mine.status_code == 200
            async for line in mine.aiter_lines():
                frames.append(line)
                if line == "event: final":
                    break
        assert "event: final" in frames and "event: start" in frames
        assert (await client.get(b + f"/v1/stream/{stream_id}/transcript", headers=bearer(ADMIN))).status_code == 200


PRICE = Price(input=1000.0, output=1000.0)  # USD per million tokens: a tenth of a cent a token
BURST = 16


async def _burst(client: httpx.AsyncClient, urls: list[str], key: str, body: dict) -> list[httpx.Response]:
    """BURST runs of one key at once, half on each replica."""
    return list(await asyncio.gather(*(client.post(urls[i % 2] + "/v1/generate", json=body, headers=bearer(key))
                                       for i in range(BURST))))


async def test_a_burst_overshoots_a_budget_and_tpm_by_one_estimate_at_most(
        tmp_path: Path, redis_url: str) -> None:  # noqa: F811
    """Runs admitted together see each other's reserved estimates (prompt and max_tokens at the
    model's price) on both replicas: a burst passes the budget and the tokens per minute by at
    most one run's estimate, where counting only at the end let every run of the burst through."""
    body = {**SIMPLE, "model": "mock/lorem-40", "max_tokens": 40, "provider_options": {"delay_ms": 20}}
    reserved = estimate([Message(**m) for m in SIMPLE["messages"]], 40, 1024, PRICE.rates())
    prices = json.dumps({"mock/*": PRICE.model_dump()})
    async with replicas(2, tmp_path, redis_url, FOUNDRY_PRICES=prices, FOUNDRY_RECORDS_LINGER="0") as urls, \
            httpx.AsyncClient(timeout=60) as client:
        budget = 0.05
        created = await client.post(urls[0] + "/v1/admin/keys", json={"name": "team-budget", "budget_usd": budget},
                                    headers=bearer(ADMIN))
        answers = await _burst(client, urls, created.json()["key"], body)
        ran = [r.json() for r in answers if r.status_code == 200]
        assert {r.status_code for r in answers} <= {200, 429}
        spent = sum(PRICE.cost(Usage(**{k: v for k, v in r["usage"].items() if k != "total_tokens"})) for r in ran)
        assert all(PRICE.cost(Usage(output_tokens=r["usage"]["output_tokens"])) <= reserved.usd for r in ran)
        assert ran and spent <= budget + reserved.usd, (len(ran), spent)

        for _ in range(2):  # a burst that straddled a minute of the Redis clock is run again, with a new key
            tpm = 100
            created = await client.post(urls[0] + "/v1/admin/keys", json={"name": "team-tpm", "tpm": tpm},
                                        headers=bearer(ADMIN))
            minute = await _redis_minute(redis_url)
            answers = await _burst(client, urls, created.json()["key"], body)
            if await _redis_minute(redis_url) == minute:
                break
        else:
            pytest.fail("two bursts in a row straddled a minute of the Redis clock")
        tokens = sum(r.json()["usage"]["total_tokens"] for r in answers if r.status_code == 200)
        assert tokens <= tpm + reserved.tokens, (tokens, [r.status_code for r in answers])
