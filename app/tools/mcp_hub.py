"""Every configured MCP server, and their tools as gateway tools named `<server>__<tool>`.

`McpHub.offered(provider, filters)` is what one run may use: the tools of the servers that are
up, in scope for the provider, allowed by every pattern set in `filters` (the key's policy and,
narrowing it, the request's). An `McpTool` runs a call through its server (app/tools/mcp_client.py)
and maps the result to the tool message: text as it is, images, audio and resources named by
their kind, type and size, structured content as JSON when there is no text; `isError` results
are failures (`tool_result{is_error: true}`) with the server's text.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson

from app.auth.policy import tool_allowed
from app.core import secrets
from app.core.messages import ToolCall, ToolSpec, freeze, thaw
from app.tools.base import ToolError
from app.tools.mcp_client import McpServer
from app.tools.mcp_config import MCP_SEPARATOR, McpServerConfig, mcp_tool_name

__all__ = ["McpHub", "McpTool", "PatternSets", "build_hub", "result_text"]

PatternSets = Sequence[tuple[str, ...]]
"""Each set of patterns must allow a tool (the key's policy, the request's narrowing)."""


def allowed(name: str, filters: PatternSets) -> bool:
    return all(tool_allowed(patterns, name) for patterns in filters)


@dataclass(slots=True)
class McpTool:
    """A server's tool, as the gateway runs it for a model."""

    spec: ToolSpec
    timeout: float
    server: McpServer
    tool: str

    async def run(self, call: ToolCall) -> Any:
        result = await self.server.call(self.tool, dict(thaw(call.arguments)))
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"MCP tool {self.spec.name} failed")
        return text


def result_text(result: types.CallToolResult) -> str:
    """The result as the tool message's text, scrubbed of the gateway's secrets."""
    parts = [_block_text(block) for block in result.content]
    if not any(parts) and result.structured_content is not None:
        parts = [orjson.dumps(result.structured_content, default=str).decode()]
    return secrets.scrub("\n".join(p for p in parts if p))


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, types.EmbeddedResource):
        inner = block.resource
        if isinstance(inner, types.TextResourceContents):
            return inner.text
        return f"[resource {inner.uri}: {inner.mime_type or 'binary'}, {len(inner.blob) * 3 // 4} bytes]"
    return f"[resource link {block.uri}]"


def _spec(server: str, tool: types.Tool) -> ToolSpec | None:
    """The spec the model sees; None for a tool whose name or schema cannot be offered."""
    try:
        return ToolSpec(name=mcp_tool_name(server, tool.name), description=(tool.description or "")[:4000],
                        parameters=freeze(tool.input_schema))
    except (ValueError, TypeError):
        return None


class McpHub:
    def __init__(self, configs: Iterable[McpServerConfig]) -> None:
        """A server per config, each telling the hub when its tool list changed; McpSecretMissing
        naming a variable not set."""
        self._tools: dict[str, McpTool] = {}
        self.servers = {c.name: McpServer(c, c.resolve(), on_change=self._rebuild) for c in configs}
        self._rebuild()

    def _rebuild(self) -> None:
        tools: dict[str, McpTool] = {}
        for server in self.servers.values():
            for name, tool in server.tools.items():
                spec = _spec(server.name, tool)
                if spec is not None:
                    tools[spec.name] = McpTool(spec=spec, timeout=server.config.timeout, server=server, tool=name)
        self._tools = tools

    @property
    def tools(self) -> Mapping[str, McpTool]:
        return self._tools

    def offered(self, provider: str | None, filters: PatternSets) -> dict[str, McpTool]:
        """The tools a run (provider given) or an /mcp client (None) may see and call."""
        return {name: tool for name, tool in self._tools.items()
                if allowed(name, filters) and (provider is None or _in_scope(tool.server.config, provider))}

    def owner(self, name: str) -> tuple[McpServer, str] | None:
        """The server and its own tool name of `<server>__<tool>`, whether it lists it now or not."""
        server, sep, tool = name.partition(MCP_SEPARATOR)
        if not sep or server not in self.servers or not tool:
            return None
        return self.servers[server], tool

    async def start(self, wait: float | None = None) -> None:
        """Open every server's session; wait (at most each one's connect timeout) for the first attempts."""
        for server in self.servers.values():
            server.start()
        if self.servers:
            longest = wait if wait is not None else max(s.config.connect_timeout for s in self.servers.values())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(longest):
                    await asyncio.gather(*(s.first_attempt.wait() for s in self.servers.values()))

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self.servers.values()))


def _in_scope(config: McpServerConfig, provider: str) -> bool:
    return config.providers is None or provider in config.providers


def build_hub(configs: Sequence[McpServerConfig]) -> McpHub | None:
    """The servers the configuration declares (None: none); McpSecretMissing naming a variable not set."""
    if not configs:
        return None
    return McpHub(configs)
