"""Stream logs: one writer, any number of readers, replay from any retained sequence number.

A log stores each event once, already encoded as its SSE frame, so fan-out costs no encoding
per reader and a slow reader holds nothing: readers keep only a cursor into the shared log.
Each log is bounded (events and bytes; the oldest frames go first) and the store is bounded
(streams; finished ones expire after a TTL). `StreamStore` is the interface a distributed store
(Redis streams, ...) implements later; `MemoryStreamStore` is the in-process one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from app.core import safejson
from app.core.errors import GatewayError, RequestError
from app.core.events import FinalEvent, ReasoningEvent, StreamEvent, TokenEvent
from app.core.transcript import Transcript

BATCH_BYTES = 64 * 1024
"""Most bytes a reader takes from the log per send (one frame at least)."""
_BATCH_FRAMES = 1024

__all__ = ["BATCH_BYTES", "MemoryStreamStore", "ReplayUnavailable", "StreamLog", "StreamStore", "encode_frame"]


class ReplayUnavailable(GatewayError):
    status = 410
    code = "replay_unavailable"


class StoreFull(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


def encode_frame(seq: int, event: StreamEvent) -> bytes:
    """One SSE frame: `id`, `event`, one compact JSON `data` line, blank line.

    Text deltas, most of every stream, skip the payload dict: only the content goes through
    JSON (the same bytes as `safejson.dumps(event.data())`; tests/test_stream_log.py)."""
    kind = type(event)
    if kind is TokenEvent:
        return _TOKEN_FRAME % (seq, event.index, safejson.dumps(event.content))  # type: ignore[union-attr]
    if kind is ReasoningEvent:
        return _REASONING_FRAME % (seq, event.index, safejson.dumps(event.content))  # type: ignore[union-attr]
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event.type.encode(), safejson.dumps(event.data()))


_TOKEN_FRAME = b'id: %d\nevent: token\ndata: {"index":%d,"content":%s}\n\n'
_REASONING_FRAME = b'id: %d\nevent: reasoning\ndata: {"index":%d,"content":%s}\n\n'


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

    __slots__ = ("info", "_frames", "_first_seq", "_next_seq", "_bytes", "_max_events", "_max_bytes",
                 "_waiter", "final", "finished_at", "_budget")

    def __init__(self, info: StreamInfo, *, max_events: int, max_bytes: int, budget: Budget | None = None) -> None:
        self.info = info
        self._budget = budget
        self._frames: deque[bytes] = deque()
        self._first_seq = 1
        self._next_seq = 1
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._waiter: asyncio.Event | None = None
        self.final: FinalEvent | None = None
        self.finished_at: float | None = None

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def finished(self) -> bool:
        return self.final is not None

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def append(self, event: StreamEvent) -> bytes:
        """Number, encode and store one event; wake the readers. Returns the frame."""
        if self.final is not None:
            raise RuntimeError("stream already ended with its final event")
        frame = encode_frame(self._next_seq, event)
        self._next_seq += 1
        self._frames.append(frame)
        before = self._bytes
        self._bytes += len(frame)
        while len(self._frames) > 1 and (len(self._frames) > self._max_events or self._bytes > self._max_bytes):
            self._bytes -= len(self._frames.popleft())
            self._first_seq += 1
        if isinstance(event, FinalEvent):
            self.final = event
            self.finished_at = time.monotonic()
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
        if self._budget is not None:
            self._budget.grow(self._bytes - before)
        return frame

    def check_replay(self, after: int) -> None:
        """Raise unless every event after `after` is still retained."""
        if after + 1 < self._first_seq:
            raise ReplayUnavailable(
                f"events {after + 1}..{self._first_seq - 1} of stream {self.info.stream_id} are no longer "
                f"retained; replay from {self._first_seq - 1} or later",
                first_available=self._first_seq,
            )

    def frames_after(self, after: int, max_bytes: int | None = None) -> bytes:
        """The frames numbered above `after`, joined; at most about `max_bytes` (at least one frame)."""
        return self._batch(after, max_bytes)[0]

    def _batch(self, after: int, max_bytes: int | None) -> tuple[bytes, int]:
        """Frames above `after` up to `max_bytes` (at least one), and the last id they hold."""
        start = max(after + 1, self._first_seq)
        if start >= self._next_seq:
            return b"", after
        offset = start - self._first_seq
        if max_bytes is None:
            frames = self._frames if offset == 0 else itertools.islice(self._frames, offset, None)
            return b"".join(frames), self.last_seq
        batch: list[bytes] = []
        size = 0
        for frame in itertools.islice(self._frames, offset, offset + _BATCH_FRAMES):
            batch.append(frame)
            size += len(frame)
            if size >= max_bytes:
                break
        return b"".join(batch), start + len(batch) - 1

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        """Replay from `after`, then follow live until the final event. A reader holds one batch
        (about BATCH_BYTES) at a time, never a copy of the whole replay: a reader that stops
        reading stalls on its send with that much, until the send watchdog drops it."""
        self.check_replay(after)
        cursor = after
        while True:
            if cursor < self.last_seq:
                if cursor + 1 < self._first_seq:  # this reader fell behind the retention window
                    raise ReplayUnavailable("reader fell behind the stream's retention window")
                chunk, cursor = self._batch(cursor, BATCH_BYTES)
                yield chunk
                continue
            if self.final is not None:
                return
            if self._waiter is None:
                self._waiter = asyncio.Event()
            await self._waiter.wait()


class Budget:
    """The bytes retained by all the logs of a store, against one limit; `relieve` (the store's
    eviction of finished streams) runs when a log's growth takes the total past it."""

    __slots__ = ("limit", "used", "relieve")

    def __init__(self, limit: int, relieve: Callable[[], None]) -> None:
        self.limit = limit
        self.used = 0
        self.relieve = relieve

    def grow(self, delta: int) -> None:
        self.used += delta
        if self.used > self.limit:
            self.relieve()


