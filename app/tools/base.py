"""What a gateway-executed tool is: the spec the model sees, a timeout, and `run(call)`.

A tool returns any JSON value (a string is sent as it is, anything else as compact JSON) or
raises. `ToolError` is a failure the tool reports on purpose; any other exception and a timeout
are failures too. Every failure becomes `tool_result{is_error: true}` with its message, which
goes back to the model like any output: the model can correct its call or work around the tool.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import orjson

from app.core.messages import ToolCall, ToolSpec

__all__ = ["Tool", "ToolError", "encode_output", "import_object"]


class ToolError(Exception):
    """A tool's own failure, worded for the model: `tool_result{is_error: true, content: str(exc)}`."""


class Tool(Protocol):
    spec: ToolSpec
    timeout: float

    async def run(self, call: ToolCall) -> Any:
        """The call's output as a JSON value; raise on failure."""


def encode_output(value: Any) -> str:
    """A tool's return value as the tool message content: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:
        raise ToolError(f"the tool returned a value that is not JSON ({type(value).__name__}): {exc}") from None


def import_object(path: str) -> Any:
    """`package.module:attribute` (the attribute may be dotted) -> the object; ValueError naming the problem."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{path!r} is not an import path of the form 'package.module:name'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} (from {path!r}): {exc}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{path!r}: {module_name} has no attribute {attribute!r}") from None
    return target
