"""Helpers for the access-control tests: a keyed gateway under uvicorn, an admin client, a
PRIVATE redis-server on a free port (skipped locally when redis-server is missing, failed in CI)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from app.auth import MemoryLimiter
from app.main import create_app
from app.settings import Settings
from tests.support import free_port, serve

ADMIN = "admin-secret-for-tests-0123456789"
SIMPLE = {"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextlib.asynccontextmanager
async def gateway(**settings: Any) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """A gateway with the admin key (unless given otherwise) served under uvicorn, and a client."""
    settings.setdefault("admin_key", ADMIN)
    settings.setdefault("data_dir", tempfile.mkdtemp(prefix="foundry-auth-"))  # a database of its own
    app = create_app(Settings(**settings))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield app, client


MID_MINUTE = 1_800_000_030.0
"""Half-way through a calendar minute (1_800_000_000 s is a whole number of minutes)."""


def pin_the_minute(app: Any) -> MemoryLimiter:
    """Give the gateway a memory limiter whose clock stays at `MID_MINUTE` (its `clock` seam).

    The limiter's windows are fixed calendar minutes: a test that counts requests or tokens per
    minute against the wall clock sees the counters reset when it straddles a minute boundary (a
    200 where it expects a 429, a remaining count off by its requests so far). With the clock held
    every admission falls in one window and the reset is always 30 s."""
    limiter = MemoryLimiter(clock=lambda: MID_MINUTE, lease_seconds=app.state.settings.concurrency_lease_seconds)
    app.state.auth.limiter = limiter
    return limiter


async def make_key(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    fields.setdefault("name", "team-a")
    response = await client.post("/v1/admin/keys", json=fields, headers=bearer(ADMIN))
    assert response.status_code == 201, response.text
    return response.json()




@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private redis-server for this test session (never the shared 6379)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not on PATH (CI needs it)")
        pytest.skip("redis-server is not on PATH")
    workdir = tempfile.mkdtemp(prefix="foundry-redis-")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(200):  # until it answers (its start is not an event we can await)
            try:
                client.ping()
                break
            except redis.ConnectionError:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.05)
                if proc.returncode is not None:
                    pytest.fail("redis-server exited at start")
        else:
            pytest.fail("redis-server did not answer")
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
