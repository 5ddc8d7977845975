"""The response cache on Redis (docs/caching.md): two gateways on one Redis share answers; each
entry carries its rule's TTL and the index bounds how many are kept; Redis away is no cache,
never an error. The memory store's TTL and bounds, on its own clock."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from app.cache.config import CacheRule
from app.cache.store import MemoryCacheStore, RedisCacheStore
from app.main import create_app
from app.redis_client import connect
from app.settings import Settings
from tests.fakes import FakeAdapter, ok_script
from tests.redis_support import free_port
from tests.support import parse_sse, serve


def _replica(redis_url: str, adapter: FakeAdapter) -> Any:
    return create_app(Settings(redis_url=redis_url, cache=[CacheRule(models="fake/*", ttl_seconds=60)]),
                      adapters={"fake": adapter})


async def test_two_replicas_on_one_redis_share_the_cache(redis_url: str) -> None:
    ask = {"model": "fake/m", "messages": [{"role": "user", "content": f"Say hi {uuid.uuid4().hex}"}]}
    up_a, up_b = FakeAdapter(ok_script("Hello", " from A.")), FakeAdapter(ok_script("Hello", " from B."))
    async with serve(_replica(redis_url, up_a)) as a, serve(_replica(redis_url, up_b)) as b, \
            httpx.AsyncClient(timeout=30) as client:
        first = await client.post(f"{a}/v1/stream", json=ask)
        second = await client.post(f"{b}/v1/stream", json=ask)
    assert (first.headers["x-foundry-cache"], second.headers["x-foundry-cache"]) == ("miss", "hit")
    assert (len(up_a.requests), len(up_b.requests)) == (1, 0)
    assert parse_sse(second.text)[-1][2]["message"]["content"] == "Hello from A."


async def test_entries_carry_their_ttl_and_the_index_bounds_them(redis_url: str) -> None:
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    store = RedisCacheStore(redis_url, max_entries=2, max_entry_bytes=1000, timeout=2, prefix=prefix)
    raw = connect(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        for name in ("a", "b", "c"):
            await store.put(name, name.encode() * 10, ttl=30)
        await store.put("big", b"x" * 1001, ttl=30)  # past the entry bound: not kept
        assert await store.get("a") is None  # the oldest went when the third came
        assert await store.get("c") == b"c" * 10
        assert await store.get("big") is None
        assert 0 < await raw.pttl(f"{prefix}:cache:{{c}}") <= 30_000
        assert await raw.zcard(f"{prefix}:cache:index") == 2
    finally:
        await raw.delete(f"{prefix}:cache:index", *(f"{prefix}:cache:{{{n}}}" for n in "abc"))
        await raw.aclose()
        await store.aclose()


async def test_redis_away_is_no_cache() -> None:
    store = RedisCacheStore(f"redis://127.0.0.1:{free_port()}/0", max_entries=10, max_entry_bytes=1000, timeout=0.5)
    await store.put("k", b"value", ttl=30)  # no error
    assert await store.get("k") is None
    await store.aclose()


async def test_memory_entries_expire_with_their_ttl_and_keep_to_their_bounds() -> None:
    now = [100.0]
    store = MemoryCacheStore(max_entries=2, max_bytes=25, clock=lambda: now[0])
    await store.put("a", b"a" * 10, ttl=5)
    now[0] += 4.9
    assert await store.get("a") == b"a" * 10
    now[0] += 0.2
    assert await store.get("a") is None  # expired
    for name in "bcd":
        await store.put(name, name.encode() * 10, ttl=60)
    assert store.keys() == ["c", "d"] and store.total_bytes == 20  # entries bound: b, the oldest, went
    await store.put("e", b"e" * 10, ttl=60)
    assert store.keys() == ["d", "e"]  # bytes bound (25): c went
    await store.put("f", b"f" * 26, ttl=60)
    assert await store.get("f") is None  # larger than the whole store: never kept
