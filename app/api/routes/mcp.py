"""`POST/GET/DELETE /mcp`: the gateway as a Streamable HTTP MCP server (app/api/mcp_rpc.py).

POST takes one JSON-RPC message and answers JSON (`application/json`; the transport allows it
instead of an SSE stream). `initialize` opens a session (`Mcp-Session-Id` in the answer's
headers, kept in the session store: any replica serves it); every other request names it, and
a session is its key's only (another key, an unknown or expired id: 404, the client initializes
again). Notifications and responses are accepted (202). GET answers 405: the gateway sends no
server-initiated messages. DELETE ends the session. The caller's key is required as on every
/v1 route (`Authorization: Bearer` or `x-api-key`); the body is held to FOUNDRY_MAX_BODY_BYTES.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import mcp_types as types
import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.access import PrincipalDep
from app.api.mcp_rpc import McpCaller, McpEndpoint, RpcError
from app.api.responses import JSON
from app.auth import Auth, Principal
from app.core.errors import RequestError
from app.streams.mcp_sessions import McpSessions

router = APIRouter(tags=["mcp"])

_SESSION = "mcp-session-id"
_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "One JSON-RPC 2.0 message of the MCP protocol (initialize, tools/list, "
                                     "tools/call, resources/*, prompts/*, ping, notifications)."}}}}}


def _rpc_error(rid: Any, code: int, message: str, status: int = 200) -> Response:
    return JSON({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}, status_code=status)


def _owner(principal: Principal) -> str:
    return principal.owner or principal.kind


def _caller(request: Request, principal: Principal) -> McpCaller:
    key = principal.key
    filters = ((key.mcp_tools,) if key is not None and key.mcp_tools is not None else ())

    async def admit() -> dict[str, str]:
        """One request of the key's requests per minute (models, tokens and budget are not asked)."""
        if key is None:
            return {}
        auth: Auth = request.app.state.auth
        only_rpm = replace(principal, key=replace(key, models=None, tpm=None, max_concurrent=None, budget_usd=None))
        ticket = await auth.admit(only_rpm, "mcp")
        return ticket.headers if ticket is not None else {}

    return McpCaller(owner=_owner(principal), filters=filters, admit=admit)


@router.post("/mcp", summary="MCP (Streamable HTTP): the configured MCP servers' tools, filtered by the key",
             openapi_extra=_BODY, response_class=JSON)
async def mcp_post(request: Request, principal: PrincipalDep) -> Response:
    body = await request.body()
    limit = request.app.state.settings.max_body_bytes  # no media here: the door's allowance for it does not apply
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
    endpoint: McpEndpoint = request.app.state.mcp
    sessions: McpSessions = request.app.state.mcp_sessions
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
        result, headers = await endpoint.dispatch(method, params, _caller(request, principal))
    except RpcError as exc:
        return _rpc_error(rid, exc.code, exc.message)
    return JSON({"jsonrpc": "2.0", "id": rid, "result": result}, headers={**headers, _SESSION: session_id})


@router.get("/mcp", summary="MCP: no server-initiated stream (405)", status_code=405)
async def mcp_get(principal: PrincipalDep) -> Response:
    return Response(status_code=405, headers={"allow": "POST, DELETE"})


@router.delete("/mcp", summary="MCP: end the session named by Mcp-Session-Id", status_code=204)
async def mcp_delete(request: Request, principal: PrincipalDep) -> Response:
    sessions: McpSessions = request.app.state.mcp_sessions
    session_id = request.headers.get(_SESSION, "")
    found = await sessions.get(session_id) if session_id else None
    if found is None or found.owner != _owner(principal):
        return _rpc_error(None, types.INVALID_REQUEST, "Session not found", 404)
    await sessions.delete(session_id)
    return Response(status_code=204)
