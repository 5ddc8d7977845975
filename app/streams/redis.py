"""The Redis stream store: streams every replica can replay, follow, cancel and outlive.

Chosen by `FOUNDRY_REDIS_URL`. The replica that runs a stream (its *owner*) keeps it in memory
as `MemoryStreamStore` does and serves its own client from there; every appended frame is also
handed to one background writer per process, which appends to Redis in order, many streams per
pipelined round trip (no Redis round trip per event on the live path). The writer's buffer is
bounded (`FOUNDRY_REDIS_MAX_PENDING_BYTES`): past it a stream stops being persisted and, once
Redis answers again, gets an honest `final{error: store_unavailable}` for its followers.

Keys (`{id}` is the stream id, in braces so a stream's keys share a cluster slot):
  foundry:{id}:events      a Redis Stream. One entry per stream per write: field `f` holds the
                           encoded SSE frames of events `s`..<seq> (the entry id is `<seq>-0`,
                           our last event id), `e` marks the entry ending with the final. Trimmed
                           like the memory log (MINID: what memory no longer retains goes),
                           expired `stream_ttl_seconds` after the final.
  foundry:{id}:meta        hash: model, provider, created_at, owner, and done/status at the end.
  foundry:{id}:transcript  the transcript snapshot as JSON (at most once a second, and at the end).
  foundry:lease:<replica>  the owner's lease, renewed every lease/3, expiring after the lease.
  foundry:cancel:<replica> the pub/sub channel a replica listens on for cancels of its streams.

Any replica reads: replay with XRANGE/XREAD, then follow with XREAD BLOCK. A follower that sees
nothing new checks the owner's lease; when it has expired (process killed, node lost) it claims
the stream's end with one Lua script: the first claimer appends `final{error: replica_lost,
retryable: true}`, everyone else reads it. Detection takes at most the lease plus one block
interval (defaults: 10 s + 1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as redis
import structlog
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from app.core.errors import ErrorData
from app.core.events import STOP_REASON_FOR_STATUS, AssistantMessage, FinalEvent, Usage
from app.core.released import Released
from app.streams.errors import CANCELLED_BY_REQUEST, CancelOutcome, CursorAhead, ReplayUnavailable, StoreUnavailable
from app.streams.frames import decode_frames, encode_frame
from app.streams.log import StreamLog, StreamRecord
from app.streams.memory import MemoryStreamStore

__all__ = ["RedisStreamStore", "StoreObserver"]

StoreObserver = Callable[[str, str, float, bool], None]
"""(store, operation, seconds, failed): the metrics hook."""

_FRAMES, _FIRST, _END = b"f", b"s", b"e"
_log = structlog.get_logger("foundry.streams")
_RUNNING_GRACE = 3600  # seconds a running stream's keys outlive its last write (orphans expire)
_SNAPSHOT_EVERY = 1.0  # seconds between transcript snapshots of a running stream
_READ_COUNT = 1000

# The end of a stream whose owner is gone, written once: the first caller appends the final
# (numbered after the last stored event) and marks the stream done; later callers change nothing.
_CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if redis.call('HGET', KEYS[2], 'done') then return 0 end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local seq = 1
if #top > 0 then seq = tonumber(string.match(top[1][1], '^(%d+)')) + 1 end
redis.call('XADD', KEYS[1], seq .. '-0', 'f', 'id: ' .. seq .. '\\n' .. ARGV[1], 's', seq, 'e', '1')
redis.call('HSET', KEYS[2], 'done', '1', 'status', ARGV[3], 'claimed', ARGV[4])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[2]) end
return seq
"""


@dataclass(slots=True)
class _Pending:
    log: StreamLog
    entries: list[tuple[int, bytes, bool]] = field(default_factory=list)


class _Keys:
    __slots__ = ("events", "meta", "transcript")

    def __init__(self, prefix: str, stream_id: str) -> None:
        base = f"{prefix}:{{{stream_id}}}"
        self.events, self.meta, self.transcript = f"{base}:events", f"{base}:meta", f"{base}:transcript"


