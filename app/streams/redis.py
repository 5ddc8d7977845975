"""The Redis stream store: streams every replica can replay, follow, cancel and outlive.

Chosen by `FOUNDRY_REDIS_URL`. `RedisStreamStore` holds a `MemoryStreamStore` for the streams this
replica runs (it serves their readers from memory, as the embedded store does) and composes two
halves over one Redis client (app/streams/redis_link.py): the owner (app/streams/redis_owner.py)
persists this replica's streams in the background, renews its lease and hears cancels; the
follower (app/streams/redis_follower.py) serves streams another replica runs, and ends those whose
replica is gone.

Keys (`{id}` is the stream id, in braces so a stream's keys share a cluster slot):
  foundry:{id}:events      a Redis Stream. One entry per stream per write: field `f` holds the
                           encoded SSE frames of events `s`..<seq> (the entry id is `<seq>-0`,
                           our last event id), `e` marks the entry ending with the final. Trimmed
                           like the memory log (MINID: what memory no longer retains goes),
                           expired `stream_ttl_seconds` after the final.
  foundry:{id}:meta        hash: model, provider, created_at, owner (the replica), key, request and
                           slot (for the run's record and its key's slot if the owner dies), and
                           done/status at the end.
  foundry:{id}:transcript  the transcript snapshot as JSON (at most once a second, and at the end).
  foundry:lease:{<replica>}  the owner's lease, renewed every lease/3, expiring after the lease.
  foundry:cancel:{<replica>} a list of the ids of its streams to cancel, sent by other replicas
                           (RPUSH) and popped by the owner (BLPOP); it expires with the lease.
  foundry:outbox:{<replica>} the ids of its streams whose run record the records database does not
                           hold yet; the record itself travels with the final in the meta (`record`).
  foundry:replicas         every replica seen (a sorted set), for the outbox sweepers
                           (app/streams/redis_outbox.py).

Every key carries a hash tag, so on a Redis Cluster (`redis+cluster://` URL, app/redis_client.py)
each command and each Lua script touches one slot; a batch of writes for many streams is one
pipeline that redis-py's cluster client splits by node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

from app.streams.errors import CancelOutcome, ClaimHook, RunTags, SweptHook
from app.streams.log import StreamLog, StreamRecord
from app.streams.memory import MemoryStreamStore
from app.streams.redis_follower import RedisFollower
from app.streams.redis_link import REDIS_ERRORS, RedisLink, StoreObserver
from app.streams.redis_outbox import RedisOutbox
from app.streams.redis_owner import RedisOwner

__all__ = ["RedisStreamStore", "StoreObserver"]


class RedisStreamStore:
    """A `StreamStore` shared by replicas: this replica's streams from memory, the others' from Redis."""

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
        outbox_retry_seconds: float = 60.0,
    ) -> None:
        self._local = MemoryStreamStore(ttl=ttl, max_streams=max_streams, max_events=max_events,
                                        max_bytes=max_bytes, max_total_bytes=max_total_bytes, on_evict=on_evict)
        self._link = RedisLink(url, ttl=ttl, lease_seconds=lease_seconds, timeout=timeout, prefix=prefix,
                               observer=observer)
        self._follower = RedisFollower(self._link)
        self._outbox = RedisOutbox(self._link, self._follower, retry_after=outbox_retry_seconds)
        self._owner = RedisOwner(self._link, self._local, self._outbox, max_pending_bytes=max_pending_bytes)

    @property
    def replica(self) -> str:
        """This process's id in Redis (its lease and cancel queue)."""
        return self._link.replica

    @property
    def total_bytes(self) -> int:
        return self._local.total_bytes

    def __len__(self) -> int:
        return len(self._local)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._owner.start()
        self._outbox.start()

    async def aclose(self) -> None:
        """Flush what is buffered (briefly), give up the lease, close the client."""
        await self._outbox.aclose()
        await self._owner.aclose()
        await self._link.aclose()

    async def flush(self) -> None:
        """Wait until every frame appended so far is written (tests, shutdown)."""
        await self._owner.flush()

    async def ping(self) -> bool:
        return await self._link.ping()

    def sweep(self) -> int:
        return self._local.sweep()

    async def recovering(self) -> bool:
        """Redis failed or lost its state within two leases, or lost it just now: this replica's
        lease, once held, is missing (a restart so quick that no command failed)."""
        if self._link.recovering:
            return True
        if not self._owner.leased:
            return False
        try:
            if await self._link.alive(self._link.replica):
                return False
        except REDIS_ERRORS:
            return True
        self._link.state_lost()
        return True

    # -- streams: this replica's from memory, the others' from Redis --------------------------

    @property
    def on_swept(self) -> SweptHook | None:
        return self._outbox.on_record

    @on_swept.setter
    def on_swept(self, hook: SweptHook | None) -> None:
        self._outbox.on_record = hook

    def stage_record(self, stream_id: str, payload: bytes) -> None:
        if self._outbox.enabled:
            self._owner.stage_record(stream_id, payload)

    async def records_written(self, stream_ids: Sequence[str]) -> None:
        async with self._link.timed("outbox"):
            await self._outbox.written(stream_ids)

    async def sweep_outbox(self) -> int:
        """One sweep of the outboxes now (tests; it also runs every lease interval)."""
        return await self._outbox.sweep_once()

    @property
    def on_claim(self) -> ClaimHook | None:
        return self._link.on_claim

    @on_claim.setter
    def on_claim(self, hook: ClaimHook | None) -> None:
        self._link.on_claim = hook

    async def create(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False, run: RunTags | None = None) -> StreamLog:
        return await self._owner.create(model=model, provider=provider, owner=owner, keep_events=keep_events,
                                        held=held, run=run)

    def get(self, stream_id: str) -> StreamLog | None:
        return self._local.get(stream_id)

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        if self._local.get(stream_id) is not None:
            return await self._local.open(stream_id, after)
        return await self._follower.open(stream_id, after)

    async def key_owner(self, stream_id: str) -> tuple[bool, str | None]:
        if self._local.get(stream_id) is not None:
            return await self._local.key_owner(stream_id)
        return await self._follower.key_owner(stream_id)

    async def transcript(self, stream_id: str) -> StreamRecord | None:
        if self._local.get(stream_id) is not None:
            return await self._local.transcript(stream_id)
        return await self._follower.transcript(stream_id)

    async def cancel(self, stream_id: str) -> CancelOutcome | None:
        if self._local.get(stream_id) is not None:
            return await self._local.cancel(stream_id)
        return await self._follower.cancel(stream_id)
