"""Overload is not an outage: a process whose event loop is too busy refuses new runs at admission
(503 with Retry-After, counted), before they start, and a Redis reply that arrived in time but was
read late because our own loop was busy is not judged a Redis failure. Real busy loops, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.lifecycle import LoopLag
from app.main import create_app
from app.settings import Settings
from app.streams.redis.link import RedisLink
from tests.support import HANG_GUARD, serve

ASK = {"model": "mock/simple", "messages": [{"role": "user", "content": "Hi"}]}


def _spin(seconds: float) -> None:
    """Hold the event loop with CPU work (a busy loop, not a sleep)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@contextlib.asynccontextmanager
async def busy_loop(block: float) -> AsyncIterator[None]:
    """Another task that keeps taking the loop for `block` seconds at a time."""
    stop = asyncio.Event()

    async def hog() -> None:
        while not stop.is_set():
            _spin(block)
            await asyncio.sleep(0)

    task = asyncio.create_task(hog())
    try:
        yield
    finally:
        stop.set()
        await task


def _refused(text: str) -> dict[str, float]:
    return {s.labels["reason"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "foundry_admission_refused_total"}


async def test_a_lagging_loop_refuses_new_runs_at_admission_then_admits_again():
    app = create_app(Settings(max_loop_lag_seconds=0.1))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as client:
        assert (await client.post("/v1/generate", json=ASK)).status_code == 200
        async with busy_loop(0.25):
            refused = await client.post("/v1/stream", json=ASK)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "overloaded" and "event loop" in refused.json()["error"]["message"]
        async with asyncio.timeout(HANG_GUARD):  # a guard against a hang, not a timed assertion
            # the loop is idle again: its lag decays with on-time wake-ups, and runs are admitted
            while (answer := await client.post("/v1/generate", json=ASK)).status_code == 503:
                pass
        assert answer.status_code == 200
        assert _refused((await client.get("/metrics")).text).get("loop_lag", 0) >= 1


async def test_an_answer_read_late_on_a_busy_loop_is_not_a_store_failure():
    """The store's timed operations (`RedisLink.timed`, the bound a request waits on): an answer
    ready in 10 ms, read only after our own busy loop let go of it (0.4 s at a time, twice the
    0.2 s bound), is late because of us: no failure, no `store_errors`."""
    failures: list[str] = []
    link = RedisLink("redis://127.0.0.1:1/0", ttl=10, lease_seconds=2, timeout=0.1, prefix="perf-lag",
                     observer=lambda store, op, seconds, failed: failures.append(op) if failed else None)
    lag = LoopLag()
    lag.start()
    try:
        async with busy_loop(0.4):
            for _ in range(3):
                async with link.timed("read"):
                    await asyncio.sleep(0.01)  # the answer, on time
        assert failures == []
    finally:
        await lag.stop()
        await link.client.aclose()


async def test_a_redis_reply_read_late_on_a_busy_loop_is_not_a_redis_failure(redis_url):
    """A ping takes a few turns of a loop that another task holds 0.4 s at a time: over its 0.5 s
    bound, late because of us."""
    failures: list[str] = []
    link = RedisLink(redis_url, ttl=10, lease_seconds=2, timeout=0.25, prefix="perf-lag",
                     observer=lambda store, op, seconds, failed: failures.append(op) if failed else None)
    lag = LoopLag()
    lag.start()
    try:
        assert await link.ping()  # connected while the loop is idle, as a serving process's pool is
        async with busy_loop(0.4):
            assert all([await link.ping() for _ in range(3)])
        assert failures == []
    finally:
        await lag.stop()
        await link.aclose()


async def test_a_redis_that_never_answers_still_fails_within_the_bound():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(HANG_GUARD)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    failures: list[str] = []
    link = RedisLink(f"redis://127.0.0.1:{port}/0", ttl=10, lease_seconds=2, timeout=0.1, prefix="perf-lag",
                     observer=lambda store, op, seconds, failed: failures.append(op) if failed else None)
    lag = LoopLag()
    lag.start()
    try:
        assert not await link.ping()
        assert failures == ["ping"]
    finally:
        await lag.stop()
        await link.aclose()
        server.close()
