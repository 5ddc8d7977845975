"""Stream logs: one writer, any number of readers, replay from any retained sequence number.

A log stores each event once, already encoded as its SSE frame (app/streams/frames.py), so fan-out
costs no encoding per reader and a slow reader holds nothing: readers keep only a cursor into the
shared log. Each log is bounded (events and bytes; the oldest frames go first); the bytes of all the
logs of a store count against one `Budget`. A store that persists elsewhere gives each log a `sink`
and writes in the background, never on the live path (app/streams/redis/owner.py).

Cancellation: the run writing a log gives it its `canceller` at creation; `cancel()` (the API's cancel, on
this replica or relayed from another) calls it, and the run's task ends where it waits with
`final{status: "cancelled"}`. Readers never drive the run: they read its log.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.core.events import FinalEvent, StreamEvent
from app.core.transcript import Transcript
from app.streams.budget import Budget
from app.streams.errors import EventTooLarge, ReplayUnavailable
from app.streams.frames import LastFrames, PackedFrames, encode_frame, fitted_final
from app.streams.handover import hand_over

_T = TypeVar("_T")

BATCH_BYTES = 64 * 1024
"""Most bytes a reader takes from the log per send (one frame at least)."""
_BATCH_FRAMES = 1024
_PRUNE_WAITERS = 16
"""Waiters kept before the cancelled ones are dropped without an append (readers that left)."""
_NOBODY = 1 << 62
"""No reader holds the log: it keeps to its bounds."""
WINDOW = 32
"""Events a run may write ahead of the reader that holds its log before it waits for that reader.
Enough for the reader to take whole batches while it keeps up (its send buffers behind it), small
enough that a stalled reader pins a few kilobytes, not a whole answer."""

__all__ = ["BATCH_BYTES", "Canceller", "Sink", "StreamInfo", "StreamLog", "StreamRecord"]


Sink = Callable[["StreamLog", int, bytes, bool], None]
"""Told of every appended frame (log, seq, frame, is_final): a persisting store's hook."""

Canceller = Callable[[], bool]
"""Given by the run writing a log: ends the run (False when it had already ended)."""


@dataclass(slots=True, kw_only=True)
class StreamInfo:
    stream_id: str
    model: str
    provider: str
    created_at: float = field(default_factory=time.time)
    owner: str | None = None
    """The id of the API key that started the stream (None: open mode or the admin key); others get 404."""
    transcript: Transcript | None = None
    """The stream's record for redisplay, kept for the stream's lifetime."""


