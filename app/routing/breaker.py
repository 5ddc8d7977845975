"""A circuit breaker per target: after `failures` failures in a row the target is skipped for
`cooldown` seconds, then one request probes it (half open): success closes the circuit, failure
opens it again. Failures are the target's (connection, timeout, 429, 5xx), never the caller's 4xx.
Vocabulary as LiteLLM's cooldowns and the classic closed / open / half-open machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass(slots=True, kw_only=True)
class Breakers:
    """One breaker per target (`provider/model`), made on first use."""

    failures: int
    cooldown: float
    clock: Callable[[], float] = time.monotonic
    by_target: dict[str, Breaker] = field(default_factory=dict)

    def __getitem__(self, target: str) -> Breaker:
        breaker = self.by_target.get(target)
        if breaker is None:
            breaker = self.by_target[target] = Breaker(failures=self.failures, cooldown=self.cooldown, clock=self.clock)
        return breaker

    def states(self) -> dict[str, BreakerState]:
        out: dict[str, BreakerState] = {}
        for target, breaker in sorted(self.by_target.items()):
            if breaker.state == "open" and breaker.retry_in() == 0:
                out[target] = "half_open"  # due for its probe
            else:
                out[target] = breaker.state
        return out
