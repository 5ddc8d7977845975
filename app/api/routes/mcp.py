"""`POST/GET/DELETE /mcp`: the gateway as a Streamable HTTP MCP server (app/api/mcp_rpc.py).

POST takes one JSON-RPC message and answers JSON (`application/json`; the transport allows it
instead of an SSE stream). `initialize` opens a session (`Mcp-Session-Id` in the answer's
headers, kept in the session store: any replica serves it); every other request names it, and
a session is its key's only (another key, an unknown or expired id: 404, the client initializes
again). Notifications and responses are accepted (202). GET answers 405: the gateway sends no
server-initiated messages. DELETE ends the session. The caller's key is required as on every
/v1 route (`Authorization: Bearer` or `x-api-key`); the body is held to FOUNDRY_MAX_BODY_BYTES.

`GET /v1/mcp/calls`: the recorded tool calls through /mcp (app/records/mcp_calls.py), newest first,
filtered and cursor-paginated like /v1/runs; the admin key reads every key's, a key its own.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import datetime
from typing import Annotated, Any, Literal

import mcp_types as types
import orjson
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.access import PrincipalDep
from app.api.deps import AuthDep, McpEndpointDep, McpSessionsDep, SettingsDep
from app.api.mcp_rpc import McpCaller, RpcError
from app.api.responses import JSON
from app.api.routes.runs import MAX_LIMIT, RecordsUnavailable, database_errors
from app.api.schemas import ErrorBody
from app.auth import Auth, Principal
from app.auth.service import AccessDenied
from app.core.errors import RequestError
from app.records import decode_cursor
from app.records.mcp_calls import McpCallLog, McpCallQuery
from app.records.record import as_utc

router = APIRouter(tags=["mcp"])

_SESSION = "mcp-session-id"
_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "One JSON-RPC 2.0 message of the MCP protocol (initialize, tools/list, "
                                     "tools/call, resources/*, prompts/*, ping, notifications)."}}}}}


def _rpc_error(rid: Any, code: int, message: str, status: int = 200) -> Response:
    return JSON({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}, status_code=status)


def _owner(principal: Principal) -> str:
    return principal.owner or principal.kind


def _caller(auth: Auth, principal: Principal) -> McpCaller:
    key = principal.key
    filters = ((key.mcp_tools,) if key is not None and key.mcp_tools is not None else ())

    async def admit() -> dict[str, str]:
        """One request of the key's requests per minute (models, tokens and budget are not asked)."""
        if key is None:
            return {}
        only_rpm = replace(principal, key=replace(key, models=None, tpm=None, max_concurrent=None, budget_usd=None))
        ticket = await auth.admit(only_rpm, "mcp")
        return ticket.headers if ticket is not None else {}

    return McpCaller(owner=_owner(principal), filters=filters, admit=admit)


@router.post("/mcp", summary="MCP (Streamable HTTP): the configured MCP servers' tools, filtered by the key",
             openapi_extra=_BODY, response_class=JSON)
async def mcp_post(request: Request, principal: PrincipalDep, settings: SettingsDep, auth: AuthDep,
                   endpoint: McpEndpointDep, sessions: McpSessionsDep) -> Response:
    body = await request.body()
    limit = settings.max_body_bytes  # no media here: the door's allowance for it does not apply
    if len(body) > limit:
        raise RequestError(f"the body has {len(body)} bytes, more than FOUNDRY_MAX_BODY_BYTES ({limit})",
                           status=413, code="payload_too_large", field="body")
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _rpc_error(None, types.PARSE_ERROR, "Parse error: the body is not JSON", 400)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _rpc_error(None, types.INVALID_REQUEST, "Invalid Request: one JSON-RPC 2.0 object (no batches)", 400)
    rid, method, params = message.get("id"), message.get("method"), message.get("params") or {}
    if method is None or "id" not in message:  # a notification, or a response to a request we never send
        return Response(status_code=202)
    if not isinstance(method, str) or not isinstance(params, dict) or not isinstance(rid, (str, int)):
        return _rpc_error(rid if isinstance(rid, (str, int)) else None, types.INVALID_REQUEST,
                          "Invalid Request: method must be a string, params an object, id a string or number", 400)
    if method == "initialize":
        result, version = endpoint.initialize(params)
        client = params.get("clientInfo", {}).get("name", "") if isinstance(params.get("clientInfo"), dict) else ""
        session = await sessions.create(_owner(principal), version, str(client))
        return JSON({"jsonrpc": "2.0", "id": rid, "result": result}, headers={_SESSION: session.id})
    session_id = request.headers.get(_SESSION)
    if not session_id:
        return _rpc_error(rid, types.INVALID_REQUEST, "Bad Request: Mcp-Session-Id header required "
                                                      "(send initialize first)", 400)
    found = await sessions.get(session_id)
    if found is None or found.owner != _owner(principal):
        return _rpc_error(rid, types.INVALID_REQUEST, "Session not found: initialize again", 404)
    try:
        result, headers = await endpoint.dispatch(method, params, _caller(auth, principal))
    except RpcError as exc:
        return _rpc_error(rid, exc.code, exc.message)
    return JSON({"jsonrpc": "2.0", "id": rid, "result": result}, headers={**headers, _SESSION: session_id})


