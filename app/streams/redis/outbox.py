"""The outbox of run records in the Redis stream store: a run's record is written with its final,
and any replica can finish writing it to the records database.

Every run's record is built when its final is (app/recording.py) and written to the database by
the replica's records writer, in batches, a linger later. So that a replica killed inside that
linger does not take the record with it (the final in Redis, readers have it, nobody records the
run):

- A stream's id enters its owner's outbox (`foundry:outbox:{<replica>}`, a set in the owner's
  slot) when the stream is created, and its record travels with its final: the owner writes it to
  the stream's meta (field `record`, without the transcript: the final snapshot is beside it) in
  the same pipelined write as the final.
- When the records writer has committed a batch, the ids leave their outboxes (`written`).
- Every `lease` seconds each replica sweeps (`sweep_once`): for each replica in the registry
  (`foundry:replicas`) whose lease is gone, one sweeper at a time (a short lock) takes its outbox:
  a record with its final goes to `on_record` (app/main.py: this replica's records queue); a stream
  that never ended is ended here (`replica_lost`, as a follower would, so a run nobody was reading
  is recorded too); a run a claimer ended whose record the claimer did not confirm is claimed
  again. Its own outbox it retries after `retry_after`, for records its writer gave up (the
  database away). The database keeps the first record of a run id, so a record written twice
  (the owner's, then a sweeper's) is recorded once, and its cost counted once (app/records/spend.py).

What is left: a record is lost when its replica dies while the stream store is also away (Redis
restarted empty within the linger), or when the stream's keys expire (`stream_ttl_seconds`)
before any replica can write it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

import orjson
import structlog

from app.streams.errors import SweptHook, SweptRecord
from app.streams.redis.follower import RedisFollower
from app.streams.redis.link import REDIS_ERRORS, RedisLink, Watch, stop

__all__ = ["RedisOutbox"]

_PAGE = 200  # stream ids looked at per outbox per sweep
_GRACE = 3600  # seconds an outbox outlives its last enrolment (the stream keys' own grace)
_log = structlog.get_logger("foundry.streams")


class RedisOutbox:
    """The records a replica's streams owe the database, until one replica has written each."""

    def __init__(self, link: RedisLink, follower: RedisFollower, *, retry_after: float = 60.0,
                 on_record: SweptHook | None = None) -> None:
        self._link = link
        self._redis = link.client
        self._follower = follower
        self.retry_after = retry_after
        self._on_record = on_record
        """Where swept records go; the outbox is kept only when there is one (records are on)."""
        self._task: asyncio.Task[None] | None = None
        self._handed: dict[str, float] = {}  # stream id -> when this replica last handed its record on

    @property
    def enabled(self) -> bool:
        return self._on_record is not None

    def key(self, replica: str) -> str:
        return f"{self._link.prefix}:outbox:{{{replica}}}"

    @property
    def registry(self) -> str:
        return f"{self._link.prefix}:replicas"

    def enrol(self, pipe: Any, stream_id: str) -> None:
        """In the pipeline creating (or writing back) a stream: its id enters this replica's outbox."""
        if self.enabled:
            key = self.key(self._link.replica)
            pipe.sadd(key, stream_id)
            pipe.expire(key, self._link.ttl_s + _GRACE)
            pipe.zadd(self.registry, {self._link.replica: time.time()})  # the sweepers know of it

    async def written(self, stream_ids: Sequence[str]) -> None:
        """Records the database now holds: their ids leave the outbox of the replica that ran them."""
        if not self.enabled or not stream_ids:
            return
        pipe = self._redis.pipeline(transaction=False)
        for stream_id in stream_ids:
            pipe.hget(self._link.keys(stream_id).meta, "owner")
        owners = await pipe.execute()
        pipe = self._redis.pipeline(transaction=False)
        for stream_id, owner in zip(stream_ids, owners, strict=True):
            if owner is not None:  # an expired stream's id goes at the next sweep
                pipe.srem(self.key(owner.decode()), stream_id)
        await pipe.execute()

    # -- the sweeper ----------------------------------------------------------------------------

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.get_running_loop().create_task(self._sweep_loop(), name="redis-outbox-sweeper")

    async def aclose(self) -> None:
        if self._task is not None:
            await stop([self._task])  # a sweep may lose one cancel (link.py)
            self._task = None

    async def _sweep_loop(self) -> None:
        interval = self._link.lease_ms / 1000
        while True:
            await asyncio.sleep(interval * random.uniform(0.5, 1.0))  # replicas out of step
            try:
                await self.sweep_once()
            except REDIS_ERRORS as exc:
                self._link.observe("sweep", 0.0, True, exc)
            except Exception as exc:  # a bug must not stop the sweeps for good
                _log.error("outbox_sweep_failed", error=type(exc).__name__, detail=str(exc)[:200])

    async def sweep_once(self) -> int:
        """One pass over the registry: the outboxes of replicas that are gone, then this
        replica's own overdue records. How many records (or runs ended) it handed on."""
        me = self._link.replica
        began = Watch()
        async with self._link.timed("sweep"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.zadd(self.registry, {me: time.time()})
            pipe.zrange(self.registry, 0, -1)
            replicas = [r.decode() for r in (await pipe.execute())[1] if r.decode() != me]
            gone = [replica for replica in replicas if await self._link.lost(replica, since=began)]
        handed = 0
        for replica in gone:
            lock = f"{self._link.prefix}:sweeping:{{{replica}}}"
            if await self._redis.set(lock, me, nx=True, px=self._link.lease_ms * 2):
                try:
                    handed += await self._sweep(replica, gone=True)
                finally:
                    await self._redis.delete(lock)
        return handed + await self._sweep(me, gone=False)

    async def _sweep(self, replica: str, *, gone: bool) -> int:
        key = self.key(replica)
        members = await self._redis.srandmember(key, _PAGE)  # a different page each pass
        if not members:
            if gone:
                await self._redis.zrem(self.registry, replica)  # a replica that comes back adds itself again
            return 0
        ids = [m.decode() for m in members]
        pipe = self._redis.pipeline(transaction=False)
        for stream_id in ids:
            pipe.hmget(self._link.keys(stream_id).meta, "model", "provider", "done", "status", "record", "ended",
                       "claimed")
        metas = await pipe.execute()
        handed = 0
        for stream_id, meta in zip(ids, metas, strict=True):
            try:
                handed += await self._settle(key, replica, stream_id, meta, gone=gone)
            except REDIS_ERRORS:
                raise  # the store is away: the next pass tries again
            except Exception as exc:  # one entry that cannot be read (a record of another version) blocks no other
                await self._redis.srem(key, stream_id)
                _log.error("outbox_record_unreadable", stream_id=stream_id, replica=replica,
                           error=type(exc).__name__, detail=str(exc)[:200])
        return handed

    async def _settle(self, key: str, replica: str, stream_id: str, meta: list[bytes | None], *, gone: bool) -> int:
        """One outbox entry: hand its record on, end its stream, claim its run again, or forget it."""
        model, provider, done, status, record, ended, claimed = meta
        if model is None or provider is None:  # the stream expired: nothing is left to write
            await self._redis.srem(key, stream_id)
            _log.warning("outbox_record_expired", stream_id=stream_id, replica=replica)
            return 0
        now = time.time()
        overdue = ended is not None and now - float(ended) >= self.retry_after
        if now - self._handed.get(stream_id, 0.0) < self.retry_after:
            return 0  # handed on lately: its commit takes it out of the outbox
        if done is None:
            if not gone or not await self._follower.end_lost(stream_id, model.decode(), provider.decode()):
                return 0
        elif record is not None:
            if not (gone or overdue):
                return 0
            await self._hand_on(stream_id, record)
        elif claimed is not None and (overdue or not await self._link.alive(claimed.decode())):
            await self._follower.reclaim(stream_id, status.decode() if status is not None else "error")
        else:
            if gone and overdue:  # a final written without its record (its writer had none): nothing to write
                await self._redis.srem(key, stream_id)
            return 0
        self._remember(stream_id, now)
        return 1

    def _remember(self, stream_id: str, now: float) -> None:
        """Not handed on again within `retry_after` (a records database that is away would have
        the same records queued again every pass)."""
        self._handed[stream_id] = now
        if len(self._handed) > 4 * _PAGE:
            self._handed = {sid: at for sid, at in self._handed.items() if now - at < self.retry_after}

    async def _hand_on(self, stream_id: str, record: bytes) -> None:
        snapshot = await self._redis.get(self._link.keys(stream_id).transcript)
        hook = self._on_record
        if hook is not None:
            hook(SweptRecord(stream_id=stream_id, payload=record,
                             transcript=orjson.loads(snapshot) if snapshot is not None else None))