class StreamLog:
    """The events of one stream, in order, numbered from 1."""

    __slots__ = ("info", "_frames", "_events", "_first_seq", "_next_seq", "_bytes", "_max_events", "_max_bytes",
                 "_waiters", "final", "finished_at", "_budget", "sink", "canceller", "_held", "_room", "_visible")

    def __init__(self, info: StreamInfo, *, max_events: int, max_bytes: int, budget: Budget | None = None,
                 keep_events: bool = False, held: bool = False, sink: Sink | None = None,
                 canceller: Canceller | None = None) -> None:
        self.info = info
        self._budget = budget
        self._frames: deque[bytes] | PackedFrames = deque()
        """Packed once the final is in (`PackedFrames`)."""
        self._events: deque[StreamEvent] | None = deque() if keep_events else None
        """The events beside their frames, for a reader that translates them (a facade); same bounds."""
        self._first_seq = 1
        self._next_seq = 1
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._waiters: list[asyncio.Future[None]] | None = None
        """The readers waiting for the next append, each on a future of its own (`_changed`)."""
        self.final: FinalEvent | None = None
        self.finished_at: float | None = None
        self.sink = sink
        self.canceller = canceller
        self._held = 0 if held else _NOBODY
        """The last id the holding reader took (`follow(..., hold=True)`): frames after it are kept.
        A log made `held` is held from its first frame, before that reader starts."""
        self._room: asyncio.Event | None = None
        self._visible: int | None = None
        """The last id readers may take (`gate`); None: every appended frame."""

    @property
    def first_seq(self) -> int:
        """The oldest retained event's id."""
        return self._first_seq

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def readable_seq(self) -> int:
        """The last id readers may take: every appended one, or on a gated log the last one its
        store has persisted."""
        return self._next_seq - 1 if self._visible is None else self._visible

    @property
    def finished(self) -> bool:
        return self.final is not None

    # -- release after persistence (a shared store) ---------------------------------------------

    def gate(self) -> None:
        """Readers take only what `release` lets go: a shared store releases a frame once it holds
        it, so that no reader sees an id that the replica taking over a lost run could number
        differently (app/streams/redis/owner.py). Gating an ungated log keeps what readers could
        take already."""
        self._visible = self.last_seq

    def release(self, seq: int) -> None:
        """Frames up to `seq` are persisted: readers may take them."""
        if self._visible is not None and seq > self._visible:
            self._visible = min(seq, self.last_seq)
            self._wake()

    @property
    def gated(self) -> bool:
        """Readers take only what `release` lets go."""
        return self._visible is not None

    def ungate(self) -> None:
        """Readers take every frame again (the store cannot persist: streams go on from memory)."""
        if self._visible is not None:
            self._visible = None
            self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for waiter in waiters:
                if not waiter.done():  # a reader cancelled while it waited cancelled its own
                    waiter.set_result(None)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def append(self, event: StreamEvent) -> bytes:
        """Number, encode and store one event; wake the readers. Returns the frame. An event other
        than the final whose frame alone passes the byte cap is refused (EventTooLarge)."""
        if self.final is not None:
            raise RuntimeError("stream already ended with its final event")
        seq = self._next_seq
        frame = encode_frame(seq, event)
        if len(frame) > self._max_bytes:
            if not isinstance(event, FinalEvent):
                raise EventTooLarge(f"a {event.type} event of {len(frame)} bytes passes the stream's cap of "
                                    f"{self._max_bytes} (FOUNDRY_MAX_STREAM_BYTES)")
            event, frame = fitted_final(event, seq, self._max_bytes)
        final = isinstance(event, FinalEvent)
        size = len(frame)
        self._next_seq = seq + 1
        frames: deque[bytes] = self._frames  # type: ignore[assignment]  # packed only once the final is in, below
        frames.append(frame)
        events = self._events
        if events is not None:
            events.append(event)
        self._bytes += size
        budget = self._budget
        if budget is not None:  # Budget.grow, inlined: this runs once per event of every stream
            budget.used += size
            if budget.used > budget.limit:
                budget.relieve(self.info.owner)
        if len(frames) > self._max_events or self._bytes > self._max_bytes:  # over_bounds, tested first
            while len(frames) > 1 and self._first_seq <= self._held and self.over_bounds:
                self._evict_oldest()
        if final:
            self.final = event  # type: ignore[assignment]
            self.finished_at = time.monotonic()
            # nothing is left to cancel: let go of the run (its task, state and upstream response),
            # which the canceller's closure would keep as long as the stream is kept for replay
            self.canceller = None
            self._frames = PackedFrames(frames)
        if self.sink is not None:
            self.sink(self, seq, frame, final)
        if self._visible is None and self._waiters is not None:  # a gated log wakes its readers on `release`
            self._wake()
        return frame

    def _evict_oldest(self) -> None:
        size = len(self._frames.popleft())
        self._bytes -= size
        if self._events is not None:
            self._events.popleft()
        self._first_seq += 1
        if self._budget is not None:
            self._budget.grow(-size)

    @property
    def over_bounds(self) -> bool:
        """More retained than the log's bounds: only while its holding reader lags behind."""
        return len(self._frames) > self._max_events or self._bytes > self._max_bytes

    @property
    def lagging(self) -> bool:
        """The holding reader is more than `WINDOW` events behind, or what it has not taken keeps
        the log over its bounds: the writer waits (`room`). A reader that took everything is never
        waited for, whatever is left over the bounds."""
        return self._held != _NOBODY and self._held < self.last_seq and (
            self.last_seq - self._held > WINDOW or self.over_bounds)

    async def room(self) -> None:
        """Until the holding reader is back within `WINDOW` events and the log within its bounds
        (or it let go): the writer's flow control, as a socket's buffer is to a sender. A reader
        that owns its run never loses a frame, and one that stops reading pauses the run and its
        upstream read, holding no more than a window, instead of filling the log to its bounds."""
        while self.lagging:
            if self._room is None:
                self._room = asyncio.Event()
            await self._room.wait()

    async def hand_over(self) -> None:
        """Its first content is in: the reader that holds it takes it first (app/streams/handover.py).
        A log nobody holds (a JSON answer waits for the final) or a gated one goes on at once."""
        seq = self.last_seq
        await hand_over(lambda: self._held >= seq or self._visible is not None)

    def _took(self, seq: int) -> None:
        """The holding reader took everything up to `seq`: what is over the bounds may go."""
        self._held = seq
        while len(self._frames) > 1 and self._first_seq <= seq and self.over_bounds:
            self._evict_oldest()
        if self._room is not None:
            self._room.set()
            self._room = None

    def _let_go(self) -> None:
        self._took(_NOBODY)

    def check_replay(self, after: int) -> None:
        """Raise unless every event after `after` is still retained."""
        if after + 1 < self._first_seq:
            raise ReplayUnavailable(
                f"events {after + 1}..{self._first_seq - 1} of stream {self.info.stream_id} are no longer "
                f"retained; replay from {self._first_seq - 1} or later",
                first_available=self._first_seq,
            )

    def frames_after(self, after: int, max_bytes: int | None = None) -> bytes:
        """The frames numbered above `after`, joined, released or not (what the store persists);
        at most about `max_bytes` (at least one frame)."""
        return self._batch(after, max_bytes, self.last_seq)[0]

    def _batch(self, after: int, max_bytes: int | None, end: int) -> tuple[bytes, int]:
        """Frames above `after` up to `end` and `max_bytes` (at least one), and the last id they hold."""
        frames = self._frames
        if end == after + 1 == self._next_seq - 1 and end >= self._first_seq and frames.__class__ is deque:
            return frames[-1], end  # a follower at the live tail: its one new frame
        start = max(after + 1, self._first_seq)
        if start > end:
            return b"", after
        offset = start - self._first_seq
        if isinstance(frames, PackedFrames):
            data, taken = frames.span(offset, end - self._first_seq + 1, max_bytes,
                                      _BATCH_FRAMES if max_bytes is not None else len(frames))
            return data, start + taken - 1
        if max_bytes is None:
            if end == self.last_seq:
                return b"".join(frames if offset == 0 else itertools.islice(frames, offset, None)), end
            return b"".join(itertools.islice(frames, offset, end - self._first_seq + 1)), end
        batch: list[bytes] = []
        size = 0
        for frame in itertools.islice(frames, offset, min(offset + _BATCH_FRAMES, end - self._first_seq + 1)):
            batch.append(frame)
            size += len(frame)
            if size >= max_bytes:
                break
        return b"".join(batch), start + len(batch) - 1

    def follow(self, after: int, *, hold: bool = False) -> AsyncGenerator[bytes, None]:
        """Replay from `after`, then follow live until the final event. A reader holds one batch
        (about BATCH_BYTES) at a time, never a copy of the whole replay: a reader that stops
        reading stalls on its send with that much, until the send watchdog drops it. The reader
        that owns the run `hold`s its place: nothing it has not taken is dropped (`room`). The batch
        that holds the final is `LastFrames`: its response ends with it."""
        return self._read(after, hold, self._follow_batch)

    def _follow_batch(self, after: int) -> tuple[bytes, int]:
        data, end = self._batch(after, BATCH_BYTES, self.readable_seq)
        return (LastFrames(data), end) if self.final is not None and end >= self.last_seq else (data, end)

    def follow_events(self, after: int = 0, *, hold: bool = False) -> AsyncGenerator[list[StreamEvent], None]:
        """Like `follow`, the events themselves, in batches (a log made with `keep_events`). They are
        kept for the reader that holds the log (a facade translating its run): once it has read the
        final, the log lets go of them, and its frames stay for replay (a finished stream would
        otherwise keep an event object per token for its TTL)."""
        events = self._events
        if events is None:
            raise RuntimeError("this log keeps frames only")
        return self._read(after, hold, lambda cursor: (
            list(itertools.islice(events, cursor + 1 - self._first_seq, self.readable_seq + 1 - self._first_seq)),
            self.readable_seq), read_all=self._drop_events if hold else None)

    def _drop_events(self) -> None:
        self._events = None

    async def _read(self, after: int, hold: bool, take: Callable[[int], tuple[_T, int]], *,
                    read_all: Callable[[], None] | None = None) -> AsyncGenerator[_T, None]:
        """What `take(cursor)` gives (a batch, and the last id in it) for each new stretch of the
        log after `after`, until the final event (then `read_all`, if given)."""
        self.check_replay(after)
        cursor = after
        if hold:
            self._took(cursor)
        try:
            while True:
                if cursor < self.readable_seq:
                    if cursor + 1 < self._first_seq:  # this reader fell behind the retention window
                        raise ReplayUnavailable("reader fell behind the stream's retention window")
                    batch, cursor = take(cursor)
                    if hold:
                        self._took(cursor)
                    if read_all is not None and self.final is not None and cursor >= self.last_seq:
                        read_all()  # now: its reader may stop at the batch with the final (app/api/sse.py)
                    yield batch
                    continue
                if self.final is not None and cursor >= self.last_seq:
                    if read_all is not None:
                        read_all()
                    return
                await self._changed()
        finally:
            if hold:
                self._let_go()

    def _changed(self) -> Awaitable[None]:
        """Wait for the next append: a future of the reader's own, which its cancellation cancels
        alone. (An `asyncio.Event` does the same with a coroutine per wait and a deque of 64 slots
        per log: about 0.7 KiB more per open stream, docs/performance.md.)"""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters
        if waiters is None:
            self._waiters = [waiter]
            return waiter
        if len(waiters) >= _PRUNE_WAITERS:  # readers that left while nothing was appended
            waiters[:] = [w for w in waiters if not w.done()]
        waiters.append(waiter)
        return waiter

    async def wait_final(self) -> FinalEvent:
        while self.final is None or self.readable_seq < self.last_seq:
            await self._changed()
        return self.final

    def leave_budget(self) -> None:
        """Stop counting against the store's byte budget: the store let this log go, while a
        reader may still hold it."""
        self._budget = None

    # -- cancellation -----------------------------------------------------------------------

    def cancel(self) -> bool:
        """End the run writing this log (it appends `final{status: "cancelled"}`); False if it
        had already ended or no run writes it here."""
        if self.final is not None or self.canceller is None:
            return False
        return self.canceller()


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamRecord:
    """What GET /v1/stream/{id}/transcript shows: the stream's identity and its transcript."""

    stream_id: str
    model: str
    provider: str
    created_at: float
    transcript: dict[str, Any]

