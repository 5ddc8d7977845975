"""One MCP server behind the gateway: one session on this replica, kept up, called within bounds.

`McpServer.start()` opens the session in a task of its own (the SDK's transports are anyio
context managers: they are entered and left in that one task), lists the server's tools, and
lists them again when the server says `notifications/tools/list_changed`. A session that breaks
(the process died, the connection closed, a ping unanswered) is reopened after a backoff that
doubles per failure up to its maximum; meanwhile calls fail at once with a clear error. A call
takes one of the server's `max_concurrency` slots, has its timeout, and its result is refused
when larger than `max_result_bytes` or not a tool result at all: nothing a server sends can
crash a run. Text from the server is untrusted: it is scrubbed of the gateway's secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from app.core import secrets
from app.observability import get_logger
from app.tools.base import ToolError
from app.tools.mcp_config import McpServerConfig, ResolvedSecrets

__all__ = ["McpServer", "McpUnavailable", "result_size"]

HEALTH_SECONDS = 5.0
"""How often an idle session is pinged: a server that died is noticed within this time."""
_BROKEN = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError)


class McpUnavailable(ToolError):
    """The server has no session now (starting, restarting): the call is refused at once."""


def result_size(result: types.CallToolResult) -> int:
    """Bytes of a result as sent: its JSON."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True))


