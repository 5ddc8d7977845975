"""The gateway as an MCP server: the JSON-RPC methods of /mcp over the configured MCP servers.

What a caller sees is what its key may use (`mcp_tools` patterns, app/auth/policy.py): tools
outside them are absent from `tools/list` and unknown to `tools/call`; a server's resources and
prompts are visible when the key may use the whole server (`server__*` or `*`). Tools keep their
gateway names (`<server>__<tool>`), prompts are named the same way, resources keep their URIs.

Every `tools/call` is forwarded to the owning server within its bounds (timeout, concurrency,
result size) and recorded: a row of `mcp_calls` in the records database (key, server, tool, SHA-256 of the
arguments, status, duration, bytes, time; written off the request path by
app/records/mcp_calls.py, read with GET /v1/mcp/calls), a `mcp_call` log line with the same,
`foundry_mcp_calls_total{server, outcome}`, and an `execute_tool`
span with the GenAI attributes when tracing is on. The result goes back as the server gave it,
scrubbed of the gateway's secrets; a failure is a result with `isError: true`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
import orjson
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from prometheus_client import Counter

from app import VERSION
from app.core import secrets
from app.core.messages import ToolCall, freeze
from app.observability import Metrics, get_logger
from app.records.mcp_calls import McpCall, McpCallLog, new_call_id
from app.tools.base import ToolError
from app.tools.mcp_client import McpServer, McpUnavailable
from app.tools.mcp_config import MCP_SEPARATOR, mcp_tool_name
from app.tools.mcp_hub import McpHub, PatternSets, allowed
from app.tracing import Tracing

__all__ = ["McpCaller", "McpEndpoint", "RpcError"]

_LISTED = 1000  # most resources or prompts one list answer gathers per server


class RpcError(Exception):
    """A JSON-RPC error answer (HTTP 200, the error in the body)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True, frozen=True)
class McpCaller:
    owner: str
    """The key id (or `admin`, `open`): the session's owner and the record's key."""
    filters: PatternSets
    admit: Callable[[], Awaitable[dict[str, str]]]
    """Takes one request of the key's rpm (429 past it); the x-ratelimit-* headers."""


