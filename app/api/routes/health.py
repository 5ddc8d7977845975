"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from app.api.deps import AuthDep, GatewayDep, WriterDep
from app.api.responses import JSON
from app.auth import Auth
from app.auth.service import AccessDenied
from app.pipeline import Gateway
from app.records import RecordWriter

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: configuration loaded, store reachable, providers listed, not draining "
                               "or saturated; circuit breaker states")
async def readyz(gateway: GatewayDep, auth: AuthDep, writer: WriterDep) -> Response:
    ready, body = await readiness(gateway, auth, writer)
    return JSON(body, status_code=200 if ready else 503)


async def readiness(gateway: Gateway, auth: Auth, writer: RecordWriter | None) -> tuple[bool, dict[str, Any]]:
    """Ready or not, and the body /readyz answers (also shown by the console's health page)."""
    admission = gateway.admission
    draining, saturated = admission.draining, admission.saturated  # as the request found them
    store_ok = await gateway.store.ping()
    providers = gateway.registry.readiness()
    limiter_ok = await auth.limiter.ping()
    records = await _records_state(writer)
    # Keys required and kept in the records database: no key can be checked while it is down.
    keys_ok = not (auth.mode == "keys" and auth.keystore is not None and records == "unreachable")
    ready = store_ok and limiter_ok and keys_ok and any(providers.values()) and not draining and not saturated
    status = "draining" if draining else "saturated" if saturated else "ready" if ready else "not_ready"
    body: dict[str, Any] = {"status": status, "store": store_ok, "store_backend": gateway.store.name, "providers": providers,
            "records": records, "auth": auth.mode, "keys": "ok" if keys_ok else "unreachable",
            "limits": auth.limiter.backend if limiter_ok else "unreachable",
            "active_runs": len(admission.active), "max_active_runs": admission.max_active,
            "circuits": gateway.router.readiness()}
    if not store_ok:
        body["reason"] = f"the {gateway.store.name} stream store is unreachable"
    elif not keys_ok:
        body["reason"] = "the key database (the records database) is unreachable"
    return ready, body


async def _records_state(writer: RecordWriter | None) -> str:
    """The records database: `ok`, `unreachable` or `off`. Reported, not required for runs (records are
    queued, then dropped and counted), but required when it holds the keys every request is checked
    against (`keys`)."""
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
