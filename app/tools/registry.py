"""The gateway's tools: built from configuration, scoped per run, executed in parallel.

`ToolRegistry.for_run(provider, declared)` gives a run its `RunTools`: the registered tools in
scope for that provider, minus any the caller declared itself (a caller's tool of the same name
is the caller's to answer). Their specs are offered to the model with the request's own tools,
so a tool the gateway runs is a tool the model can see. `RunTools.start(calls)` runs one turn's
calls concurrently, each under its tool's timeout; every call ends as one `ToolResultEvent`
that closes the turn (failures and timeouts with `is_error: true` and the message), counted in
`foundry_tool_executions_total{tool, outcome}`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import httpx2

from app.core.events import ToolResultEvent
from app.core.messages import ToolCall, ToolSpec
from app.core.processors import ProcessorRegistry
from app.observability import get_logger
from app.tools.base import Tool, ToolError, encode_output, import_object
from app.tools.calculator import CalculatorTool
from app.tools.config import BuiltinToolConfig, HttpToolConfig, PythonToolConfig, ToolConfig
from app.tools.http import HttpTool
from app.tools.mcp_hub import McpHub, PatternSets
from app.tools.python import PythonTool
from app.tracing import Tracing

__all__ = ["Execution", "RunTools", "ToolObserver", "ToolRegistry", "build_tools"]

ToolObserver = Callable[[str, str], None]
"""(tool name, outcome: ok | error | timeout | cancelled) for each execution."""

DEFAULT_MAX_OUTPUT_CHARS = 100_000


@dataclass(slots=True, frozen=True)
class _Registered:
    tool: Tool
    providers: frozenset[str] | None


class ToolRegistry:
    def __init__(
        self,
        tools: Mapping[str, Tool] | None = None,
        *,
        providers: Mapping[str, Iterable[str] | None] | None = None,
        processors: ProcessorRegistry | None = None,
        observer: ToolObserver | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        client: httpx2.AsyncClient | None = None,
        mcp: McpHub | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        scopes = providers or {}
        self._tools = {
            name: _Registered(tool, None if (scope := scopes.get(name)) is None else frozenset(scope))
            for name, tool in (tools or {}).items()
        }
        self.processors = processors or ProcessorRegistry()
        self.observer = observer
        self.max_output_chars = max_output_chars
        self._client = client
        self.tracing = tracing
        """Each execution in an `execute_tool` span (app/tracing.py), when tracing is on."""
        self.mcp = mcp
        """The MCP servers' tools, offered by key and request (app/tools/mcp_hub.py)."""

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def for_run(self, provider: str, declared: Iterable[str], mcp_filters: PatternSets = ()) -> RunTools:
        """The tools this run offers and executes: the registered ones, then the MCP servers' tools
        that every pattern set of `mcp_filters` allows (the key's policy, the request's narrowing)."""
        mine = set(declared)
        offered: dict[str, Tool] = dict(self.mcp.offered(provider, mcp_filters)) if self.mcp is not None else {}
        offered.update((name, entry.tool) for name, entry in self._tools.items()
                       if entry.providers is None or provider in entry.providers)
        return RunTools({name: tool for name, tool in offered.items() if name not in mine}, self)

    async def start(self) -> None:
        """Open the MCP servers' sessions (app/tools/mcp_hub.py)."""
        if self.mcp is not None:
            await self.mcp.start()

    async def aclose(self) -> None:
        if self.mcp is not None:
            await self.mcp.aclose()
        if self._client is not None:
            await self._client.aclose()


