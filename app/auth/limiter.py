"""Per-key counters: requests and tokens per minute, runs at once, spend per month.

Two implementations behind one interface: `MemoryLimiter` (one process) and `RedisLimiter`
(every replica shares the counts, exactly: each admission is one Lua script, registered once,
so the check and the increment are atomic). Windows are fixed calendar minutes of the Redis
clock (`TIME`), so replicas with skewed clocks still agree. Concurrency is a sorted set of leases
(slot id -> expiry): a replica that dies without releasing frees its slots when the lease runs out.
"""

from __future__ import annotations

import math
import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast

__all__ = ["Admission", "Denied", "Limiter", "Limits", "MemoryLimiter", "RedisLimiter", "build_limiter"]

WINDOW = 60.0
DenialReason = Literal["requests", "tokens", "concurrency"]


@dataclass(slots=True, kw_only=True, frozen=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None

    @property
    def any(self) -> bool:
        return bool(self.rpm or self.tpm or self.max_concurrent)


@dataclass(slots=True, kw_only=True, frozen=True)
class Usage:
    """What the window held when the admission was decided, for the x-ratelimit-* headers."""

    requests: int
    tokens: int
    reset: float
    """Seconds until the window ends."""


def rate_headers(limits: Limits, usage: Usage) -> dict[str, str]:
    """The headers OpenAI clients read (x-ratelimit-*), for the limits the key has."""
    reset = f"{max(1, math.ceil(usage.reset))}s"
    headers: dict[str, str] = {}
    if limits.rpm:
        headers.update({"x-ratelimit-limit-requests": str(limits.rpm),
                        "x-ratelimit-remaining-requests": str(max(0, limits.rpm - usage.requests)),
                        "x-ratelimit-reset-requests": reset})
    if limits.tpm:
        headers.update({"x-ratelimit-limit-tokens": str(limits.tpm),
                        "x-ratelimit-remaining-tokens": str(max(0, limits.tpm - usage.tokens)),
                        "x-ratelimit-reset-tokens": reset})
    return headers


@dataclass(slots=True, kw_only=True)
class Admission:
    slot: str | None
    """The concurrency lease to release when the run ends (None: the key has no such limit)."""
    headers: dict[str, str] = field(default_factory=dict)


class Denied(Exception):
    def __init__(self, reason: DenialReason, retry_after: int,
                 headers: dict[str, str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.headers = headers


class Limiter(Protocol):
    backend: str

    async def admit(self, key_id: str, limits: Limits) -> Admission:
        """Count one request and take a concurrency slot, or raise Denied."""

    async def release(self, key_id: str, slot: str) -> None: ...

    async def add_tokens(self, key_id: str, tokens: int) -> None: ...

    async def spend(self, key_id: str, month: str) -> float | None:
        """The month's spend so far; None when this counter was never set (seed it from the records)."""

    async def put_spend(self, key_id: str, month: str, usd: float, version: int) -> None:
        """Set the month's spend to a total from the records, unless the counter holds a total of
        the same or a later version (the number of runs it counts)."""

    async def add_spend(self, key_id: str, month: str, usd: float) -> None:
        """Add to the month's spend if it was set (without records: nothing durable to count from);
        a counter the store lost stays unset, and the next budget check sets it again."""

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...


def _denied(reason: DenialReason, limits: Limits, usage: Usage) -> Denied:
    retry = 1 if reason == "concurrency" else max(1, math.ceil(usage.reset))
    return Denied(reason, retry, rate_headers(limits, usage))


class MemoryLimiter:
    """Counters in this process (the embedded default): exact for one replica only."""

    backend = "memory"

    def __init__(self, *, lease_seconds: float = 600.0, clock: Callable[[], float] = time.time) -> None:
        self.lease_seconds = lease_seconds
        self.clock = clock
        self._requests: dict[tuple[str, int], int] = defaultdict(int)
        self._tokens: dict[tuple[str, int], int] = defaultdict(int)
        self._slots: dict[str, dict[str, float]] = defaultdict(dict)
        self._spend: dict[tuple[str, str], tuple[float, int]] = {}

    def _window(self) -> tuple[float, int]:
        now = self.clock()
        return now, int(now // WINDOW)

    async def admit(self, key_id: str, limits: Limits) -> Admission:
        now, window = self._window()
        self._forget_old(window)
        usage = Usage(requests=self._requests[key_id, window], tokens=self._tokens[key_id, window],
                      reset=(window + 1) * WINDOW - now)
        if limits.rpm and usage.requests >= limits.rpm:
            raise _denied("requests", limits, usage)
        if limits.tpm and usage.tokens >= limits.tpm:
            raise _denied("tokens", limits, usage)
        slot = None
        if limits.max_concurrent:
            slots = self._slots[key_id]
            for held, expiry in list(slots.items()):
                if expiry <= now:
                    del slots[held]
            if len(slots) >= limits.max_concurrent:
                raise _denied("concurrency", limits, usage)
            slot = secrets.token_hex(8)
            slots[slot] = now + self.lease_seconds
        self._requests[key_id, window] += 1
        usage = Usage(requests=usage.requests + 1, tokens=usage.tokens, reset=usage.reset)
        return Admission(slot=slot, headers=rate_headers(limits, usage))

    def _forget_old(self, window: int) -> None:
        for table in (self._requests, self._tokens):
            if len(table) > 1024:
                for k in [k for k in table if k[1] < window]:
                    del table[k]

    async def release(self, key_id: str, slot: str) -> None:
        self._slots[key_id].pop(slot, None)

    async def add_tokens(self, key_id: str, tokens: int) -> None:
        _, window = self._window()
        self._tokens[key_id, window] += tokens

    async def spend(self, key_id: str, month: str) -> float | None:
        held = self._spend.get((key_id, month))
        return held[0] if held is not None else None

    async def put_spend(self, key_id: str, month: str, usd: float, version: int) -> None:
        held = self._spend.get((key_id, month))
        if held is None or held[1] < version:
            self._spend[key_id, month] = (usd, version)

    async def add_spend(self, key_id: str, month: str, usd: float) -> None:
        held = self._spend.get((key_id, month))
        if held is not None:  # as on Redis: only to a counter that was set
            self._spend[key_id, month] = (held[0] + usd, held[1])

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


# KEYS[1]: the key's prefix `fgw:{<key id>}` (one hash slot). ARGV: rpm, tpm, max_concurrent (0 = none),
# slot id, lease seconds. Returns {admitted, reason, requests, tokens, reset}.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = math.floor(now / 60)
local reset = (window + 1) * 60 - now
local rkey = KEYS[1] .. ':r:' .. window
local tkey = KEYS[1] .. ':t:' .. window
local ckey = KEYS[1] .. ':c'
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local used_r = tonumber(redis.call('GET', rkey) or '0')
local used_t = tonumber(redis.call('GET', tkey) or '0')
if rpm > 0 and used_r >= rpm then return {0, 'requests', used_r, used_t, tostring(reset)} end
if tpm > 0 and used_t >= tpm then return {0, 'tokens', used_r, used_t, tostring(reset)} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', ckey, '-inf', now)
  if redis.call('ZCARD', ckey) >= maxc then return {0, 'concurrency', used_r, used_t, tostring(reset)} end
  redis.call('ZADD', ckey, now + tonumber(ARGV[5]), ARGV[4])
  redis.call('EXPIRE', ckey, math.ceil(tonumber(ARGV[5])))
end
used_r = redis.call('INCR', rkey)
redis.call('EXPIRE', rkey, 120)
return {1, '', used_r, used_t, tostring(reset)}
"""

_ADD_TOKENS = """
local t = redis.call('TIME')
local tkey = KEYS[1] .. ':t:' .. math.floor(tonumber(t[1]) / 60)
redis.call('INCRBY', tkey, ARGV[1])
redis.call('EXPIRE', tkey, 120)
"""

_SPEND_TTL = 40 * 86400

# KEYS[1]: the key's month counter, a hash {usd, v}. ARGV: usd, version (runs counted), ttl.
_PUT_SPEND = """
local held = redis.call('HGET', KEYS[1], 'v')
if held and tonumber(held) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'usd', ARGV[1], 'v', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
"""A total from the records replaces the counter only when it counts more runs: totals committed by
several replicas may arrive out of order, and a budget check may rebuild the counter from the
records while runs are being recorded; the newest total wins either way, so the counter equals
the records (the key_spend table, app/records/spend.py) and no run is lost or counted twice."""

_ADD_SPEND = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBYFLOAT', KEYS[1], 'usd', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
"""Without records: added only to a counter that was set (to 0 at the first budget check); an
increment on a missing key would start it from this run's cost and forget the month before it."""


class RedisLimiter:
    """Counters in Redis (FOUNDRY_REDIS_URL): shared and exact across replicas."""

    backend = "redis"

    def __init__(self, url: str, *, lease_seconds: float = 600.0) -> None:
        from app.redis_client import connect  # one Redis or a cluster, by the URL (redis+cluster://)

        self.client = connect(url, socket_timeout=2.0, socket_connect_timeout=2.0, fail_fast=False)
        self.lease_seconds = lease_seconds
        self._admit = self.client.register_script(_ADMIT)
        self._add_tokens = self.client.register_script(_ADD_TOKENS)
        self._put_spend = self.client.register_script(_PUT_SPEND)
        self._add_spend = self.client.register_script(_ADD_SPEND)

    @staticmethod
    def _prefix(key_id: str) -> str:
        return f"fgw:{{{key_id}}}"

    async def admit(self, key_id: str, limits: Limits) -> Admission:
        slot = secrets.token_hex(8) if limits.max_concurrent else None
        admitted, reason, requests, tokens, reset = await self._admit(
            keys=[self._prefix(key_id)],
            args=[limits.rpm or 0, limits.tpm or 0, limits.max_concurrent or 0, slot or "", self.lease_seconds])
        usage = Usage(requests=int(requests), tokens=int(tokens), reset=float(reset))
        if not admitted:
            name = reason.decode() if isinstance(reason, bytes) else str(reason)
            raise _denied(cast(DenialReason, name), limits, usage)
        return Admission(slot=slot, headers=rate_headers(limits, usage))

    async def release(self, key_id: str, slot: str) -> None:
        await self.client.zrem(self._prefix(key_id) + ":c", slot)

    async def add_tokens(self, key_id: str, tokens: int) -> None:
        await self._add_tokens(keys=[self._prefix(key_id)], args=[int(tokens)])

    def _spend_key(self, key_id: str, month: str) -> str:
        return f"{self._prefix(key_id)}:spendv:{month}"

    async def spend(self, key_id: str, month: str) -> float | None:
        value = await self.client.hget(self._spend_key(key_id, month), "usd")
        return float(value) if value is not None else None

    async def put_spend(self, key_id: str, month: str, usd: float, version: int) -> None:
        await self._put_spend(keys=[self._spend_key(key_id, month)], args=[repr(float(usd)), int(version), _SPEND_TTL])

    async def add_spend(self, key_id: str, month: str, usd: float) -> None:
        await self._add_spend(keys=[self._spend_key(key_id, month)], args=[repr(float(usd)), _SPEND_TTL])

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception:  # any failure means "not reachable" to readiness
            return False

    async def aclose(self) -> None:
        await self.client.aclose()


def build_limiter(redis_url: str | None, *, lease_seconds: float = 600.0) -> Limiter:
    if redis_url:
        return RedisLimiter(redis_url, lease_seconds=lease_seconds)
    return MemoryLimiter(lease_seconds=lease_seconds)
