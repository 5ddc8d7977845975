"""Per-tool display processors for transcripts (the reference's `register_processor`).

A processor shapes one tool's input and output for redisplay (a title, a summary, a table)
without changing what is recorded. It runs when a transcript is read, never on the stream's hot
path, and a processor that raises never breaks the record: the raw value is shown with the error.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

__all__ = ["Processor", "ProcessorRegistry"]


class Processor(Protocol):
    """Shapes one tool's input and output for display; either method may be left out."""

    def process_input(self, arguments: dict[str, Any]) -> Any: ...

    def process_output(self, content: str) -> Any: ...


class ProcessorRegistry:
    """Processors by tool name; tools without one are shown as they are (output parsed as JSON
    when it is JSON, else `{"text": content}`, as in the reference)."""

    def __init__(self) -> None:
        self._processors: dict[str, Processor] = {}

    def register_processor(self, name: str, processor: Processor) -> None:
        self._processors[name] = processor

    def get_processor_for_tool(self, name: str) -> Processor | None:
        return self._processors.get(name)

    def display_input(self, name: str, arguments: dict[str, Any]) -> Any:
        processor = self._processors.get(name)
        method = getattr(processor, "process_input", None)
        if method is not None:
            try:
                return method(arguments)
            except Exception as exc:  # a display helper never breaks a stream
                return {"arguments": arguments, "processor_error": f"{type(exc).__name__}: {exc}"[:300]}
        return arguments

    def display_output(self, name: str, content: str) -> Any:
        processor = self._processors.get(name)
        method = getattr(processor, "process_output", None)
        if method is not None:
            try:
                return method(content)
            except Exception as exc:
                return {"text": content, "processor_error": f"{type(exc).__name__}: {exc}"[:300]}
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            return {"text": content}