class StreamStore(Protocol):
    def create(self, *, model: str, provider: str, owner: str | None = None) -> StreamLog: ...

    def get(self, stream_id: str) -> StreamLog | None: ...

    def sweep(self) -> int: ...

    def ping(self) -> bool: ...


class MemoryStreamStore:
    """Streams in this process; finished streams expire `ttl` seconds after their final event.

    The bytes of all logs together are capped by `max_total_bytes`: past it the oldest finished
    streams are evicted first (`on_evict("budget")`), and while running streams alone fill it,
    new streams are refused (503, retryable)."""

    def __init__(self, *, ttl: float, max_streams: int, max_events: int, max_bytes: int,
                 max_total_bytes: int | None = None, on_evict: Callable[[str], None] | None = None) -> None:
        self._ttl = ttl
        self._max_streams = max_streams
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._logs: OrderedDict[str, StreamLog] = OrderedDict()
        self._budget = Budget(max_total_bytes if max_total_bytes is not None else 1 << 62, self._relieve)
        self._on_evict = on_evict or (lambda reason: None)

    @property
    def total_bytes(self) -> int:
        return self._budget.used

    def __len__(self) -> int:
        return len(self._logs)

    def ping(self) -> bool:
        return True

    def create(self, *, model: str, provider: str, owner: str | None = None) -> StreamLog:
        if len(self._logs) >= self._max_streams:
            self.sweep()
        if len(self._logs) >= self._max_streams:
            self._evict_oldest_finished("streams")
        if len(self._logs) >= self._max_streams:
            raise StoreFull("too many open streams; retry later")
        self._relieve()
        if self._budget.used >= self._budget.limit:
            raise StoreFull("the stream store is full; retry later")
        stream_id = "str_" + uuid.uuid4().hex
        log = StreamLog(StreamInfo(stream_id=stream_id, model=model, provider=provider, owner=owner),
                        max_events=self._max_events, max_bytes=self._max_bytes, budget=self._budget)
        self._logs[stream_id] = log
        return log

    def get(self, stream_id: str) -> StreamLog | None:
        log = self._logs.get(stream_id)
        if log is not None and self._expired(log, time.monotonic()):
            self._drop(stream_id)
            return None
        return log

    def sweep(self) -> int:
        now = time.monotonic()
        expired = [sid for sid, log in self._logs.items() if self._expired(log, now)]
        for sid in expired:
            self._drop(sid)
        return len(expired)

    def _expired(self, log: StreamLog, now: float) -> bool:
        return log.finished_at is not None and now - log.finished_at >= self._ttl

    def _drop(self, stream_id: str) -> None:
        log = self._logs.pop(stream_id)
        self._budget.used -= log.size_bytes
        log._budget = None  # a reader may still hold it: it no longer counts

    def _evict_oldest_finished(self, reason: str) -> bool:
        for sid, log in self._logs.items():
            if log.finished:
                self._drop(sid)
                self._on_evict(reason)
                return True
        return False

    def _relieve(self) -> None:
        """Evict the oldest finished streams while the store is over its byte budget."""
        while self._budget.used > self._budget.limit and self._evict_oldest_finished("budget"):
            pass


def parse_cursor(last_event_id: str | None, after: int | None) -> int:
    """The replay cursor from `Last-Event-ID` (header) or `?after=N`; the header wins."""
    if last_event_id is not None:
        value = last_event_id.strip()
        if not value.isdigit() or len(value) > 18:
            raise RequestError(
                f"Last-Event-ID must be a non-negative integer event id, got {last_event_id[:40]!r}",
                code="invalid_last_event_id", field="Last-Event-ID",
            )
        return int(value)
    return after or 0
