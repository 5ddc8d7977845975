"""Per-key counters: requests and tokens per minute, runs at once, spend per month.

Two implementations behind one interface: `MemoryLimiter` (one process) and `RedisLimiter`
(app/auth/redis_limiter.py: every replica shares the counts, exactly: each admission is one Lua
script, registered once, so the check and the increment are atomic).

Tokens and spend are reserved at admission and settled when the run ends: a run takes its
estimate (prompt and `max_tokens` at the model's price) out of the minute's tokens and the month's
budget as it is admitted, and gives back the difference to its real usage at the end. A burst of
runs admitted together then sees each other's estimates, so a limit is passed by at most one run's
estimate (the last one admitted below it), however many run at once on however many replicas;
counting only at the end let every run of a burst pass. Windows are fixed calendar minutes of the Redis
clock (`TIME`), so replicas with skewed clocks still agree. Concurrency is a sorted set of leases
(slot id -> expiry): a replica that dies without releasing frees its slots when the lease runs out.
"""

from __future__ import annotations

import math
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["Admission", "Denied", "HoldResult", "Limiter", "Limits", "MemoryLimiter", "build_limiter"]

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
    window: int = 0
    """The minute whose tokens hold the run's reserved estimate."""


HoldResult = tuple[bool, float] | None
"""A budget hold's answer: (taken, what the month counts: recorded spend plus every hold), or None
when the month's counter is not set (seed it from the records, then ask again)."""
GONE_SECONDS = 600.0
"""How long a run whose record was counted stays remembered (a settle that comes after it holds nothing)."""

class Denied(Exception):
    def __init__(self, reason: DenialReason, retry_after: int,
                 headers: dict[str, str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.headers = headers


class Limiter(Protocol):
    backend: str

    async def admit(self, key_id: str, limits: Limits, reserve_tokens: int = 0) -> Admission:
        """Count one request, take a concurrency slot and reserve `reserve_tokens` of the minute's
        tokens, or raise Denied."""

    async def release(self, key_id: str, slot: str) -> None: ...

    async def add_tokens(self, key_id: str, tokens: int) -> None: ...

    async def settle_tokens(self, key_id: str, window: int, reserved: int, used: int) -> None:
        """The run reserved `reserved` tokens in `window` and used `used`: that minute takes the
        difference while it lasts; past it, only what the run used beyond its estimate counts now."""

    async def hold(self, key_id: str, month: str, hold_id: str, usd: float, budget: float) -> HoldResult:
        """Hold `usd` of the month's budget when recorded spend plus every live hold is below `budget`."""

    async def settle_hold(self, key_id: str, month: str, hold_id: str, usd: float, run_id: str | None) -> None:
        """The run ended costing `usd`. Without records (`run_id` None) the hold goes and its cost joins
        the month's counter (when set). With records the hold becomes the run's real cost under its
        run id, until its record is counted (`release_holds(..., recorded=True)`)."""

    async def release_holds(self, key_id: str, hold_ids: Sequence[str], *, recorded: bool) -> None:
        """Drop holds: a run that never started, or runs whose records now count them (`recorded`:
        remembered for GONE_SECONDS so that a settle arriving later holds nothing)."""

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


def denied(reason: DenialReason, limits: Limits, usage: Usage) -> Denied:
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
        self._holds: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
        """key -> hold id -> (usd, expiry)."""
        self._gone: dict[str, dict[str, float]] = defaultdict(dict)
        """key -> run id -> expiry: runs whose records were counted."""

    def _window(self) -> tuple[float, int]:
        now = self.clock()
        return now, int(now // WINDOW)

    async def admit(self, key_id: str, limits: Limits, reserve_tokens: int = 0) -> Admission:
        now, window = self._window()
        self._forget_old(window)
        usage = Usage(requests=self._requests[key_id, window], tokens=self._tokens[key_id, window],
                      reset=(window + 1) * WINDOW - now)
        if limits.rpm and usage.requests >= limits.rpm:
            raise denied("requests", limits, usage)
        if limits.tpm and usage.tokens >= limits.tpm:
            raise denied("tokens", limits, usage)
        slot = None
        if limits.max_concurrent:
            slots = self._slots[key_id]
            for held, expiry in list(slots.items()):
                if expiry <= now:
                    del slots[held]
            if len(slots) >= limits.max_concurrent:
                raise denied("concurrency", limits, usage)
            slot = secrets.token_hex(8)
            slots[slot] = now + self.lease_seconds
        self._requests[key_id, window] += 1
        self._tokens[key_id, window] += reserve_tokens
        usage = Usage(requests=usage.requests + 1, tokens=usage.tokens, reset=usage.reset)
        return Admission(slot=slot, headers=rate_headers(limits, usage), window=window)

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

    async def settle_tokens(self, key_id: str, window: int, reserved: int, used: int) -> None:
        _, now = self._window()
        if now == window:
            self._tokens[key_id, window] += used - reserved
        elif used > reserved:
            self._tokens[key_id, now] += used - reserved

    async def hold(self, key_id: str, month: str, hold_id: str, usd: float, budget: float) -> HoldResult:
        spent = self._spend.get((key_id, month))
        if spent is None:
            return None
        holds = self._live(self._holds[key_id])
        counted = spent[0] + sum(usd for usd, _ in holds.values())
        if counted >= budget:
            return False, counted
        holds[hold_id] = (usd, self.clock() + self.lease_seconds)
        return True, counted

    def _live(self, table: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        for name, value in list(table.items()):
            if (value[1] if isinstance(value, tuple) else value) <= now:
                del table[name]
        return table

    async def settle_hold(self, key_id: str, month: str, hold_id: str, usd: float, run_id: str | None) -> None:
        holds = self._live(self._holds[key_id])
        holds.pop(hold_id, None)
        if run_id is None:
            await self.add_spend(key_id, month, usd)
        elif run_id not in self._live(self._gone[key_id]):
            holds[run_id] = (usd, self.clock() + self.lease_seconds)

    async def release_holds(self, key_id: str, hold_ids: Sequence[str], *, recorded: bool) -> None:
        holds, gone = self._holds[key_id], self._live(self._gone[key_id])
        for hold_id in hold_ids:
            holds.pop(hold_id, None)
            if recorded:
                gone[hold_id] = self.clock() + GONE_SECONDS

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


def build_limiter(redis_url: str | None, *, lease_seconds: float = 600.0) -> Limiter:
    if redis_url:
        from app.auth.redis_limiter import RedisLimiter  # the redis client is imported only when used

        return RedisLimiter(redis_url, lease_seconds=lease_seconds)
    return MemoryLimiter(lease_seconds=lease_seconds)
