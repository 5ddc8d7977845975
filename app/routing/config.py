"""Route configuration: named model groups (`FOUNDRY_ROUTES` JSON or `[routes.NAME]` in the TOML
file) and the operator's retry, deadline and breaker policy. Pure data, checked when settings load;
the names of targets are checked against the served providers when the app starts (`check_routes`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Deadlines", "RouteConfig", "TargetConfig", "check_route_deadlines", "check_route_shapes", "flatten_targets",
           "route_cycle"]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class TargetConfig(BaseModel):
    """One deployment a route may send a request to."""

    model_config = _STRICT

    model: str = Field(min_length=1, description="`provider/model`, an alias, or another route's name.")
    weight: float = Field(default=1.0, gt=0, description="Share of first picks under the weighted strategy.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="provider_options sent to this target (the request's own provider_options win).",
    )


class RouteConfig(BaseModel):
    """`{"strategy": "fallback", "targets": ["openai/gpt-4.1", {"model": "anthropic/...", "weight": 2}]}`"""

    model_config = _STRICT

    strategy: Literal["fallback", "weighted"] = Field(
        default="fallback",
        description="fallback: targets in order; weighted: the first pick spread by weight, the rest as fallbacks.",
    )
    targets: list[TargetConfig] = Field(min_length=1, max_length=32)
    hedge_after_ms: int | None = Field(
        default=None, gt=0, le=600_000,
        description="Start the next target too when the first has produced no content by then.",
    )
    max_retries: int | None = Field(default=None, ge=0, le=10, description="Retries per target; None: the operator's.")
    first_token_timeout: float | None = Field(default=None, gt=0)
    idle_timeout: float | None = Field(default=None, gt=0)
    total_timeout: float | None = Field(default=None, gt=0)

    @field_validator("targets", mode="before")
    @classmethod
    def _plain_names(cls, targets: Any) -> Any:
        if isinstance(targets, list):  # "openai/gpt-4.1" is short for {"model": "openai/gpt-4.1"}
            return [{"model": t} if isinstance(t, str) else t for t in targets]
        return targets


class Deadlines(BaseModel):
    """Per-request deadline overrides (seconds), within the operator's caps."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a number of seconds: a typed mistake is a 422

    first_token: float | None = Field(default=None, gt=0, description="Seconds to the first content event "
                                      "(counts as a failure: the route falls back).")
    idle: float | None = Field(default=None, gt=0, description="Longest silence between upstream chunks.")
    total: float | None = Field(default=None, gt=0, description="Deadline of the whole run.")


def route_cycle(routes: dict[str, RouteConfig]) -> list[str] | None:
    """A chain of route names that leads back to itself, if any."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for target in routes[name].targets:
            nxt = target.model
            if nxt not in routes:
                continue
            if state.get(nxt) == 1:
                return [*path, name, nxt][[*path, name].index(nxt):]
            if state.get(nxt) is None and (found := visit(nxt, [*path, name])):
                return found
        state[name] = 2
        return None

    for route in routes:
        if state.get(route) is None and (found := visit(route, [])):
            return found
    return None


def flatten_targets(routes: dict[str, RouteConfig], name: str) -> list[TargetConfig]:
    """A route's targets with nested routes expanded in place (no cycles: checked before)."""
    out: list[TargetConfig] = []
    for target in routes[name].targets:
        if target.model in routes:
            for inner in flatten_targets(routes, target.model):
                out.append(inner.model_copy(update={
                    "weight": inner.weight * target.weight, "options": {**inner.options, **target.options}}))
        else:
            out.append(target)
    return out


def check_route_shapes(routes: dict[str, RouteConfig]) -> dict[str, RouteConfig]:
    """FOUNDRY_ROUTES as a whole: names without '/', hedging with two targets or more, no cycle."""
    for name, route in routes.items():
        if "/" in name or not name:
            raise ValueError(f"routes.{name}: a route name has no '/' (that is provider/model)")
        if route.hedge_after_ms is not None and len(route.targets) < 2:
            raise ValueError(f"routes.{name}.hedge_after_ms: hedging needs a route with two targets or more")
    cycle = route_cycle(routes)
    if cycle:
        raise ValueError(f"routes.{cycle[0]}.targets: the routes form a cycle: {' -> '.join(cycle)}")
    return routes


def check_route_deadlines(routes: dict[str, RouteConfig], caps: dict[str, float]) -> None:
    """Each route's deadlines within the operator's caps (FOUNDRY_MAX_*_TIMEOUT)."""
    for name, route in routes.items():
        for field, cap in caps.items():
            value = getattr(route, field)
            if value is not None and value > cap:
                raise ValueError(f"routes.{name}.{field}: {value} is above the operator's cap {cap}")
