"""FastAPI dependencies as Annotated aliases (async: sync ones would hop to a thread per request)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.middleware import RequestLog
from app.pipeline import Gateway


async def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


async def _record(request: Request) -> RequestLog:
    """The request's log line (a route attaches its run; the middleware writes it)."""
    state = request.scope.setdefault("state", {})
    record = state.get("record")
    if not isinstance(record, RequestLog):  # served without the middleware (a bare router in a test)
        record = state["record"] = RequestLog(request_id="", method=request.method, path=request.url.path)
    return record


GatewayDep = Annotated[Gateway, Depends(_gateway)]
RecordDep = Annotated[RequestLog, Depends(_record)]
