"""Stream logs: one writer, any number of readers, replay from any retained sequence number.

A log stores each event once, already encoded as its SSE frame, so fan-out costs no encoding
per reader and a slow reader holds nothing: readers keep only a cursor into the shared log.
Each log is bounded (events and bytes; the oldest frames go first) and the store is bounded
(streams; finished ones expire after a TTL).

`StreamStore` is the interface the API and the pipeline use (async: a store may be remote):
`create` a log for a new run, `open` a reader (replay then follow), `transcript`, `cancel`.
`MemoryStreamStore` is the in-process store (the embedded default); `RedisStreamStore`
(app/streams/redis.py) shares streams between replicas. Either way the replica running a stream
appends to its in-memory `StreamLog` and serves its own client from it; a store that persists
elsewhere hooks `StreamLog.sink` and writes in the background, never on the live path.

Cancellation: the run writing a log registers its `canceller`; `cancel()` (the API's cancel, on
this replica or relayed from another) calls it, and the run's task ends where it waits with
`final{status: "cancelled"}`. Readers never drive the run: they read its log.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from app.core import safejson
from app.core.errors import ErrorData, GatewayError, RequestError
from app.core.events import FinalEvent, ReasoningEvent, StreamEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.transcript import Transcript

BATCH_BYTES = 64 * 1024
"""Most bytes a reader takes from the log per send (one frame at least)."""
_BATCH_FRAMES = 1024
_NOBODY = 1 << 62
"""No reader holds the log: it keeps to its bounds."""

__all__ = ["BATCH_BYTES", "CANCELLED_BY_REQUEST", "CancelOutcome", "CursorAhead", "MemoryStreamStore",
           "ReplayUnavailable", "StoreFull", "StoreUnavailable", "StreamLog", "StreamRecord", "StreamStore",
           "decode_frames", "encode_frame"]


class ReplayUnavailable(GatewayError):
    status = 410
    code = "replay_unavailable"


class StoreFull(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


class CursorAhead(GatewayError):
    """A replay cursor past the stream's last event (the API answers 400 naming the field)."""

    status = 400
    code = "cursor_ahead"

    def __init__(self, last_seq: int) -> None:
        super().__init__(f"the cursor is past the stream's last event ({last_seq})")
        self.last_seq = last_seq


class StoreUnavailable(GatewayError):
    """The stream store cannot take new streams (unreachable, or its write buffer is full)."""

    status = 503
    code = "store_unavailable"
    retryable = True


CANCELLED_BY_REQUEST: ErrorData = {"code": "cancelled", "retryable": False,
                                   "message": "the run was cancelled through the API (POST /v1/stream/{id}/cancel)"}
"""The error of the final of a run ended by `cancel()` (the API's cancel, on any replica)."""

CancelOutcome = Literal["cancelled", "cancelling", "finished"]
"""`cancelled`: the run ended here; `cancelling`: asked of the replica running it; `finished`:
it had already ended (a no-op)."""

Sink = Callable[["StreamLog", int, bytes, bool], None]
"""Told of every appended frame (log, seq, frame, is_final): a persisting store's hook."""


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


def decode_frames(data: bytes) -> list[StreamEvent]:
    """The content events (token, reasoning, tool_call, tool_result) of frames made by
    `encode_frame`, back as events; `start`, `final` and comments are skipped. For a store that
    rebuilds what a stream released from its stored frames (app/core/released.py)."""
    events: list[StreamEvent] = []
    for frame in data.split(b"\n\n"):
        lines = frame.split(b"\n")
        if len(lines) != 3 or not lines[1].startswith(b"event: "):
            continue
        decode = _DECODE.get(lines[1][7:])
        if decode is not None:
            events.append(decode(orjson.loads(lines[2][6:])))
    return events


