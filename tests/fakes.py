"""Fake provider adapters for pipeline tests, injected with create_app(adapters=...)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from app.core.patches import MessageDelta, MessageEnd, Patch, TextDelta
from app.providers.base import ProviderRequest


class ScriptedStream:
    """Yields the given batches; an Exception in the script is raised at that point; `block`
    makes it wait forever (until closed) after the batches."""

    def __init__(self, script: list, *, block: bool = False) -> None:
        self.script = script
        self.block = block
        self.closed = asyncio.Event()
        self.served_first = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        for item in self.script:
            if isinstance(item, BaseException):
                raise item
            yield item
            self.served_first.set()
        if self.block:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed.set()


class FakeAdapter:
    """A provider whose every stream follows `script`; `open_error` fails before the first event."""

    def __init__(self, script: list | None = None, *, block: bool = False, open_error: Exception | None = None,
                 name: str = "fake") -> None:
        self.name = name
        self.script = script if script is not None else ok_script("hi")
        self.block = block
        self.open_error = open_error
        self.streams: list[ScriptedStream] = []
        self.requests: list[ProviderRequest] = []

    def ready(self) -> bool:
        return True

    async def open_stream(self, request: ProviderRequest) -> ScriptedStream:
        self.requests.append(request)
        if self.open_error is not None:
            raise self.open_error
        stream = ScriptedStream(list(self.script), block=self.block)
        self.streams.append(stream)
        return stream


def ok_script(*texts: str) -> list:
    return [[TextDelta(text=t)] for t in texts] + [[MessageDelta(stop_reason="stop"), MessageEnd()]]
