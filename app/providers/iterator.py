"""The reference's iterator interface over canonical events (foundry-adapters.md), for library
use and contract tests: `BaseStreamIterator` subclasses give chunks of patches, the shared
accumulator (`to_final`) makes the events. The gateway's own runs do not use it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from app.core.accumulator import Accumulator
from app.core.events import FinalEvent, StreamEvent
from app.core.patches import Patch
from app.providers.base import to_final

__all__ = ["BaseStreamIterator", "replay_stream"]


class _ChunkSource:
    """A `BaseStreamIterator`'s chunks as a patch stream."""

    def __init__(self, next_chunk: Callable[[], Awaitable[list[Patch] | None]]) -> None:
        self._next_chunk = next_chunk

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        while (chunk := await self._next_chunk()) is not None:
            yield chunk

    async def aclose(self) -> None:
        return None


class BaseStreamIterator:
    """Canonical events from a chunk source, for library use and contract tests.

    Subclasses provide `_get_next_chunk()` (a batch of patches, or None when the source is
    exhausted). The iterator closes itself after the final event or when the source ends, so
    the underlying resources are always released (reference: foundry-adapters.md).
    """

    def __init__(self, *, model: str, provider: str) -> None:
        self._accumulator = Accumulator(model=model, provider=provider)
        self._events: AsyncIterator[StreamEvent] | None = None
        self.closed = False

    async def _get_next_chunk(self) -> list[Patch] | None:
        raise NotImplementedError

    async def close(self) -> None:
        self.closed = True

    def __aiter__(self) -> BaseStreamIterator:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._events is None:
            self._events = self._run()
        return await self._events.__anext__()

    async def _run(self) -> AsyncGenerator[StreamEvent, None]:
        async with contextlib.aclosing(to_final(_ChunkSource(self._get_next_chunk), self._accumulator)) as batches:
            async for batch in batches:
                for event in batch:
                    if isinstance(event, FinalEvent):
                        await self.close()
                    yield event


async def replay_stream(iterator: BaseStreamIterator) -> list[StreamEvent]:
    """Drain an iterator into a list: the same list on every replay of the same source."""
    return [event async for event in iterator]