_DECODE: dict[bytes, Callable[[Any], StreamEvent]] = {
    b"token": lambda d: TokenEvent(index=d["index"], content=d["content"]),
    b"reasoning": lambda d: ReasoningEvent(index=d["index"], content=d["content"]),
    b"tool_call": lambda d: ToolCallEvent(id=d["id"], name=d["name"], index=d["index"],
                                          args_fragment=d["args_fragment"], is_final=d["is_final"],
                                          arguments=d.get("arguments"), server=d.get("server", False)),
    b"tool_result": lambda d: ToolResultEvent(tool_call_id=d["tool_call_id"], name=d["name"], content=d["content"],
                                              is_error=d["is_error"]),
}


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
                 "_waiter", "final", "finished_at", "_budget", "sink", "canceller", "_held", "_room")

    def __init__(self, info: StreamInfo, *, max_events: int, max_bytes: int, budget: Budget | None = None,
                 keep_events: bool = False, held: bool = False) -> None:
        self.info = info
        self._budget = budget
        self._frames: deque[bytes] = deque()
        self._events: deque[StreamEvent] | None = deque() if keep_events else None
        """The events beside their frames, for a reader that translates them (a facade); same bounds."""
        self._first_seq = 1
        self._next_seq = 1
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._waiter: asyncio.Event | None = None
        self.final: FinalEvent | None = None
        self.finished_at: float | None = None
        self.sink: Sink | None = None
        self.canceller: Callable[[], bool] | None = None
        """Set by the run writing this log: ends it (False when it had already ended)."""
        self._held = 0 if held else _NOBODY
        """The last id the holding reader took (`follow(..., hold=True)`): frames after it are kept.
        A log made `held` is held from its first frame, before that reader starts."""
        self._room: asyncio.Event | None = None

    @property
    def first_seq(self) -> int:
        """The oldest retained event's id."""
        return self._first_seq

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
        events = self._events
        if events is not None:
            events.append(event)
        self._bytes += len(frame)
        if self._budget is not None:
            self._budget.grow(len(frame))
        while len(self._frames) > 1 and self._first_seq <= self._held and self.over_bounds:
            self._evict_oldest()
        final = isinstance(event, FinalEvent)
        if final:
            self.final = event  # type: ignore[assignment]
            self.finished_at = time.monotonic()
        if self.sink is not None:
            self.sink(self, self._next_seq - 1, frame, final)
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
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

    async def room(self) -> None:
        """Until the holding reader has caught up to within the log's bounds (or let go): the
        writer's flow control, so a reader that owns its run never loses a frame and a slow one
        slows the run (and its upstream) instead of growing the log."""
        while self.over_bounds and self._held != _NOBODY:
            if self._room is None:
                self._room = asyncio.Event()
            await self._room.wait()

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

    async def follow(self, after: int, *, hold: bool = False) -> AsyncIterator[bytes]:
        """Replay from `after`, then follow live until the final event. A reader holds one batch
        (about BATCH_BYTES) at a time, never a copy of the whole replay: a reader that stops
        reading stalls on its send with that much, until the send watchdog drops it. The reader
        that owns the run `hold`s its place: nothing it has not taken is dropped (`room`)."""
        self.check_replay(after)
        cursor = after
        if hold:
            self._took(cursor)
        try:
            while True:
                if cursor < self.last_seq:
                    if cursor + 1 < self._first_seq:  # this reader fell behind the retention window
                        raise ReplayUnavailable("reader fell behind the stream's retention window")
                    chunk, cursor = self._batch(cursor, BATCH_BYTES)
                    if hold:
                        self._took(cursor)
                    yield chunk
                    continue
                if self.final is not None:
                    return
                await self._changed()
        finally:
            if hold:
                self._let_go()

    async def follow_events(self, after: int = 0, *, hold: bool = False) -> AsyncIterator[list[StreamEvent]]:
        """Like `follow`, the events themselves, in batches (a log made with `keep_events`)."""
        events = self._events
        if events is None:
            raise RuntimeError("this log keeps frames only")
        self.check_replay(after)
        cursor = after
        if hold:
            self._took(cursor)
        try:
            while True:
                if cursor < self.last_seq:
                    if cursor + 1 < self._first_seq:
                        raise ReplayUnavailable("reader fell behind the stream's retention window")
                    batch = list(itertools.islice(events, cursor + 1 - self._first_seq, None))
                    cursor = self.last_seq
                    if hold:
                        self._took(cursor)
                    yield batch
                    continue
                if self.final is not None:
                    return
                await self._changed()
        finally:
            if hold:
                self._let_go()

    def _changed(self) -> Awaitable[bool]:
        """Wait for the next append (any number of readers share one waiter)."""
        if self._waiter is None:
            self._waiter = asyncio.Event()
        return self._waiter.wait()

    async def wait_final(self) -> FinalEvent:
        while self.final is None:
            await self._changed()
        return self.final

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
    name: str
    """`memory` or `redis`: named by /readyz and the metrics."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def create(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False) -> StreamLog:
        """A log for a new run on this replica, owned by the API key `owner` (None in open mode),
        keeping its events beside its frames when a reader translates them (`keep_events`), held
        for the reader that owns the run (`held`, `StreamLog.room`); StoreFull / StoreUnavailable
        (503) when it cannot."""

    def get(self, stream_id: str) -> StreamLog | None:
        """The log of a stream held by this process (None elsewhere or unknown)."""

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        """A reader: frames after `after`, then live ones until the final; None for an unknown id.
        Raises ReplayUnavailable (410) when events after `after` are no longer retained, CursorAhead
        when `after` is past the last event."""

    async def transcript(self, stream_id: str) -> StreamRecord | None: ...

    async def key_owner(self, stream_id: str) -> tuple[bool, str | None]:
        """Whether the stream exists (here or on another replica) and the API key that owns it."""

    async def cancel(self, stream_id: str) -> CancelOutcome | None:
        """End a running stream wherever it runs; None for an unknown id."""

    def sweep(self) -> int: ...

    async def ping(self) -> bool: ...


class MemoryStreamStore:
    """Streams in this process; finished streams expire `ttl` seconds after their final event.

    The bytes of all logs together are capped by `max_total_bytes`: past it the oldest finished
    streams are evicted first (`on_evict("budget")`), and while running streams alone fill it,
    new streams are refused (503, retryable)."""

    name = "memory"

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

    async def ping(self) -> bool:
        return True

    async def key_owner(self, stream_id: str) -> tuple[bool, str | None]:
        log = self.get(stream_id)
        return (False, None) if log is None else (True, log.info.owner)

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def create(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False) -> StreamLog:
        return self.create_local(model=model, provider=provider, owner=owner, keep_events=keep_events, held=held)

    def create_local(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False) -> StreamLog:
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
                        max_events=self._max_events, max_bytes=self._max_bytes, budget=self._budget,
                        keep_events=keep_events, held=held)
        self._logs[stream_id] = log
        return log

    def get(self, stream_id: str) -> StreamLog | None:
        log = self._logs.get(stream_id)
        if log is not None and self._expired(log, time.monotonic()):
            self._drop(stream_id)
            return None
        return log

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        log = self.get(stream_id)
        if log is None:
            return None
        if after > log.last_seq:  # no client can have seen an event that does not exist yet
            raise CursorAhead(log.last_seq)
        log.check_replay(after)
        return log.follow(after)

    async def transcript(self, stream_id: str) -> StreamRecord | None:
        log = self.get(stream_id)
        return _record_of(log) if log is not None else None

    async def cancel(self, stream_id: str) -> CancelOutcome | None:
        log = self.get(stream_id)
        if log is None:
            return None
        return "cancelled" if log.cancel() else "finished"

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


def _record_of(log: StreamLog) -> StreamRecord | None:
    info = log.info
    if info.transcript is None:
        return None
    return StreamRecord(stream_id=info.stream_id, model=info.model, provider=info.provider,
                        created_at=info.created_at, transcript=dict(info.transcript.snapshot()))


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
