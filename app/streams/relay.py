"""A run's relay: the provider's own events (SSE frames) that a same-wire facade passes on to its
client as the upstream sent them, in the order the validation gate released them, then the run's
final (DESIGN.md section 10).

The relay sits beside the stream log, not in it: the log keeps the canonical events that every
other reader (replay, records, transcript) reads, the relay only what the one client of a
passthrough request gets. One reader; bounded like the log: a reader more than `max_bytes`
behind makes the run wait (`room`), as the log's holding reader does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from app.core.events import FinalEvent
from app.streams.handover import hand_over

__all__ = ["Relay"]

_MAX_BYTES = 1 << 20


class Relay:
    __slots__ = ("_frames", "_bytes", "_max_bytes", "final", "_waiter", "_room")

    def __init__(self, *, max_bytes: int = _MAX_BYTES) -> None:
        self._frames: list[bytes] = []
        self._bytes = 0
        self._max_bytes = max_bytes
        self.final: FinalEvent | None = None
        self._waiter: asyncio.Future[None] | None = None
        """The reader's wait for the next frame: a future (one reader; an `asyncio.Event` would add a
        coroutine per wait and a 64-slot deque, as the stream log found, app/streams/log.py)."""
        self._room: asyncio.Event | None = None

    def push(self, frame: bytes) -> None:
        self._frames.append(frame)
        self._bytes += len(frame)
        self._wake()

    def finish(self, final: FinalEvent) -> None:
        """The run ended: the reader gets what is left, then this final."""
        self.final = final
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():  # the reader cancelled while it waited cancelled it
                waiter.set_result(None)

    @property
    def lagging(self) -> bool:
        return self._bytes > self._max_bytes

    async def room(self) -> None:
        """Until the reader took what is over the bound (the run's flow control)."""
        while self.lagging:
            if self._room is None:
                self._room = asyncio.Event()
            await self._room.wait()

    async def hand_over(self) -> None:
        """The run's first content is in: the reader takes it first (app/streams/handover.py)."""
        await hand_over(lambda: not self._frames)

    def _take(self) -> bytes:
        frames, self._frames, self._bytes = self._frames, [], 0
        if self._room is not None:
            self._room.set()
            self._room = None
        return b"".join(frames)

    async def follow(self) -> AsyncIterator[tuple[bytes, FinalEvent | None]]:
        """The frames as they come, in batches; the last batch with the run's final."""
        while True:
            final = self.final
            if self._frames or final is not None:
                yield self._take(), final
                if final is not None:
                    return
                continue
            if self._waiter is None or self._waiter.done():
                self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
