"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from app.api.deps import GatewayDep
from app.api.responses import JSON
from app.auth.service import AccessDenied

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: configuration loaded, store reachable, providers listed")
async def readyz(gateway: GatewayDep, request: Request) -> Response:
    store_ok = await gateway.store.ping()
    providers = gateway.registry.readiness()
    ready = store_ok and any(providers.values())
    auth = request.app.state.auth
    limiter_ok = await auth.limiter.ping()
    ready = ready and limiter_ok
    body = {"status": "ready" if ready else "not_ready", "store": store_ok, "store_backend": gateway.store.name,
            "providers": providers, "records": await _records_state(request), "auth": auth.mode,
            "limits": auth.limiter.backend if limiter_ok else "unreachable"}
    if not store_ok:
        body["reason"] = f"the {gateway.store.name} stream store is unreachable"
    return JSON(body, status_code=200 if ready else 503)


async def _records_state(request: Request) -> str:
    """The records database: `ok`, `unreachable` or `off`. Reported, not required: runs never wait on it
    (records are queued, then dropped and counted), so a database outage must not take replicas out."""
    writer = request.app.state.records
    if writer is None:
        return "off"
    return "ok" if await writer.store.ping() else "unreachable"


@router.get("/metrics", summary="Prometheus metrics (text format)", response_class=Response)
async def metrics(gateway: GatewayDep, request: Request) -> Response:
    token = gateway.settings.metrics_token
    if token is not None:
        presented = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(presented.encode(), token.get_secret_value().encode()):
            raise AccessDenied("/metrics needs Authorization: Bearer <FOUNDRY_METRICS_TOKEN>",
                               code="invalid_metrics_token", status=401, headers={"WWW-Authenticate": "Bearer"})
    return Response(gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)
