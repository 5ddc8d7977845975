"""FastAPI dependencies as Annotated aliases (async: sync ones would hop to a thread per request)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from app.pipeline import Gateway


async def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


async def _record(request: Request) -> dict[str, Any]:
    """The request's log record (filled by the pipeline, written by the middleware)."""
    return request.scope.setdefault("state", {}).setdefault("record", {})


GatewayDep = Annotated[Gateway, Depends(_gateway)]
RecordDep = Annotated[dict[str, Any], Depends(_record)]
