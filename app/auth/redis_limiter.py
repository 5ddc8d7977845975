"""The limiter's counters in Redis (FOUNDRY_REDIS_URL): shared and exact across replicas.

Each check-and-count is one Lua script, registered once, on keys of one hash slot (`fgw:{<key id>}`):
the minute's requests and tokens, the concurrency leases, the month's spend and the budget holds of
runs in progress (a sorted set of hold ids by expiry and a hash of their amounts).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import cast

from app.auth.limiter import GONE_SECONDS, Admission, DenialReason, HoldResult, Limits, Usage, denied, rate_headers

__all__ = ["RedisLimiter"]

# KEYS[1]: the key's prefix `fgw:{<key id>}` (one hash slot). ARGV: rpm, tpm, max_concurrent (0 = none),
# slot id, lease seconds, tokens to reserve. Returns {admitted, reason, requests, tokens, reset, window}.
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
if rpm > 0 and used_r >= rpm then return {0, 'requests', used_r, used_t, tostring(reset), window} end
if tpm > 0 and used_t >= tpm then return {0, 'tokens', used_r, used_t, tostring(reset), window} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', ckey, '-inf', now)
  if redis.call('ZCARD', ckey) >= maxc then return {0, 'concurrency', used_r, used_t, tostring(reset), window} end
  redis.call('ZADD', ckey, now + tonumber(ARGV[5]), ARGV[4])
  redis.call('EXPIRE', ckey, math.ceil(tonumber(ARGV[5])))
end
used_r = redis.call('INCR', rkey)
redis.call('EXPIRE', rkey, 120)
if tonumber(ARGV[6]) > 0 then
  redis.call('INCRBY', tkey, ARGV[6])
  redis.call('EXPIRE', tkey, 120)
end
return {1, '', used_r, used_t, tostring(reset), window}
"""

# KEYS[1]: the prefix. ARGV: the admission's minute, tokens reserved, tokens used.
_SETTLE_TOKENS = """
local t = redis.call('TIME')
local now = math.floor(tonumber(t[1]) / 60)
local delta = tonumber(ARGV[3]) - tonumber(ARGV[2])
local window = tonumber(ARGV[1])
if now ~= window then
  if delta <= 0 then return 0 end
  window = now
end
local tkey = KEYS[1] .. ':t:' .. window
redis.call('INCRBY', tkey, delta)
redis.call('EXPIRE', tkey, 120)
return 1
"""

# Budget holds. KEYS[1]: the prefix; ':holds' is a sorted set (hold id -> expiry), ':holdv' a hash
# (hold id -> USD), ':gone:<run id>' marks a run whose record was counted.
_PURGE = """
local function purge(prefix, now)
  local expired = redis.call('ZRANGEBYSCORE', prefix .. ':holds', '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', prefix .. ':holds', '-inf', now)
    redis.call('HDEL', prefix .. ':holdv', unpack(expired))
  end
end
local function put(prefix, id, usd, now, lease)
  redis.call('ZADD', prefix .. ':holds', now + lease, id)
  redis.call('HSET', prefix .. ':holdv', id, usd)
  redis.call('EXPIRE', prefix .. ':holds', math.ceil(lease))
  redis.call('EXPIRE', prefix .. ':holdv', math.ceil(lease))
end
local function drop(prefix, id)
  redis.call('ZREM', prefix .. ':holds', id)
  redis.call('HDEL', prefix .. ':holdv', id)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS[1]: the prefix, KEYS[2]: the month's spend counter. ARGV: hold id, USD, budget, lease.
# Returns {taken (1, 0; -1: the counter is not set), counted} (counted as a string: a float).
_HOLD = _PURGE + """
local spent = redis.call('HGET', KEYS[2], 'usd')
if not spent then return {-1, '0'} end
purge(KEYS[1], now)
local counted = tonumber(spent)
for _, usd in ipairs(redis.call('HVALS', KEYS[1] .. ':holdv')) do counted = counted + tonumber(usd) end
if counted >= tonumber(ARGV[3]) then return {0, tostring(counted)} end
put(KEYS[1], ARGV[1], ARGV[2], now, tonumber(ARGV[4]))
return {1, tostring(counted)}
"""

# KEYS[1]: the prefix, KEYS[2]: the month's spend counter. ARGV: hold id, USD spent, run id ('' without
# records: the cost joins the counter when it is set), lease, counter ttl.
_SETTLE_HOLD = _PURGE + """
drop(KEYS[1], ARGV[1])
if ARGV[3] == '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('HINCRBYFLOAT', KEYS[2], 'usd', ARGV[2])
    redis.call('EXPIRE', KEYS[2], ARGV[5])
  end
elseif redis.call('EXISTS', KEYS[1] .. ':gone:' .. ARGV[3]) == 0 then
  put(KEYS[1], ARGV[3], ARGV[2], now, tonumber(ARGV[4]))
end
return 1
"""

# KEYS[1]: the prefix. ARGV: recorded (1, 0), then the hold ids.
_RELEASE = _PURGE + """
for i = 2, #ARGV do
  drop(KEYS[1], ARGV[i])
  if ARGV[1] == '1' then redis.call('SET', KEYS[1] .. ':gone:' .. ARGV[i], 1, 'EX', """ + str(int(GONE_SECONDS)) + """) end
end
return 1
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
        self._settle_tokens = self.client.register_script(_SETTLE_TOKENS)
        self._hold = self.client.register_script(_HOLD)
        self._settle_hold = self.client.register_script(_SETTLE_HOLD)
        self._release = self.client.register_script(_RELEASE)

    @staticmethod
    def _prefix(key_id: str) -> str:
        return f"fgw:{{{key_id}}}"

    async def admit(self, key_id: str, limits: Limits, reserve_tokens: int = 0) -> Admission:
        slot = secrets.token_hex(8) if limits.max_concurrent else None
        admitted, reason, requests, tokens, reset, window = await self._admit(
            keys=[self._prefix(key_id)],
            args=[limits.rpm or 0, limits.tpm or 0, limits.max_concurrent or 0, slot or "", self.lease_seconds,
                  int(reserve_tokens)])
        usage = Usage(requests=int(requests), tokens=int(tokens), reset=float(reset))
        if not admitted:
            name = reason.decode() if isinstance(reason, bytes) else str(reason)
            raise denied(cast(DenialReason, name), limits, usage)
        return Admission(slot=slot, headers=rate_headers(limits, usage), window=int(window))

    async def settle_tokens(self, key_id: str, window: int, reserved: int, used: int) -> None:
        await self._settle_tokens(keys=[self._prefix(key_id)], args=[int(window), int(reserved), int(used)])

    async def hold(self, key_id: str, month: str, hold_id: str, usd: float, budget: float) -> HoldResult:
        taken, counted = await self._hold(keys=[self._prefix(key_id), self._spend_key(key_id, month)],
                                          args=[hold_id, repr(float(usd)), repr(float(budget)), self.lease_seconds])
        return None if int(taken) < 0 else (int(taken) == 1, float(counted))

    async def settle_hold(self, key_id: str, month: str, hold_id: str, usd: float, run_id: str | None) -> None:
        await self._settle_hold(keys=[self._prefix(key_id), self._spend_key(key_id, month)],
                                args=[hold_id, repr(float(usd)), run_id or "", self.lease_seconds, _SPEND_TTL])

    async def release_holds(self, key_id: str, hold_ids: Sequence[str], *, recorded: bool) -> None:
        if hold_ids:
            await self._release(keys=[self._prefix(key_id)], args=["1" if recorded else "0", *hold_ids])

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