class RunTools:
    """One run's gateway tools."""

    def __init__(self, tools: Mapping[str, Tool], registry: ToolRegistry) -> None:
        self._tools = dict(tools)
        self._registry = registry
        self.specs: tuple[ToolSpec, ...] = tuple(t.spec for t in self._tools.values())

    def __bool__(self) -> bool:
        return bool(self._tools)

    def runs(self, name: str) -> bool:
        return name in self._tools

    def start(self, calls: Sequence[ToolCall]) -> Execution:
        """Start every call at once; read the results with `Execution.wait()`."""
        return Execution({asyncio.get_running_loop().create_task(self._run(call), name=f"tool-{call.id}"): call
                          for call in calls})

    async def _run(self, call: ToolCall) -> ToolResultEvent:
        tracing = self._registry.tracing
        if tracing is None:
            return (await self._execute(call))[0]
        with tracing.tool(call) as span:
            try:
                result, outcome = await self._execute(call)
            except asyncio.CancelledError:
                tracing.end_tool(span, outcome="cancelled", content="")
                raise
            tracing.end_tool(span, outcome=outcome, content=result.content)
        return result

    async def _execute(self, call: ToolCall) -> tuple[ToolResultEvent, str]:
        """The call's result event and its outcome (ok, error, timeout)."""
        tool = self._tools[call.name]
        registry = self._registry
        outcome = "error"
        try:
            async with asyncio.timeout(tool.timeout) as deadline:
                value = await tool.run(call)
            content, outcome = encode_output(value), "ok"
        except TimeoutError as exc:
            if deadline.expired():
                content, outcome = f"tool {call.name} timed out after {tool.timeout:g}s", "timeout"
            else:  # the tool's own timeout (a socket's, ...): a failure like any other
                content = f"TimeoutError: {exc}"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except ToolError as exc:
            content = str(exc) or type(exc).__name__
        except Exception as exc:  # an operator's tool failing is an answer for the model, not a crash
            content = f"{type(exc).__name__}: {exc}"
            get_logger("foundry.tools").warning("tool_failed", tool=call.name, tool_call_id=call.id,
                                                error_type=type(exc).__name__)
        finally:
            if registry.observer is not None:
                registry.observer(call.name, outcome)
        if len(content) > registry.max_output_chars:
            content = content[: registry.max_output_chars] + f"\n[output cut at {registry.max_output_chars} characters]"
        # The gateway answers a call the model made for the caller: its turn is over (the turn rule
        # of app/core/events.py ToolResultEvent, as for a result in the provider's stream).
        return ToolResultEvent(tool_call_id=call.id, name=call.name, content=content, is_error=outcome != "ok",
                               closes_turn=True), outcome


class Execution:
    """One turn's calls running concurrently; results come out as they finish."""

    def __init__(self, tasks: dict[asyncio.Task[ToolResultEvent], ToolCall]) -> None:
        self._pending = dict(tasks)
        self.calls = tuple(tasks.values())
        self.results: dict[str, ToolResultEvent] = {}

    @property
    def done(self) -> bool:
        return not self._pending

    async def wait(self) -> list[ToolResultEvent]:
        """The results of the next calls to finish (in call order among them)."""
        finished, _ = await asyncio.wait(self._pending, return_when=asyncio.FIRST_COMPLETED)
        out = []
        for task in sorted(finished, key=lambda t: self.calls.index(self._pending[t])):
            call = self._pending.pop(task)
            result = task.result()
            self.results[call.id] = result
            out.append(result)
        return out

    async def aclose(self) -> None:
        """Cancel what still runs (the client left, the run failed) and wait for it to stop."""
        pending = list(self._pending)
        self._pending.clear()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def build_tools(
    configs: Sequence[ToolConfig],
    *,
    observer: ToolObserver | None = None,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    client: httpx2.AsyncClient | None = None,
    mcp: McpHub | None = None,
    tracing: Tracing | None = None,
) -> ToolRegistry:
    """The registry the configuration describes; ValueError naming a tool whose target is wrong.

    HTTP tools share one client (injected in tests); it is made only when one is configured.
    """
    tools: dict[str, Tool] = {}
    scopes: dict[str, list[str] | None] = {}
    processors = ProcessorRegistry()
    for config in configs:
        if isinstance(config, HttpToolConfig) and client is None:
            client = httpx2.AsyncClient(follow_redirects=False, trust_env=False)
        try:
            tools[config.name] = _build(config, client)
            if config.processor is not None:
                processors.register_processor(config.name, import_object(config.processor)())
        except ValueError as exc:
            raise ValueError(f"tools: {config.name}: {exc}") from None
        scopes[config.name] = config.providers
    return ToolRegistry(tools, providers=scopes, processors=processors, observer=observer,
                        max_output_chars=max_output_chars, client=client, mcp=mcp, tracing=tracing)


def _build(config: ToolConfig, client: httpx2.AsyncClient | None) -> Tool:
    if isinstance(config, BuiltinToolConfig):
        return CalculatorTool(timeout=config.timeout)  # the one built-in (BUILTIN_TOOLS)
    if isinstance(config, PythonToolConfig):
        return PythonTool(spec=config.spec(), function=import_object(config.target), timeout=config.timeout)
    assert isinstance(config, HttpToolConfig) and client is not None
    headers = {k: v.get_secret_value() for k, v in config.headers.items()}
    return HttpTool(spec=config.spec(), url=config.url, timeout=config.timeout, client=client, headers=headers)