class RedisStreamStore(MemoryStreamStore):
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        ttl: float,
        max_streams: int,
        max_events: int,
        max_bytes: int,
        lease_seconds: float = 10.0,
        timeout: float = 2.0,
        max_pending_bytes: int = 32 << 20,
        prefix: str = "foundry",
        observer: StoreObserver | None = None,
        max_total_bytes: int | None = None,
        on_evict: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(ttl=ttl, max_streams=max_streams, max_events=max_events, max_bytes=max_bytes,
                         max_total_bytes=max_total_bytes, on_evict=on_evict)
        self.replica = "rep_" + uuid.uuid4().hex[:16]
        self.observer = observer
        self._prefix = prefix
        self._ttl_s = max(1, int(ttl + 0.999))
        self._lease_ms = max(100, int(lease_seconds * 1000))
        self._block_ms = max(50, min(1000, self._lease_ms // 4))
        self._timeout = timeout
        self._max_pending = max_pending_bytes
        # One client (one connection pool) per process; short socket timeouts and no retry loop,
        # so an unreachable Redis fails a request at once instead of hanging it.
        self._redis = redis.from_url(
            url, socket_timeout=max(timeout, self._block_ms / 1000 + timeout), socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0), health_check_interval=0,
        )
        self._claim = self._redis.register_script(_CLAIM)
        self._pending: dict[str, _Pending] = {}
        self._pending_bytes = 0
        self._broken: dict[str, StreamLog] = {}
        self._snapshots: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._writing = False
        self._wrote = asyncio.Event()  # set after each write attempt (for flush())

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._tasks = [loop.create_task(self._write_loop(), name="redis-store-writer"),
                       loop.create_task(self._lease_loop(), name="redis-store-lease"),
                       loop.create_task(self._cancel_loop(), name="redis-store-cancels")]

    async def aclose(self) -> None:
        """Flush what is buffered (briefly), give up the lease, close the client."""
        self._closing = True
        self._wake.set()
        if self._tasks:
            try:
                await asyncio.wait_for(self.flush(), timeout=max(2.0, self._timeout * 2))
            except TimeoutError:
                pass
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            async with asyncio.timeout(self._timeout):
                await self._redis.delete(self._lease_key(self.replica))
        except (RedisError, OSError, TimeoutError):
            pass
        await self._redis.aclose()

    async def flush(self) -> None:
        """Wait until every frame appended so far is written (tests, shutdown)."""
        while self._pending or self._broken or self._writing:
            self._wrote.clear()
            await self._wrote.wait()

    async def ping(self) -> bool:
        try:
            async with self._timed("ping"):
                return bool(await self._redis.ping())
        except (RedisError, OSError, TimeoutError):
            return False

    # -- owner side ---------------------------------------------------------------------------

    async def create(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False) -> StreamLog:
        if self._pending_bytes > self._max_pending // 2:
            raise StoreUnavailable("the redis stream store is not keeping up; retry later")
        log = self.create_local(model=model, provider=provider, owner=owner, keep_events=keep_events, held=held)
        info = log.info
        keys = self._keys(info.stream_id)
        try:
            async with self._answering("create"):
                pipe = self._redis.pipeline(transaction=False)
                meta = {"model": model, "provider": provider, "owner": self.replica,
                        "created_at": repr(info.created_at)}
                if owner is not None:
                    meta["key"] = owner  # the API key that started it ("owner" is the replica)
                pipe.hset(keys.meta, mapping=meta)
                pipe.expire(keys.meta, self._ttl_s + _RUNNING_GRACE)
                pipe.set(self._lease_key(self.replica), "1", px=self._lease_ms)
                await pipe.execute()
        except StoreUnavailable:
            self.discard(info.stream_id)
            raise
        log.sink = self._sink
        return log

    def _sink(self, log: StreamLog, seq: int, frame: bytes, final: bool) -> None:
        """Every frame the owner appends (synchronous, on the live path: a list append)."""
        stream_id = log.info.stream_id
        if stream_id in self._broken:
            return
        if self._pending_bytes + len(frame) > self._max_pending and not final:
            # Redis is away too long: stop persisting this stream rather than buffer without bound.
            dropped = self._pending.pop(stream_id, None)
            if dropped is not None:
                self._pending_bytes -= sum(len(f) for _, f, _ in dropped.entries)
            self._broken[stream_id] = log
            self._observe("buffer_full", 0.0, True)
            return
        pending = self._pending.get(stream_id)
        if pending is None:
            pending = self._pending[stream_id] = _Pending(log)
        pending.entries.append((seq, frame, final))
        self._pending_bytes += len(frame)
        if not self._wake.is_set():
            self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending or self._broken:
                batch, self._pending = self._pending, {}
                self._pending_bytes = 0
                self._writing = True
                try:
                    async with self._timed("write"):
                        await self._flush(batch)
                    await self._end_broken()
                except (RedisError, OSError, TimeoutError):
                    for stream_id, later in self._pending.items():  # keep order: the batch first
                        if stream_id in batch:
                            batch[stream_id].entries.extend(later.entries)
                        else:
                            batch[stream_id] = later
                    self._pending = {sid: p for sid, p in batch.items() if sid not in self._broken}
                    self._pending_bytes = sum(len(f) for p in self._pending.values() for _, f, _ in p.entries)
                    if self._closing:
                        self._pending.clear()
                        self._broken.clear()
                        return
                    await asyncio.sleep(min(1.0, self._timeout))
                finally:
                    self._writing = False
                    self._wrote.set()

    async def _flush(self, batch: dict[str, _Pending]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        now = time.monotonic()
        for stream_id, pending in batch.items():
            keys = self._keys(stream_id)
            log, entries = pending.log, pending.entries
            ended = entries[-1][2]
            snapshot = self._snapshot(log, now, force=ended)
            if snapshot is not None:  # before the final: a reader that saw the final finds the transcript
                pipe.set(keys.transcript, snapshot, ex=self._ttl_s + (0 if ended else _RUNNING_GRACE))
            # One entry for the batch (one command, whatever the number of events), holding only
            # what the memory log still retains; the stream is trimmed to the same range.
            first = log.first_seq
            kept = [(seq, frame) for seq, frame, _ in entries if seq >= first]
            if kept:
                fields = {_FRAMES: b"".join(f for _, f in kept), _FIRST: kept[0][0]}
                if ended:
                    fields[_END] = b"1"
                pipe.xadd(keys.events, fields, id=f"{kept[-1][0]}-0", minid=f"{first}-0", approximate=False)
            if ended:
                assert log.final is not None
                pipe.hset(keys.meta, mapping={"done": "1", "status": log.final.status})
                for key in (keys.events, keys.meta, keys.transcript):
                    pipe.expire(key, self._ttl_s)
                self._snapshots.pop(stream_id, None)
            else:
                pipe.expire(keys.events, self._ttl_s + _RUNNING_GRACE)
        results = await pipe.execute(raise_on_error=False)
        for result in results:
            if isinstance(result, ResponseError) and "equal or smaller" not in str(result):
                # A stream claimed by another replica (our lease lapsed) refuses our late entries.
                self._observe("write_refused", 0.0, True)

    def _snapshot(self, log: StreamLog, now: float, *, force: bool) -> bytes | None:
        transcript = log.info.transcript
        if transcript is None:
            return None
        stream_id = log.info.stream_id
        if not force and now - self._snapshots.get(stream_id, 0.0) < _SNAPSHOT_EVERY:
            return None
        self._snapshots[stream_id] = now
        return orjson.dumps(transcript.snapshot())

    async def _end_broken(self) -> None:
        """Streams whose persistence was given up: an honest end for their followers."""
        for stream_id, log in list(self._broken.items()):
            error: ErrorData = {"code": "store_unavailable", "retryable": True,
                     "message": "the stream store lost events of this stream while it was unreachable"}
            await self._end(stream_id, log.info.model, log.info.provider, error, status="error")
            del self._broken[stream_id]
            self._snapshots.pop(stream_id, None)

    async def _lease_loop(self) -> None:
        key = self._lease_key(self.replica)
        while True:
            try:
                async with self._timed("lease"):
                    await self._redis.set(key, "1", px=self._lease_ms)
            except (RedisError, OSError, TimeoutError):
                pass
            await asyncio.sleep(self._lease_ms / 3000)

    async def _cancel_loop(self) -> None:
        channel = f"{self._prefix}:cancel:{self.replica}"
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(channel)
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message is not None and message.get("type") == "message":
                            log = self.get(message["data"].decode())
                            if log is not None:
                                log.cancel()
            except (RedisError, OSError, TimeoutError):
                await asyncio.sleep(min(1.0, self._timeout))

    # -- any replica --------------------------------------------------------------------------

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        if self.get(stream_id) is not None:  # ours: from memory
            return await super().open(stream_id, after)
        keys = self._keys(stream_id)
        async with self._answering("read"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hget(keys.meta, "owner")
            pipe.hget(keys.meta, "done")
            pipe.xrange(keys.events, count=1)
            pipe.xrevrange(keys.events, count=1)
            owner, done, first, top = await pipe.execute()
        if owner is None:
            return None
        last_seq = _seq(top[0][0]) if top else 0
        if done is not None and after > last_seq:
            # Only a finished stream: a running one's owner may be a write ahead of Redis.
            raise CursorAhead(last_seq)
        if first:
            first_seq = int(first[0][1][_FIRST])
            if after + 1 < first_seq:
                raise ReplayUnavailable(
                    f"events {after + 1}..{first_seq - 1} of stream {stream_id} are no longer retained; "
                    f"replay from {first_seq - 1} or later", first_available=first_seq)
        return self._follow(stream_id, keys, after)

    async def _follow(self, stream_id: str, keys: _Keys, after: int) -> AsyncIterator[bytes]:
        """Replay then follow from Redis until the final (or the stream expires)."""
        cursor = after
        failing_since: float | None = None
        while True:
            try:
                reply = await self._redis.xread({keys.events: f"{cursor}-0"}, count=_READ_COUNT,
                                                block=self._block_ms)
                if not reply:
                    if await self._idle(stream_id, keys):
                        return
                    continue
                failing_since = None
            except (RedisError, OSError, TimeoutError):
                self._observe("read", 0.0, True)
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since < self._lease_ms / 1000:
                    await asyncio.sleep(min(0.5, self._timeout))
                    continue
                # Redis stays away: end this reader honestly rather than hang.
                error: ErrorData = {"code": "store_unavailable", "retryable": True,
                         "message": "the stream store became unreachable; resume from the last event id later"}
                yield _final_frame(cursor + 1, "", "", error, "error")
                return
            frames, cursor, done = _frames_after(reply[0][1], cursor)
            if frames:
                yield b"".join(frames)
            if done:
                return

    async def _idle(self, stream_id: str, keys: _Keys) -> bool:
        """Nothing new for a block interval: True when the stream ended (or expired) without
        more to read; claims the end when its owner's lease is gone."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hmget(keys.meta, "done", "owner", "model", "provider")
        done, owner, model, provider = (await pipe.execute())[0]
        if done is not None or owner is None:
            return True  # ended (our cursor is at or past its final) or expired
        if await self._redis.exists(self._lease_key(owner.decode())):
            return False
        lost: ErrorData = {"code": "replica_lost", "retryable": True,
                "message": "the replica running this stream stopped; retry the request"}
        message = await self._released(keys, provider.decode())
        await self._end(stream_id, model.decode(), provider.decode(), lost, status="error", message=message)
        return False  # the next read returns the final (ours or another claimer's)

    async def _released(self, keys: _Keys, provider: str) -> AssistantMessage:
        """What a stream whose owner is gone released, rebuilt from its stored (retained) events:
        the message of the final that ends it, so its readers keep an honest partial answer."""
        entries = await self._redis.xrange(keys.events)
        if not entries:
            return AssistantMessage()
        try:
            frames, _, _ = _frames_after(entries, int(entries[0][1][_FIRST]) - 1)
        except ReplayUnavailable:  # a hole in the stored events: no message rather than a wrong one
            return AssistantMessage()
        return Released.of(decode_frames(b"".join(frames)), provider=provider).message()

    async def _end(self, stream_id: str, model: str, provider: str, error: ErrorData, *, status: str,
                   message: AssistantMessage | None = None) -> int:
        keys = self._keys(stream_id)
        body = _final_frame(0, model, provider, error, status, message).split(b"\n", 1)[1]
        async with self._timed("claim"):
            return int(await self._claim(keys=[keys.events, keys.meta, keys.transcript],
                                         args=[body, self._ttl_s, status, self.replica]))

    async def key_owner(self, stream_id: str) -> tuple[bool, str | None]:
        log = self.get(stream_id)
        if log is not None:
            return True, log.info.owner
        async with self._answering("read"):
            model, key = await self._redis.hmget(self._keys(stream_id).meta, "model", "key")
        return model is not None, key.decode() if key is not None else None

    async def transcript(self, stream_id: str) -> StreamRecord | None:
        log = self.get(stream_id)
        if log is not None:
            return await super().transcript(stream_id)
        keys = self._keys(stream_id)
        async with self._answering("read"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hmget(keys.meta, "model", "provider", "created_at")
            pipe.get(keys.transcript)
            (model, provider, created_at), snapshot = await pipe.execute()
        if model is None or snapshot is None:
            return None
        return StreamRecord(stream_id=stream_id, model=model.decode(), provider=provider.decode(),
                            created_at=float(created_at), transcript=orjson.loads(snapshot))

    async def cancel(self, stream_id: str) -> CancelOutcome | None:
        log = self.get(stream_id)
        if log is not None:
            return await super().cancel(stream_id)
        keys = self._keys(stream_id)
        async with self._answering("cancel"):
            done, owner, model, provider = await self._redis.hmget(keys.meta, "done", "owner", "model",
                                                                   "provider")
            if owner is None:
                return None
            if done is not None:
                return "finished"
            heard = await self._redis.publish(f"{self._prefix}:cancel:{owner.decode()}", stream_id)
            if heard or await self._redis.exists(self._lease_key(owner.decode())):
                return "cancelling"
            # Nobody runs it any more: end it here, once, with what it released.
            message = await self._released(keys, provider.decode())
            claimed = await self._end(stream_id, model.decode(), provider.decode(), CANCELLED_BY_REQUEST,
                                      status="cancelled", message=message)
            return "cancelled" if claimed > 0 else "finished"

    # -- helpers ------------------------------------------------------------------------------

    def _keys(self, stream_id: str) -> _Keys:
        return _Keys(self._prefix, stream_id)

    def _lease_key(self, replica: str) -> str:
        return f"{self._prefix}:lease:{replica}"

    def _observe(self, op: str, seconds: float, failed: bool, error: BaseException | None = None) -> None:
        if self.observer is not None:
            self.observer(self.name, op, seconds, failed)
        if error is not None:  # the class only: a message could carry the URL (and its password)
            _log.warning("store_error", store=self.name, op=op, error=type(error).__name__,
                         seconds=round(seconds, 4))

    def _timed(self, op: str) -> _Timed:
        return _Timed(self, op)

    @contextlib.asynccontextmanager
    async def _answering(self, op: str) -> AsyncIterator[None]:
        """A store operation a request waits on: timed, and a Redis that cannot answer is
        StoreUnavailable (503, retryable) for the caller, never a hang or a 500."""
        try:
            async with self._timed(op):
                yield
        except (RedisError, OSError, TimeoutError):
            raise _unreachable() from None


class _Timed:
    """Times one store operation (bounded by the store's timeout) and reports it to the observer."""

    __slots__ = ("store", "op", "started", "timeout")

    def __init__(self, store: RedisStreamStore, op: str) -> None:
        self.store, self.op = store, op

    async def __aenter__(self) -> None:
        self.started = time.perf_counter()
        self.timeout = asyncio.timeout(self.store._timeout * 2)
        await self.timeout.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.timeout.__aexit__(exc_type, exc, tb)
        finally:
            self.store._observe(self.op, time.perf_counter() - self.started, exc_type is not None, exc)


def _unreachable() -> StoreUnavailable:
    return StoreUnavailable("the redis stream store is unreachable; retry later")


def _skip_frames(data: bytes, n: int) -> bytes:
    """Drop the first `n` SSE frames (each ends with a blank line; JSON data holds no raw newline)."""
    pos = 0
    for _ in range(n):
        pos = data.index(b"\n\n", pos) + 2
    return data[pos:]


def _frames_after(entries: list[tuple[bytes, dict[bytes, bytes]]], cursor: int) -> tuple[list[bytes], int, bool]:
    """The frames of stream entries numbered after `cursor` (an entry that overlaps what was read,
    a retried write, is cut), the new cursor, and whether the final was among them."""
    frames: list[bytes] = []
    for entry_id, fields in entries:
        last, first = _seq(entry_id), int(fields[_FIRST])
        if last <= cursor:
            continue
        if first > cursor + 1:
            raise ReplayUnavailable("reader fell behind the stream's retention window")
        data = fields[_FRAMES]
        if first <= cursor:  # the entry starts before our cursor: skip what was delivered
            data = _skip_frames(data, cursor - first + 1)
        frames.append(data)
        cursor = last
        if _END in fields:
            return frames, cursor, True
    return frames, cursor, False


def _seq(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])


def _final_frame(seq: int, model: str, provider: str, error: ErrorData, status: str,
                 message: AssistantMessage | None = None) -> bytes:
    """A final written for a stream whose owner cannot: the provider's usage report never reached
    the writer, so the output counts are unknown (null), not 0."""
    final = FinalEvent(status=status, message=message or AssistantMessage(),  # type: ignore[arg-type]
                       usage=Usage(output_unknown=True), stop_reason=STOP_REASON_FOR_STATUS[status], model=model,
                       provider=provider, error=error)
    return encode_frame(seq, final)
