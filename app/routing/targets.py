"""The routing vocabulary: the operator's policy, a route's targets, the attempts a run made and
what its `final` tells of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.errors import AttemptData
from app.providers.base import ProviderAdapter

__all__ = ["Attempt", "Outcome", "Policy", "RouteOutcome", "Target"]

Outcome = Literal["ok", "error", "timeout", "rate_limited", "skipped", "cancelled"]


@dataclass(slots=True, kw_only=True)
class Policy:
    """The operator's retry, deadline and breaker settings (from Settings)."""

    max_retries: int = 1
    backoff: float = 0.2
    backoff_max: float = 2.0
    retry_after_max: float = 5.0
    first_token: float = 60.0
    idle: float = 120.0
    total: float = 600.0
    max_first_token: float = 300.0
    max_idle: float = 600.0
    max_total: float = 3600.0
    breaker_failures: int = 5
    breaker_cooldown: float = 30.0
    max_unconfigured_targets: int = 256
    """Breakers (LRU) and metric label values kept for targets no route or alias names."""


@dataclass(slots=True, kw_only=True, frozen=True)
class Target:
    name: str
    """`provider/model` as the client sees it in `start`, `final` and `attempts`."""
    provider: str
    upstream_model: str
    adapter: ProviderAdapter
    weight: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Attempt:
    """One try of one target: what `final.attempts` lists."""

    target: str
    step: int
    outcome: Outcome = "cancelled"
    status: int | None = None
    code: str | None = None
    duration_ms: float = 0.0

    def to_dict(self) -> AttemptData:
        out: AttemptData = {"target": self.target, "outcome": self.outcome, "duration_ms": self.duration_ms}
        if self.status is not None:
            out["status"] = self.status
        if self.code is not None:
            out["code"] = self.code
        if self.step > 1:
            out["step"] = self.step
        return out


@dataclass(slots=True, frozen=True, kw_only=True)
class RouteOutcome:
    """A route's part of a run's `final`."""

    attempts: tuple[AttemptData, ...]
    route: str | None
    target: str | None
