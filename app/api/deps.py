"""FastAPI dependencies as Annotated aliases (async: sync ones would hop to a thread per request).

This module is the one reader of `app.state` (set once by `create_app`, app/main.py): a route
takes what it needs as a typed parameter, never the untyped state. Each alias is a dependency
FastAPI solves per request, so a route that needs several of them takes the bundle of what a
caller's request needs (`CallerDep`, app/api/access.py) rather than one alias each."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import State

from app.accounting import KeyAccountant
from app.api.mcp_rpc import McpEndpoint
from app.api.middleware import RequestLog
from app.auth import Auth
from app.pipeline import Gateway
from app.records import RecordWriter
from app.settings import Settings
from app.streams.mcp_sessions import McpSessions


def _state(request: Request) -> State:
    state: State = request.app.state
    return state


def gateway_in(request: Request) -> Gateway:
    gateway: Gateway = _state(request).gateway
    return gateway


def auth_in(request: Request) -> Auth:
    auth: Auth = _state(request).auth
    return auth


def accountant_in(request: Request) -> KeyAccountant:
    accountant: KeyAccountant = _state(request).accountant
    return accountant


def writer_in(request: Request) -> RecordWriter | None:
    """The run-record writer; None with FOUNDRY_RECORDS=off."""
    writer: RecordWriter | None = _state(request).records
    return writer


def log_of(request: Request) -> RequestLog:
    """The request's log line (a route attaches its run; the middleware writes it)."""
    state = request.scope.setdefault("state", {})
    record = state.get("record")
    if not isinstance(record, RequestLog):  # served without the middleware (a bare router in a test)
        record = state["record"] = RequestLog(request_id="", method=request.method, path=request.url.path)
    return record


async def gateway_of(request: Request) -> Gateway:
    return gateway_in(request)


async def auth_of(request: Request) -> Auth:
    return auth_in(request)


async def writer_of(request: Request) -> RecordWriter | None:
    return writer_in(request)


async def settings_of(request: Request) -> Settings:
    settings: Settings = _state(request).settings
    return settings


async def mcp_endpoint_of(request: Request) -> McpEndpoint:
    endpoint: McpEndpoint = _state(request).mcp
    return endpoint


async def mcp_sessions_of(request: Request) -> McpSessions:
    sessions: McpSessions = _state(request).mcp_sessions
    return sessions


async def request_log(request: Request) -> RequestLog:
    return log_of(request)


GatewayDep = Annotated[Gateway, Depends(gateway_of)]
AuthDep = Annotated[Auth, Depends(auth_of)]
WriterDep = Annotated[RecordWriter | None, Depends(writer_of)]
SettingsDep = Annotated[Settings, Depends(settings_of)]
McpEndpointDep = Annotated[McpEndpoint, Depends(mcp_endpoint_of)]
McpSessionsDep = Annotated[McpSessions, Depends(mcp_sessions_of)]
RecordDep = Annotated[RequestLog, Depends(request_log)]
