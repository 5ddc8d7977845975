"""A Python callable the operator registered by import path, run as a gateway tool.

The call's arguments are passed as keyword arguments (`lookup(city="Paris")`), so a model's
wrong argument names come back to it as a TypeError it can correct. Coroutine functions are
awaited; plain functions run in a worker thread, so a blocking tool never stalls the event
loop. A thread cannot be killed: a plain function that outlives its timeout keeps its thread
until it returns (its result is discarded). Prefer `async def` for tools that can hang.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from app.core.messages import ToolCall, ToolSpec, thaw

__all__ = ["PythonTool"]


class PythonTool:
    def __init__(self, *, spec: ToolSpec, function: Callable[..., Any], timeout: float) -> None:
        if not callable(function):
            raise ValueError(f"tool {spec.name}: the import path names {type(function).__name__}, not a callable")
        self.spec = spec
        self.function = function
        self.timeout = timeout
        # a coroutine function, or an object whose __call__ is one
        self._is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            type(function).__call__)

    async def run(self, call: ToolCall) -> Any:
        arguments = thaw(call.arguments)
        if self._is_async:
            return await self.function(**arguments)
        result = await asyncio.to_thread(self.function, **arguments)
        if inspect.isawaitable(result):
            result = await result
        return result