class McpServer:
    def __init__(self, config: McpServerConfig, resolved: ResolvedSecrets, *,
                 on_change: Callable[[], None] | None = None, errlog: TextIO | None = None,
                 health_seconds: float = HEALTH_SECONDS) -> None:
        self.config = config
        self.name = config.name
        self._resolved = resolved
        secrets.remember(*resolved.values)
        self.tools: dict[str, types.Tool] = {}
        """The server's tools by its own names (empty while it is down)."""
        self.capabilities: types.ServerCapabilities | None = None
        self.state: Literal["starting", "up", "down"] = "starting"
        self.restarts = 0
        self._client: Client | None = None
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self.on_change = on_change
        self._errlog = errlog or _devnull()
        """The child's stderr: its own, not the gateway's log (discarded unless a test passes a file)."""
        self._health = health_seconds
        self._task: asyncio.Task[None] | None = None
        self._broken = asyncio.Event()
        self._stale = asyncio.Event()
        self.first_attempt = asyncio.Event()
        """Set once the first connection succeeded or failed (start-up waits for it, bounded)."""
        self._log = get_logger("foundry.mcp")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._keep(), name=f"mcp-{self.name}")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _keep(self) -> None:
        """Open the session; when it breaks or cannot open, wait (backoff) and open it again."""
        backoff = self.config.restart_backoff_seconds
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # anything the server or its transport does ends this session only
                self._log.warning("mcp_server_down", server=self.name, error_type=type(exc).__name__,
                                  error=secrets.scrub(_first_error(exc))[:300])
            else:
                self._log.warning("mcp_server_down", server=self.name, error_type="closed")
            if self.state == "up":
                backoff = self.config.restart_backoff_seconds  # it had worked: start the backoff over
            self._down()
            self.first_attempt.set()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.config.restart_backoff_max_seconds)
            self.restarts += 1

    def _down(self) -> None:
        had = bool(self.tools)
        self.state, self._client, self.tools, self.capabilities = "down", None, {}, None
        if had and self.on_change is not None:
            self.on_change()

    async def _session(self) -> None:
        self._broken.clear()
        self._stale.clear()
        async with self._connect() as client, asyncio.timeout(self.config.connect_timeout) as opening:
            async with client:  # the handshake; left with whatever ends the session (the SDK cleans up)
                await self._list(client)
                opening.reschedule(None)  # open: the connect timeout no longer applies
                self._client, self.state = client, "up"
                self.capabilities = client.server_capabilities
                self.first_attempt.set()
                self._log.info("mcp_server_up", server=self.name, tools=len(self.tools))
                try:
                    await self._watch(client)
                finally:
                    self._client = None

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        config = self.config
        common: dict[str, Any] = {"mode": "legacy", "cache": None, "message_handler": self._message,
                                  "read_timeout_seconds": config.timeout + 1}  # the caller's timeout comes first
        if config.transport == "stdio":
            assert config.command is not None
            params = StdioServerParameters(command=config.command, args=list(config.args),
                                           env=dict(self._resolved.env), cwd=config.cwd,
                                           encoding_error_handler="replace")
            yield Client(stdio_client(params, errlog=self._errlog), **common)
            return
        assert config.url is not None
        async with httpx2.AsyncClient(headers=dict(self._resolved.headers), trust_env=False,
                                      timeout=httpx2.Timeout(config.timeout, connect=config.connect_timeout)) as http:
            yield Client(streamable_http_client(config.url, http_client=http), **common)

    async def _watch(self, client: Client) -> None:
        """Until the session breaks: refresh the tools when they changed, ping when idle."""
        while not self._broken.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._health):
                    await self._stale.wait()
            if self._broken.is_set():
                return
            async with asyncio.timeout(self.config.connect_timeout):
                if self._stale.is_set():
                    self._stale.clear()
                    await self._list(client)
                    self._log.info("mcp_tools_changed", server=self.name, tools=len(self.tools))
                else:
                    with warnings.catch_warnings():  # ping is legacy-only, and legacy is what the gateway speaks
                        warnings.simplefilter("ignore", MCPDeprecationWarning)
                        await client.send_ping()

    async def _list(self, client: Client) -> None:
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(100):  # pages: a server cannot keep the gateway listing forever
            page = await client.list_tools(cursor=cursor)
            tools.update((tool.name, tool) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        if self.on_change is not None:
            self.on_change()

    def _broke(self) -> None:
        self._broken.set()
        self._stale.set()  # wakes the watcher, which then sees the break

    async def _message(self, message: Any) -> None:
        if isinstance(message, Exception):  # the transport's fault (a line that is not JSON-RPC, ...)
            self._broke()
        elif isinstance(message, types.ToolListChangedNotification):
            self._stale.set()
        # progress and log notifications are ignored: the call's result is what counts

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """The server's result (its size checked); ToolError for anything else."""
        client = self._client
        if client is None or self.state != "up":
            raise McpUnavailable(f"MCP server {self.name} is unavailable (it is restarting); try again later")
        async with self._slots:
            try:
                result = await client.call_tool(tool, arguments)
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    self._broke()
                    raise McpUnavailable(f"MCP server {self.name} closed the connection") from None
                raise ToolError(secrets.scrub(f"MCP server {self.name}: {exc.message}")[:1000]) from None
            except _BROKEN:
                self._broke()
                raise McpUnavailable(f"MCP server {self.name} closed the connection") from None
            except Exception as exc:  # a malformed answer: contained, named
                raise ToolError(f"MCP server {self.name} answered something that is not a tool result "
                                f"({type(exc).__name__})") from None
        size = result_size(result)
        if size > self.config.max_result_bytes:
            raise ToolError(f"MCP tool {self.name}__{tool} answered {size} bytes, more than the "
                            f"{self.config.max_result_bytes} allowed")
        return result

    async def request(self, method: str, fn: Callable[[Client], Any]) -> Any:
        """Pass a request through (resources, prompts): its result model; ToolError otherwise."""
        client = self._client
        if client is None or self.state != "up":
            raise McpUnavailable(f"MCP server {self.name} is unavailable (it is restarting); try again later")
        async with self._slots:
            try:
                async with asyncio.timeout(self.config.timeout):
                    return await fn(client)
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    self._broke()
                raise ToolError(secrets.scrub(f"MCP server {self.name}: {exc.message}")[:1000]) from None
            except TimeoutError:
                raise ToolError(f"MCP server {self.name} did not answer {method} in {self.config.timeout:g}s") from None
            except _BROKEN:
                self._broke()
                raise McpUnavailable(f"MCP server {self.name} closed the connection") from None
            except Exception as exc:
                raise ToolError(f"MCP server {self.name} answered {method} with something malformed "
                                f"({type(exc).__name__})") from None


def _devnull() -> TextIO:
    global _DEVNULL
    if _DEVNULL is None:
        _DEVNULL = open(os.devnull, "w")  # one for the process, never closed
    return _DEVNULL


_DEVNULL: TextIO | None = None


def _first_error(exc: BaseException) -> str:
    """A task group's error names its first cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
