"""A circuit breaker per target: after `failures` failures in a row the target is skipped for
`cooldown` seconds, then one request probes it (half open): success closes the circuit, failure
opens it again. Failures are the target's (connection, timeout, 5xx, its credentials or quota),
never the caller's (400, 404 unknown model, 422) and never a 429: that is the provider asking to
slow down (it is retried after its Retry-After or sent to the next target), not a broken model.
Vocabulary as LiteLLM's cooldowns and the classic closed / open / half-open machine.

Breakers exist for the targets the operator configured (routes and aliases; kept for the process's
life) and, in a bounded LRU map (`max_others`), for other targets that actually served or failed
as a target: a caller naming 20,000 models that do not exist makes no breaker at all.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["Breaker", "Breakers", "BreakerState"]

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(slots=True, kw_only=True)
class Breaker:
    failures: int
    cooldown: float
    clock: Callable[[], float] = time.monotonic
    state: BreakerState = "closed"
    failed: int = 0  # failures in a row
    opened_at: float = 0.0
    probing: bool = False  # a half-open probe is in flight

    def allow(self) -> bool:
        """Whether a request may go to the target now (taking the probe slot when half open)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if self.clock() - self.opened_at < self.cooldown:
                return False
            self.state = "half_open"
            self.probing = False
        if self.probing:
            return False
        self.probing = True
        return True

    def retry_in(self) -> float:
        """Seconds until the target may be probed again (0 when it may be tried now)."""
        if self.state != "open":
            return 0.0
        return max(0.0, self.cooldown - (self.clock() - self.opened_at))

    def success(self) -> None:
        self.state, self.failed, self.probing = "closed", 0, False

    def failure(self) -> None:
        self.failed += 1
        if self.state == "half_open" or self.failed >= self.failures:
            self.state, self.opened_at, self.probing = "open", self.clock(), False

    def release(self) -> None:
        """The attempt ended without a verdict on the target (cancelled, caller's fault)."""
        self.probing = False


class Breakers:
    """One breaker per target (`provider/model`), made on first verdict on the target.

    `configured` targets keep theirs; the others live in an LRU map of at most `max_others`
    (the least recently used is forgotten: its next request starts closed)."""

    __slots__ = ("failures", "cooldown", "clock", "configured", "max_others", "_configured", "_others")

    def __init__(self, *, failures: int, cooldown: float, clock: Callable[[], float] = time.monotonic,
                 configured: Iterable[str] = (), max_others: int = 256) -> None:
        self.failures = failures
        self.cooldown = cooldown
        self.clock = clock
        self.configured = frozenset(configured)
        self.max_others = max_others
        self._configured: dict[str, Breaker] = {}
        self._others: OrderedDict[str, Breaker] = OrderedDict()

    def get(self, target: str) -> Breaker | None:
        """The target's breaker if it has one (no breaker: closed, nothing known against it)."""
        breaker = self._configured.get(target)
        if breaker is None:
            breaker = self._others.get(target)
            if breaker is not None:
                self._others.move_to_end(target)
        return breaker

    def __getitem__(self, target: str) -> Breaker:
        """The target's breaker, made when missing (an unconfigured one may evict the LRU other)."""
        breaker = self.get(target)
        if breaker is not None:
            return breaker
        breaker = Breaker(failures=self.failures, cooldown=self.cooldown, clock=self.clock)
        if target in self.configured:
            self._configured[target] = breaker
        else:
            self._others[target] = breaker
            while len(self._others) > self.max_others:
                self._others.popitem(last=False)
        return breaker

    def __len__(self) -> int:
        return len(self._configured) + len(self._others)

    def states(self) -> dict[str, BreakerState]:
        out: dict[str, BreakerState] = {}
        for target, breaker in sorted([*self._configured.items(), *self._others.items()]):
            if breaker.state == "open" and breaker.retry_in() == 0:
                out[target] = "half_open"  # due for its probe
            else:
                out[target] = breaker.state
        return out
