"""`foundry-gateway serve --workers N`: N uvicorn worker processes on one port, sharing streams
through the Redis store; the in-memory store (one process's) refuses N > 1 with one line naming
the Redis setting. Real processes on loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import httpx
import pytest
import redis

from app.cli import main
from tests.redis_support import _wait, free_port
from tests.support import HANG_GUARD, REPO

ASK = {"model": "mock/lorem-40", "messages": [{"role": "user", "content": "Hi"}],
       "provider_options": {"delay_ms": 20}}


def test_more_than_one_worker_on_the_memory_store_is_one_line_naming_the_redis_setting(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FOUNDRY_REDIS_URL", raising=False)
    assert main(["serve", "--workers", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "FOUNDRY_REDIS_URL" in lines[0] and "--workers 2" in lines[0], lines


@pytest.mark.slow  # starts processes
def test_two_workers_on_the_redis_store_both_serve(redis_url: str, tmp_path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "FOUNDRY_REDIS_URL": redis_url, "FOUNDRY_LOG_LEVEL": "warning",
           "FOUNDRY_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--workers", "2", "--port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait(lambda: _healthy(url), "two workers", proc)  # one of them answers: the other may still start
        client = redis.Redis.from_url(redis_url)
        owners: set[bytes] = set()
        deadline = time.monotonic() + HANG_GUARD
        while len(owners) < 2 and time.monotonic() < deadline:  # batches until both have served one
            stream_ids = asyncio.run(_streams(url, 12))
            owners |= {client.hget(f"foundry:{{{sid}}}:meta", "owner") for sid in stream_ids}
        client.close()
        assert len(owners) == 2, owners  # each worker is a replica of its own in Redis: both served
    finally:
        proc.terminate()
        proc.wait(HANG_GUARD)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


async def _streams(url: str, n: int) -> list[str]:
    """n streams at once, each on a connection of its own (the kernel hands them to either worker)."""
    async def one() -> str:
        async with httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as client:
            r = await client.post("/v1/stream", json=ASK)
            assert r.status_code == 200 and r.text.rstrip().splitlines()[-1].startswith("data:"), r.text
            return r.headers["x-stream-id"]

    return list(await asyncio.gather(*(one() for _ in range(n))))
