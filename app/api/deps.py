"""FastAPI dependencies as Annotated aliases (async: sync ones would hop to a thread per request)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.middleware import RequestLog
from app.pipeline import Gateway


async def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


async def request_log(request: Request) -> RequestLog:
    """The request's log line (a route attaches its run; the middleware writes it)."""
    state = request.scope.setdefault("state", {})
    record = state.get("record")
    if not isinstance(record, RequestLog):  # served without the middleware (a bare router in a test)
        record = state["record"] = RequestLog(request_id="", method=request.method, path=request.url.path)
    return record


GatewayDep = Annotated[Gateway, Depends(gateway_of)]
RecordDep = Annotated[RequestLog, Depends(request_log)]
