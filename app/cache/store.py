"""Where cached answers live: beside the streams, in memory or in Redis.

`MemoryCacheStore` is a bounded LRU (entries and bytes) with a TTL per entry. `RedisCacheStore`
keeps each entry under its own key with its TTL (`<prefix>:cache:{<digest>}`: the digest is the
hash tag, as a stream's id is for its keys on a Cluster) and bounds the number of entries with a
sorted set of their expiries (`<prefix>:cache:index`; the oldest go first when it is full).
Redis that is away is no cache: a lookup finds nothing and a store is skipped, never an error.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from app.observability import get_logger

__all__ = ["CacheStore", "MemoryCacheStore", "RedisCacheStore"]

_log = get_logger("foundry.cache")


class CacheStore(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl: float) -> None: ...

    async def aclose(self) -> None: ...


class MemoryCacheStore:
    """This process's entries, least recently used first out past `max_entries` or `max_bytes`."""

    name = "memory"

    def __init__(self, *, max_entries: int, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.total_bytes = 0

    async def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self.clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry[1]

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        if len(value) > self.max_bytes:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (self.clock() + ttl, value)
        self.total_bytes += len(value)
        while len(self._entries) > self.max_entries or self.total_bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        self.total_bytes -= len(self._entries.pop(key)[1])

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        return list(self._entries)

    async def aclose(self) -> None:
        self._entries.clear()
        self.total_bytes = 0


class RedisCacheStore:
    """Entries every replica shares; errors are logged (the class only) and read as no entry."""

    name = "redis"

    def __init__(self, url: str, *, max_entries: int, max_entry_bytes: int, timeout: float,
                 prefix: str = "foundry") -> None:
        from app.redis_client import connect  # the redis client is imported only when used

        self._redis: Any = connect(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.max_entries, self.max_entry_bytes = max_entries, max_entry_bytes
        self.prefix = prefix
        self.index = f"{prefix}:cache:index"
        self.total_bytes = 0
        """Bytes this replica stored (the shared total is Redis's to bound: maxmemory)."""

    def _key(self, digest: str) -> str:
        return f"{self.prefix}:cache:{{{digest}}}"

    async def get(self, key: str) -> bytes | None:
        try:
            value: bytes | None = await self._redis.get(self._key(key))
            return value
        except Exception as exc:
            _log.warning("cache_unavailable", op="get", error=type(exc).__name__)
            return None

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        if len(value) > self.max_entry_bytes:
            return
        now = time.time()
        try:
            await self._redis.set(self._key(key), value, px=max(1, int(ttl * 1000)))
            await self._redis.zadd(self.index, {key: now + ttl})
            await self._redis.zremrangebyscore(self.index, "-inf", now)
            extra = await self._redis.zcard(self.index) - self.max_entries
            if extra > 0:
                for member, _ in await self._redis.zpopmin(self.index, extra):
                    digest = member.decode() if isinstance(member, bytes) else member
                    await self._redis.delete(self._key(digest))
            self.total_bytes += len(value)
        except Exception as exc:
            _log.warning("cache_unavailable", op="put", error=type(exc).__name__)

    async def aclose(self) -> None:
        await self._redis.aclose()