def _dump(model: Any) -> dict[str, Any]:
    return secrets.scrub_value(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def _error_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": secrets.scrub(text)}], "isError": True}


class McpEndpoint:
    def __init__(self, hub: McpHub | None, metrics: Metrics, tracing: Tracing | None,
                 journal: McpCallLog | None = None) -> None:
        self.hub = hub
        self.journal = journal
        """Where each call is recorded (None: FOUNDRY_RECORDS=off, the log line alone)."""
        self.calls = Counter("foundry_mcp_calls", "Tool calls through /mcp by MCP server and outcome (ok, error, "
                             "timeout, unavailable).", ["server", "outcome"], registry=metrics.registry)
        self.tracing = tracing
        self.log = get_logger("foundry.mcp")

    def initialize(self, params: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The initialize result and the protocol version agreed."""
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        capabilities = types.ServerCapabilities(tools=types.ToolsCapability(list_changed=False),
                                                resources=types.ResourcesCapability(),
                                                prompts=types.PromptsCapability())
        result = types.InitializeResult(protocol_version=version, capabilities=capabilities,
                                        server_info=types.Implementation(name="foundry-gateway", version=VERSION),
                                        instructions="Tools of the MCP servers behind Foundry Gateway, "
                                                     "named <server>__<tool>.")
        return _dump(result), version

    async def dispatch(self, method: str, params: dict[str, Any], caller: McpCaller) -> tuple[dict[str, Any], dict[str, str]]:
        """The method's result and the headers to add; RpcError for a JSON-RPC error."""
        if method == "ping":
            return {}, {}
        if method == "tools/list":
            return {"tools": self._tools(caller.filters)}, {}
        if method == "tools/call":
            headers = await caller.admit()
            return await self.call(params, caller), headers
        if method in ("resources/list", "resources/templates/list", "prompts/list"):
            return await self._gather(method, caller.filters), {}
        if method in ("resources/read", "prompts/get"):
            headers = await caller.admit()
            return await self._fetch(method, params, caller.filters), headers
        raise RpcError(types.METHOD_NOT_FOUND, f"Method not found: {method[:100]}")

    def _tools(self, filters: PatternSets) -> list[dict[str, Any]]:
        if self.hub is None:
            return []
        out = []
        for name, tool in sorted(self.hub.offered(None, filters).items()):
            listed = tool.server.tools.get(tool.tool)
            if listed is not None:
                out.append({**_dump(listed), "name": name})
        return out

    async def call(self, params: dict[str, Any], caller: McpCaller) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise RpcError(types.INVALID_PARAMS, "tools/call needs params.name (a string) and params.arguments (an object)")
        tool = self.hub.offered(None, caller.filters).get(name) if self.hub is not None else None
        if tool is None:
            raise RpcError(types.INVALID_PARAMS, f"Unknown tool: {name[:200]}")
        at, started = datetime.now(UTC), time.perf_counter()
        span = self.tracing.tool(ToolCall(id=f"mcp-{started}", name=name, arguments=freeze(arguments))) \
            if self.tracing is not None else nullcontext(None)
        with span as current:
            result, outcome = await self._forward(tool.server, tool.tool, arguments)
            if self.tracing is not None and current is not None:
                self.tracing.end_tool(current, outcome=outcome, content=str(result.get("content", ""))[:10_000])
        self.calls.labels(tool.server.name, outcome).inc()
        record = McpCall(id=new_call_id(), key_id=caller.owner, server=tool.server.name, tool=tool.tool,
                         args_sha256=hashlib.sha256(orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)).hexdigest(),
                         status=outcome, duration_ms=round((time.perf_counter() - started) * 1000, 1),
                         bytes=len(orjson.dumps(result)), created_at=at)
        if self.journal is not None:
            self.journal.submit(record)
        self.log.info("mcp_call", call_id=record.id, key_id=record.key_id, server=record.server, tool=record.tool,
                      args_sha256=record.args_sha256, status=outcome, duration_ms=record.duration_ms,
                      bytes=record.bytes)
        return result

    async def _forward(self, server: McpServer, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
        try:
            async with asyncio.timeout(server.config.timeout):
                answer = await server.call(tool, arguments)
        except TimeoutError:
            return _error_result(f"MCP tool {mcp_tool_name(server.name, tool)} timed out after "
                                 f"{server.config.timeout:g}s"), "timeout"
        except McpUnavailable as exc:
            return _error_result(str(exc)), "unavailable"
        except ToolError as exc:
            return _error_result(str(exc)), "error"
        return _dump(answer), "error" if answer.is_error else "ok"

    def _servers(self, filters: PatternSets, capability: str) -> list[McpServer]:
        """The servers the caller may use whole that are up and offer `capability`."""
        if self.hub is None:
            return []
        return [s for s in self.hub.servers.values()
                if s.state == "up" and s.capabilities is not None and getattr(s.capabilities, capability) is not None
                and allowed(mcp_tool_name(s.name, "*"), filters)]

    async def _gather(self, method: str, filters: PatternSets) -> dict[str, Any]:
        kind = "prompts" if method.startswith("prompts") else "resources"
        field = {"resources/list": "resources", "resources/templates/list": "resourceTemplates"}.get(method, "prompts")
        items: list[dict[str, Any]] = []
        for server in self._servers(filters, kind):
            try:
                page = await server.request(method, functools.partial(_list_call, method=method))
            except ToolError as exc:
                self.log.warning("mcp_list_failed", server=server.name, method=method, error=str(exc)[:200])
                continue
            for item in _dump(page).get(field, [])[:_LISTED]:
                items.append({**item, "name": mcp_tool_name(server.name, item["name"])} if kind == "prompts" else item)
        return {field: items}

    async def _fetch(self, method: str, params: dict[str, Any], filters: PatternSets) -> dict[str, Any]:
        try:
            if method == "prompts/get":
                name = params.get("name")
                if not isinstance(name, str):
                    raise RpcError(types.INVALID_PARAMS, "prompts/get needs params.name")
                server_name, _, prompt = name.partition(MCP_SEPARATOR)
                server = next((s for s in self._servers(filters, "prompts") if s.name == server_name), None)
                if server is None or not prompt:
                    raise RpcError(types.INVALID_PARAMS, f"Unknown prompt: {name[:200]}")
                arguments = params.get("arguments") or {}
                return _dump(await server.request(method, lambda c: c.get_prompt(prompt, arguments)))
            uri = params.get("uri")
            if not isinstance(uri, str):
                raise RpcError(types.INVALID_PARAMS, "resources/read needs params.uri")
            for server in self._servers(filters, "resources"):
                listed = await server.request("resources/list", lambda c: c.list_resources())
                if any(str(r.uri) == uri for r in listed.resources):
                    return _dump(await server.request(method, lambda c: c.read_resource(uri)))
            raise RpcError(types.INVALID_PARAMS, f"Unknown resource: {uri[:200]}")
        except ToolError as exc:
            raise RpcError(types.INTERNAL_ERROR, str(exc)) from None


async def _list_call(client: Any, method: str) -> Any:
    if method == "resources/list":
        return await client.list_resources()
    if method == "resources/templates/list":
        return await client.list_resource_templates()
    return await client.list_prompts()
