"""The owner half of the Redis stream store: what the replica running a stream writes.

The owner keeps its streams in memory (a `MemoryStreamStore`) and serves its own clients from there; every
appended frame is also handed to one background writer per process, which appends to Redis in order, many
streams per pipelined round trip (no Redis round trip per event on the live path). The writer's buffer is
bounded (`FOUNDRY_REDIS_MAX_PENDING_BYTES`): past it a stream stops being persisted and, once Redis answers
again, gets an honest `final{error: store_unavailable}` for its followers. The owner also renews this
replica's lease and listens for what other replicas ask of its streams (cancels, checks of a lost final).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import structlog
from redis.exceptions import ResponseError

from app.core.errors import ErrorData
from app.streams.errors import RunTags, StoreUnavailable
from app.streams.log import Canceller, StreamLog
from app.streams.memory import MemoryStreamStore
from app.streams.redis.link import CHECK, END, FIRST, FRAMES, REDIS_ERRORS, RedisLink, stop
from app.streams.redis.outbox import RedisOutbox
from app.streams.redis.pending import Pending

__all__ = ["Pending", "RedisOwner"]

_log = structlog.get_logger("foundry.streams")
_RUNNING_GRACE = 3600  # seconds a running stream's keys outlive its last write (orphans expire)
_SNAPSHOT_EVERY = 1.0  # seconds between transcript snapshots of a running stream
_EXPIRY_EVERY = 60.0  # seconds between pushes of a running stream's events expiry (one per write: half the commands)
_STORE_LOST: ErrorData = {"code": "store_unavailable", "retryable": True,
                          "message": "the stream store lost events of this stream while it was unreachable"}


class RedisOwner:
    """Creates this replica's streams and writes them to Redis behind the live path."""

    def __init__(self, link: RedisLink, local: MemoryStreamStore, outbox: RedisOutbox, *,
                 max_pending_bytes: int) -> None:
        self._link = link
        self._outbox = outbox
        self._local = local
        self._redis = link.client
        self._max_pending = max_pending_bytes
        self._pending: dict[str, Pending] = {}
        self._pending_bytes = 0
        self._broken: dict[str, StreamLog] = {}
        self._snapshots: dict[str, float] = {}
        self._expiries: dict[str, float] = {}  # when each running stream's events expiry was last pushed out
        self._metas: dict[str, dict[str, str]] = {}  # each running stream's meta, to write it back
        self._restore = False  # Redis failed: once it answers, check what it lost (restart, no disk)
        self._lease_until = 0.0  # monotonic time until which this replica's lease is surely held
        self._ungated: list[StreamLog] = []  # logs released from memory while Redis fails (`_ride_out`)
        self._regate: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._writing = False
        self._wrote = asyncio.Event()  # set after each write attempt (for flush())

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._tasks = [loop.create_task(self._write_loop(), name="redis-store-writer"),
                       loop.create_task(self._lease_loop(), name="redis-store-lease"),
                       loop.create_task(self._cancel_loop(), name="redis-store-cancels")]

    async def aclose(self) -> None:
        """Flush what is buffered (briefly) and stop the background tasks."""
        self._closing = True
        self._wake.set()
        if not self._tasks:
            return
        try:
            await asyncio.wait_for(self.flush(), timeout=max(2.0, self._link.timeout * 2))
        except TimeoutError:
            pass
        await stop(self._tasks)

    async def flush(self) -> None:
        """Wait until every frame appended so far is written (tests, shutdown)."""
        while self._pending or self._broken or self._writing:
            self._wrote.clear()
            await self._wrote.wait()

    async def _asked(self, message: str) -> None:
        """A cancel (a stream id), or a follower's check (`CHECK` + id) of a stream quiet for a lease: a finished one
        whose final Redis lost (with a master that died before its replica had it) is written back from memory."""
        if (log := self._local.get(stream_id := message.removeprefix(CHECK))) is None:
            return
        if log.final is None or stream_id in self._metas:  # running, or its final not written yet
            if message == stream_id:
                log.cancel()
            return
        if await self._redis.hget(self._link.keys(stream_id).meta, "done") is None:
            pipe = self._redis.pipeline(transaction=False)
            self._restore_one(pipe, log)
            await pipe.execute()

    # -- streams ------------------------------------------------------------------------------

    async def create(self, *, model: str, provider: str, owner: str | None, keep_events: bool,
                     held: bool, run: RunTags | None = None, canceller: Canceller | None = None) -> StreamLog:
        """A log in memory, its meta and this replica's lease in Redis, and the sink that persists it."""
        if self._pending_bytes > self._max_pending // 2:
            raise StoreUnavailable("the redis stream store is not keeping up; retry later")
        log = self._local.create_local(model=model, provider=provider, owner=owner, keep_events=keep_events,
                                       held=held, sink=self.sink, canceller=canceller)
        log.gate()  # its readers here take a frame once Redis holds it (see `write`)
        info = log.info
        keys = self._link.keys(info.stream_id)
        try:
            async with self._link.answering("create"):
                pipe = self._redis.pipeline(transaction=False)
                meta = {"model": model, "provider": provider, "owner": self._link.replica,
                        "created_at": repr(info.created_at)}
                if owner is not None:
                    meta["key"] = owner  # the API key that started it ("owner" is the replica)
                if run is not None and run.request_id is not None:
                    meta["request"] = run.request_id
                if run is not None and run.slot is not None:
                    meta["slot"] = run.slot  # the key's concurrency slot: a claimer frees it
                self._metas[info.stream_id] = meta
                pipe.hset(keys.meta, mapping=meta)
                pipe.expire(keys.meta, self._link.ttl_s + _RUNNING_GRACE)
                pipe.set(self._link.lease_key(self._link.replica), "1", px=self._link.lease_ms, get=True)
                lease = len(pipe) - 1
                self._outbox.enrol(pipe, info.stream_id)
                if (await pipe.execute())[lease] is None:
                    self._lost_lease()  # a restart so quick that no command failed: this is the first
        except StoreUnavailable:
            self._metas.pop(info.stream_id, None)
            self._local.discard(info.stream_id)
            raise
        return log

    def sink(self, log: StreamLog, seq: int, frame: bytes, final: bool) -> None:
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
            self._link.observe("buffer_full", 0.0, True)
            log.ungate()  # no longer persisted: its readers here go on from memory
            return
        pending = self._pending.get(stream_id)
        if pending is None:
            pending = self._pending[stream_id] = Pending(log)
        pending.entries.append((seq, frame, final))
        self._pending_bytes += len(frame)
        if not self._wake.is_set():
            self._wake.set()

    @property
    def leased(self) -> bool:  # it renewed its lease once: a missing one is then a loss
        return self._lease_until > 0

    def stage_record(self, stream_id: str, payload: bytes) -> None:
        """The run's record, built as its final was appended (the same tick: the final is still
        pending): it is written with the final, in the same pipelined write."""
        pending = self._pending.get(stream_id)
        if pending is not None and pending.entries and pending.entries[-1][2]:
            pending.record = payload

    # -- the writer ---------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending or self._broken or self._restore:
                batch, self._pending = self._pending, {}
                self._pending_bytes = 0
                self._writing = True
                self._gate_again()  # what readers took from memory is in this batch or the write-back
                try:
                    async with self._link.timed("write"):
                        if self._restore:
                            await self._write_back()
                        await self.write(batch)
                    await self._end_broken()
                except Exception as exc:
                    if isinstance(exc, REDIS_ERRORS):
                        self._restore = True
                        self._ride_out()
                    else:  # a bug must not stop the writer, and every stream of this replica, for good
                        _log.exception("store_writer_failed", store="redis", error=type(exc).__name__)
                    self._keep_for_retry(batch)
                    if self._closing:
                        self._pending.clear()
                        self._broken.clear()
                        return
                    await asyncio.sleep(min(1.0, self._link.timeout))
                finally:
                    self._writing = False
                    self._wrote.set()

    def _ride_out(self) -> None:
        """Redis fails: this replica's readers take frames from memory while its lease is surely
        held (until it lapses no other replica can claim a stream and number its final otherwise),
        then wait for Redis again (`_gate_again` at the lease's end)."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self._lease_until:
            return
        for log in self._local.logs():
            if log.gated:
                log.ungate()
                self._ungated.append(log)
        if self._regate is None:
            self._regate = loop.call_at(self._lease_until, self._gate_again)

    def _gate_again(self) -> None:
        """Readers of the logs `_ride_out` ungated take only what Redis holds again (before a write,
        whose batch holds every frame not written yet, and when the lease may have lapsed)."""
        if self._regate is not None:
            self._regate.cancel()
            self._regate = None
        for log in self._ungated:
            log.gate()
        self._ungated.clear()

    def _keep_for_retry(self, batch: dict[str, Pending]) -> None:
        """A failed write's batch goes back in front of what was appended meanwhile, in order."""
        for stream_id, later in self._pending.items():
            if stream_id in batch:
                batch[stream_id].entries.extend(later.entries)
                batch[stream_id].record = later.record or batch[stream_id].record
            else:
                batch[stream_id] = later
        self._pending = {sid: p for sid, p in batch.items() if sid not in self._broken}
        self._pending_bytes = sum(len(f) for p in self._pending.values() for _, f, _ in p.entries)

    async def write(self, batch: dict[str, Pending]) -> None:
        """Write one batch of streams' frames in one pipelined round trip (`Timed` bounds it); then
        release them to this replica's readers (a gated log: `StreamLog.gate`)."""
        pipe = self._link.writer.pipeline(transaction=False)
        now = time.monotonic()
        ttl_s = self._link.ttl_s
        adds: list[tuple[int, StreamLog, int]] = []  # (index of its XADD in the pipeline, or -1; log; its last id)
        extended: list[str] = []
        for stream_id, pending in batch.items():
            keys = self._link.keys(stream_id)
            log, entries = pending.log, pending.entries
            ended = entries[-1][2]
            snapshot = self._snapshot(log, now, force=ended)
            if snapshot is not None:  # before the final: a reader that saw the final finds the transcript
                pipe.set(keys.transcript, snapshot, ex=ttl_s + (0 if ended else _RUNNING_GRACE))
            # One entry for the batch (one command, whatever the number of events), holding only
            # what the memory log still retains; the stream is trimmed to the same range.
            first = log.first_seq
            kept = [(seq, frame) for seq, frame, _ in entries if seq >= first]
            if kept:
                fields = {FRAMES: b"".join(f for _, f in kept), FIRST: kept[0][0]}
                if ended:
                    fields[END] = b"1"
                pipe.xadd(keys.events, fields, id=f"{kept[-1][0]}-0", minid=f"{first}-0", approximate=False)
            adds.append((len(pipe) - 1 if kept else -1, log, entries[-1][0]))
            if ended:
                assert log.final is not None
                end: dict[str, str | bytes] = {"done": "1", "status": log.final.status, "ended": repr(time.time())}
                if pending.record is not None:
                    end["record"] = pending.record
                pipe.hset(keys.meta, mapping=end)
                for key in (keys.events, keys.meta, keys.transcript):
                    pipe.expire(key, ttl_s)
                self._forget(stream_id)
            elif kept and now - self._expiries.get(stream_id, float("-inf")) >= _EXPIRY_EVERY:
                pipe.expire(keys.events, ttl_s + _RUNNING_GRACE)  # with the XADD that may create the key
                extended.append(stream_id)
        results = await pipe.execute(raise_on_error=False)
        for stream_id in extended:  # only once written: a failed write is retried with its EXPIRE
            self._expiries[stream_id] = now
        for index, log, last in adds:
            result = results[index] if index >= 0 else None
            if isinstance(result, ResponseError) and "equal or smaller" not in str(result):
                # A stream claimed by another replica (our lease lapsed) refuses our late entries:
                # its readers here go on from memory, as before the store was shared.
                self._link.observe("write_refused", 0.0, True)
                log.ungate()
            else:
                log.release(last)

    async def _write_back(self) -> None:
        """Redis answers again after failing. A stream this replica holds (running, or finished and retained for
        replay) whose keys Redis lost (it restarted empty, as compose runs it) is written back from memory: its
        meta, the events the log retains (one entry), its transcript; and the lease. Then followers resume, a
        reader that left before the final resumes on any replica, and cancels reach it on every replica again.
        Runs in the writer task, so no batch interleaves."""
        logs = self._local.logs()
        pipe = self._link.writer.pipeline(transaction=False)
        for log in logs:
            pipe.exists(self._link.keys(log.info.stream_id).meta)
        present = await pipe.execute() if logs else []
        pipe = self._link.writer.pipeline(transaction=False)
        pipe.set(self._link.lease_key(self._link.replica), "1", px=self._link.lease_ms)
        for log, there in zip(logs, present, strict=True):
            if not there:  # not a blip: Redis lost it
                self._restore_one(pipe, log)
        await pipe.execute()
        self._restore = False

    def _restore_one(self, pipe: Any, log: StreamLog) -> None:
        stream_id = log.info.stream_id
        keys = self._link.keys(stream_id)
        self._broken.pop(stream_id, None)  # what its buffer dropped is written back from memory
        meta = self._metas.get(stream_id)  # running, or its final not written yet
        if meta is None:  # its final was written before Redis lost it, or its persistence given up
            meta = {"model": log.info.model, "provider": log.info.provider, "owner": self._link.replica,
                    "created_at": repr(log.info.created_at)}
            if log.final is not None:
                meta |= {"done": "1", "status": log.final.status}
            if log.info.owner is not None:
                meta["key"] = log.info.owner
        running = "done" not in meta
        expire = self._link.ttl_s + (_RUNNING_GRACE if running else 0)
        pipe.delete(keys.events)  # entries the writer added since Redis came back: the log has them
        pipe.hset(keys.meta, mapping=meta)
        if running:
            self._outbox.enrol(pipe, stream_id)
        if log.last_seq >= log.first_seq:
            fields: dict[bytes, bytes | int] = {FRAMES: log.frames_after(log.first_seq - 1), FIRST: log.first_seq}
            if not running:
                fields[END] = b"1"
            pipe.xadd(keys.events, fields, id=f"{log.last_seq}-0")
        snapshot = self._snapshot(log, time.monotonic(), force=True)
        if snapshot is not None:
            pipe.set(keys.transcript, snapshot, ex=expire)
        for key in (keys.events, keys.meta):
            pipe.expire(key, expire)
        self._link.observe("write_back", 0.0, False)

    def _snapshot(self, log: StreamLog, now: float, *, force: bool) -> bytes | None:
        if (transcript := log.info.transcript) is None:
            return None
        stream_id = log.info.stream_id
        if not force and now - self._snapshots.get(stream_id, 0.0) < _SNAPSHOT_EVERY:
            return None
        self._snapshots[stream_id] = now
        snapshot = transcript.snapshot()
        if log.final is not None and log.final.attempts:  # as the owner's and the record's transcript show them
            snapshot["attempts"] = [dict(attempt) for attempt in log.final.attempts]
        return orjson.dumps(snapshot)

    async def _end_broken(self) -> None:
        """Streams whose persistence was given up: an honest end for their followers."""
        for stream_id, log in list(self._broken.items()):
            await self._link.end(stream_id, log.info.model, log.info.provider, _STORE_LOST, status="error")
            del self._broken[stream_id]
            self._forget(stream_id)

    def _forget(self, stream_id: str) -> None:
        """What this replica kept to write a stream it writes no more (its final written, or given up)."""
        for kept in (self._snapshots, self._expiries, self._metas):
            kept.pop(stream_id, None)

    # -- lease and cancels --------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        key = self._link.lease_key(self._link.replica)
        while True:
            try:
                async with self._link.timed("lease"):
                    sent = asyncio.get_running_loop().time()
                    if await self._redis.set(key, "1", px=self._link.lease_ms, get=True) is None:
                        self._lost_lease()
                    self._lease_until = sent + self._link.lease_ms / 1000  # from the command's sending
                if self._restore:
                    self._wake.set()  # Redis is back: the writer writes back what it lost
            except REDIS_ERRORS:
                self._restore = True
            await asyncio.sleep(self._link.lease_ms / 3000)

    def _lost_lease(self) -> None:
        """This replica's lease is missing: Redis lost it (restarted empty, no failed command to
        tell) unless it never held one. The writer writes back what else Redis lost."""
        self._restore = True
        if self._lease_until:
            self._link.state_lost()
        self._wake.set()

    async def _cancel_loop(self) -> None:
        queue = self._link.cancel_queue(self._link.replica)
        while True:
            try:
                popped = await self._redis.blpop([queue], timeout=self._link.block_ms / 1000)
                if popped is not None:
                    await self._asked(popped[1].decode())
            except REDIS_ERRORS:
                await asyncio.sleep(min(1.0, self._link.timeout))
