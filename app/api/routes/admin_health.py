"""GET /v1/admin/health (the admin key only): what the console's health page shows in one answer:
readiness as /readyz has it, every provider served or not and why, the circuit breakers, and the
runs this replica is running now (ids and models, never content)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.access import AdminDep
from app.api.deps import AuthDep, GatewayDep, WriterDep
from app.api.responses import JSON
from app.api.routes.health import readiness
from app.api.schemas import ErrorBody
from app.routing.breaker import BreakerState
from app.startup import provider_statuses

router = APIRouter(tags=["admin"])


class ProviderState(BaseModel):
    name: str
    served: bool
    why: str = Field(description="Why it is served (a key set, embedded, a base URL) or why not.")


class ActiveRun(BaseModel):
    stream_id: str
    model: str
    provider: str
    key_id: str | None = Field(description="The key that runs it (null: open mode or the admin key).")
    created_at: datetime


class AdminHealth(BaseModel):
    ready: bool
    readiness: dict[str, Any] = Field(description="The body of GET /readyz.")
    providers: list[ProviderState]
    circuits: dict[str, BreakerState] = Field(
        description="Each upstream target's circuit breaker.")
    active_runs: list[ActiveRun] = Field(description="Runs in progress on this replica, oldest first.")
    max_active_runs: int


@router.get("/v1/admin/health", response_model=AdminHealth, responses={c: {"model": ErrorBody} for c in (401, 403)},
            summary="Readiness, providers served or not and why, breakers, this replica's active runs")
async def admin_health(_admin: AdminDep, gateway: GatewayDep, auth: AuthDep, writer: WriterDep) -> Response:
    ready, body = await readiness(gateway, auth, writer)
    served = gateway.registry.names
    statuses = provider_statuses(gateway.settings, injected=frozenset(served) - {"mock"})
    providers = [ProviderState(name=s.name, served=s.served, why=s.why) for s in statuses]
    providers += [ProviderState(name=name, served=True, why="injected adapter")
                  for name in sorted(set(served) - {s.name for s in statuses})]
    runs = []
    for handle in list(gateway.runs.handles):
        if not handle.opening.done() or handle.opening.cancelled() or handle.opening.exception() is not None:
            continue
        info = handle.log.info
        runs.append(ActiveRun(stream_id=info.stream_id, model=info.model, provider=info.provider, key_id=info.owner,
                              created_at=datetime.fromtimestamp(info.created_at, UTC)))
    runs.sort(key=lambda r: r.created_at)
    out = AdminHealth(ready=ready, readiness=body, providers=providers, circuits=body["circuits"],
                      active_runs=runs, max_active_runs=gateway.admission.max_active)
    return JSON(out.model_dump(mode="json"))