@router.get("/mcp", summary="MCP: no server-initiated stream (405)", status_code=405)
async def mcp_get(principal: PrincipalDep) -> Response:
    return Response(status_code=405, headers={"allow": "POST, DELETE"})


@router.delete("/mcp", summary="MCP: end the session named by Mcp-Session-Id", status_code=204)
async def mcp_delete(request: Request, principal: PrincipalDep, sessions: McpSessionsDep) -> Response:
    session_id = request.headers.get(_SESSION, "")
    found = await sessions.get(session_id) if session_id else None
    if found is None or found.owner != _owner(principal):
        return _rpc_error(None, types.INVALID_REQUEST, "Session not found", 404)
    await sessions.delete(session_id)
    return Response(status_code=204)


class McpCallOut(BaseModel):
    """One tool call through /mcp, as recorded."""

    id: str
    key_id: str = Field(description="The API key id that called (`admin` for the admin key, `open` without keys).")
    server: str = Field(description="The MCP server that owns the tool.")
    tool: str = Field(description="The tool as its server names it (the gateway's name: `<server>__<tool>`).")
    args_sha256: str = Field(description="SHA-256 of the arguments as JSON with sorted keys (never the arguments).")
    status: Literal["ok", "error", "timeout", "unavailable"]
    duration_ms: float
    bytes: int = Field(description="The result's size as JSON.")
    created_at: datetime


class McpCallList(BaseModel):
    data: list[McpCallOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null on the last.")


@router.get("/v1/mcp/calls", response_model=McpCallList, responses={c: {"model": ErrorBody} for c in
                                                                       (400, 401, 403, 404, 422, 503)},
            summary="Tool calls through /mcp, newest first, with filters and cursor pagination")
async def list_mcp_calls(
    principal: PrincipalDep,
    endpoint: McpEndpointDep,
    key_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.-]{1,32}$",
                                        description="The key that called (another key's: the admin key only).")] = None,
    server: Annotated[str | None, Query(max_length=64, description="The MCP server.")] = None,
    since: Annotated[datetime | None, Query(description="Made at or after (ISO 8601; UTC if no zone).")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Calls per page.")] = 50,
    cursor: Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page.")] = None,
) -> Response:
    journal: McpCallLog | None = endpoint.journal
    if journal is None:
        raise RequestError("records are off on this gateway (FOUNDRY_RECORDS=off): no MCP calls are kept",
                           code="records_disabled", status=404)
    if not principal.sees_everything and key_id is not None and key_id != principal.owner:
        raise AccessDenied("only the admin key reads another key's MCP calls", code="admin_only", status=403,
                           field="key_id")
    try:
        after = decode_cursor(cursor) if cursor is not None else None
    except ValueError as exc:
        raise RequestError(f"cursor: {exc}", code="invalid_cursor", field="cursor") from None
    await journal.writer.ensure_schema()
    if not journal.writer.migrated:
        raise RecordsUnavailable("the records database is unavailable (not migrated: unreachable?)")
    query = McpCallQuery(key_id=key_id if principal.sees_everything else principal.owner or principal.kind,
                         server=server, since=as_utc(since) if since is not None else None, limit=limit, after=after)
    with database_errors():
        page = await journal.list(query)
    body = McpCallList(data=[McpCallOut(**asdict(c)) for c in page.calls], next_cursor=page.next_cursor)
    return JSON(body.model_dump(mode="json"))
