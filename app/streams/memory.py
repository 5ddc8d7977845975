"""The in-process stream store (the embedded default).

`MemoryStreamStore` implements the store's parts (app/streams/protocols.py); `RedisStreamStore`
(app/streams/redis/) shares streams between replicas and holds one of these for the streams its
replica runs. Either way the replica running a stream serves its own client from memory.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence

from app.core.errors import RequestError
from app.core.ids import new_stream_id
from app.streams.budget import Budget
from app.streams.errors import CancelOutcome, CursorAhead, FinalDelivered, RunTags, StoreFull
from app.streams.log import Canceller, Sink, StreamInfo, StreamLog, StreamRecord

__all__ = ["MemoryStreamStore", "parse_cursor"]


class MemoryStreamStore:
    """Streams in this process; finished streams expire `ttl` seconds after their final event.

    The bytes of all logs together are capped by `max_total_bytes`: past it finished streams are
    evicted (`on_evict("budget")`), the oldest first and those of the API key whose stream needs
    the room before anyone else's (one key's big runs evict its own replay, not other keys'); while
    running streams alone fill it, new streams are refused (503, retryable). The stream-count cap
    (`max_streams`) evicts the same way."""

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
                     keep_events: bool = False, held: bool = False, run: RunTags | None = None,
                     canceller: Canceller | None = None) -> StreamLog:
        return self.create_local(model=model, provider=provider, owner=owner, keep_events=keep_events, held=held,
                                 canceller=canceller)

    def create_local(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False, sink: Sink | None = None,
                     canceller: Canceller | None = None) -> StreamLog:
        if len(self._logs) >= self._max_streams:
            self.sweep()
        if len(self._logs) >= self._max_streams:
            self._evict_oldest_finished("streams", owner)
        if len(self._logs) >= self._max_streams:
            raise StoreFull("too many open streams; retry later")
        self._relieve(owner)
        if self._budget.used >= self._budget.limit:
            raise StoreFull("the stream store is full; retry later")
        stream_id = new_stream_id()
        log = StreamLog(StreamInfo(stream_id=stream_id, model=model, provider=provider, owner=owner),
                        max_events=self._max_events, max_bytes=self._max_bytes, budget=self._budget,
                        keep_events=keep_events, held=held, sink=sink, canceller=canceller)
        self._logs[stream_id] = log
        return log

    def logs(self) -> list[StreamLog]:
        """Every stream this process holds, running or finished (within its TTL), oldest first."""
        now = time.monotonic()
        return [log for log in self._logs.values() if not self._expired(log, now)]

    def get(self, stream_id: str) -> StreamLog | None:
        log = self._logs.get(stream_id)
        if log is not None and self._expired(log, time.monotonic()):
            self.discard(stream_id)
            return None
        return log

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        log = self.get(stream_id)
        if log is None:
            return None
        if after > log.last_seq:  # no client can have seen an event that does not exist yet
            raise CursorAhead(log.last_seq)
        if log.finished and after == log.last_seq:
            raise FinalDelivered(log.last_seq)
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

    def stage_record(self, stream_id: str, payload: Callable[[], bytes]) -> None:
        return None  # the record has only this process's writer to go to

    async def records_written(self, stream_ids: Sequence[str]) -> None:
        return None

    async def recovering(self) -> bool:
        return False  # a process's own memory is never written back

    def sweep(self) -> int:
        now = time.monotonic()
        expired = [sid for sid, log in self._logs.items() if self._expired(log, now)]
        for sid in expired:
            self.discard(sid)
        return len(expired)

    def _expired(self, log: StreamLog, now: float) -> bool:
        return log.finished_at is not None and now - log.finished_at >= self._ttl

    def discard(self, stream_id: str) -> None:
        """Forget a stream now (expired, evicted, or one whose creation failed further on)."""
        log = self._logs.pop(stream_id)
        self._budget.used -= log.size_bytes
        log.leave_budget()

    def _evict_oldest_finished(self, reason: str, owner: str | None = None) -> bool:
        """Evict one finished stream: `owner`'s oldest if it has one, else the oldest."""
        victim = next((sid for sid, log in self._logs.items() if log.finished and log.info.owner == owner), None)
        if victim is None:
            victim = next((sid for sid, log in self._logs.items() if log.finished), None)
        if victim is None:
            return False
        self.discard(victim)
        self._on_evict(reason)
        return True

    def _relieve(self, owner: str | None = None) -> None:
        """Evict finished streams (`owner`'s first) while the store is over its byte budget."""
        while self._budget.used > self._budget.limit and self._evict_oldest_finished("budget", owner):
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
        if not (value.isascii() and value.isdigit()) or len(value) > 18:  # `²` is a digit to isdigit
            raise RequestError(
                f"Last-Event-ID must be a non-negative integer event id, got {last_event_id[:40]!r}",
                code="invalid_last_event_id", field="Last-Event-ID",
            )
        return int(value)
    return after or 0
