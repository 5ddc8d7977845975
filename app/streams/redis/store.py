"""`RedisStreamStore`: this replica's streams from memory, the others' from Redis (the package's
docstring maps its parts and keys), and `RedisStoreSettings`, what it is built from.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from app.streams.errors import CancelOutcome, ClaimHook, RunTags, SweptHook
from app.streams.log import Canceller, StreamLog, StreamRecord
from app.streams.memory import MemoryStreamStore
from app.streams.redis.follower import RedisFollower
from app.streams.redis.link import REDIS_ERRORS, RedisLink, StoreObserver
from app.streams.redis.outbox import RedisOutbox
from app.streams.redis.owner import RedisOwner

__all__ = ["RedisStoreSettings", "RedisStreamStore", "StoreObserver"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisStoreSettings:
    """What a Redis stream store is built from (app/main.py reads it from the settings)."""

    url: str
    """`redis://`, `rediss://` or `redis+cluster://` (app/redis_client.py)."""
    ttl: float
    """Seconds a finished stream stays readable."""
    max_streams: int
    """Streams this replica holds in memory at once."""
    max_events: int
    max_bytes: int
    """Each stream's bounds: events and bytes retained."""
    max_total_bytes: int | None = None
    """The bytes of all this replica's streams together (None: no such bound)."""
    lease_seconds: float = 10.0
    """How long after its last renewal a replica's lease holds: the time to notice a dead owner."""
    timeout: float = 2.0
    """The bound of one Redis reply (stretched while our own loop lags: link.py)."""
    max_pending_bytes: int = 32 << 20
    """Frames waiting to be written to Redis, past which a stream is no longer persisted."""
    prefix: str = "foundry"
    outbox_retry_seconds: float = 60.0
    """After this long a record this replica's writer has not confirmed is handed to it again."""


class RedisStreamStore:
    """A stream store shared by replicas (`StreamBackend`: the event log and the records outbox;
    the claims go to `on_claim`): this replica's streams from memory, the others' from Redis."""

    name = "redis"

    def __init__(self, settings: RedisStoreSettings, *, observer: StoreObserver | None = None,
                 on_evict: Callable[[str], None] | None = None, on_swept: SweptHook | None = None,
                 on_claim: ClaimHook | None = None) -> None:
        """`observer` times each Redis operation (the metrics); `on_evict` is told of each
        finished stream evicted from memory, with why. `on_swept` takes the run records other
        replicas left in their outboxes (None: records are off, and no outbox is kept);
        `on_claim` each run this replica ends for a replica that died (its record, its key's slot)."""
        s = settings
        self._local = MemoryStreamStore(ttl=s.ttl, max_streams=s.max_streams, max_events=s.max_events,
                                        max_bytes=s.max_bytes, max_total_bytes=s.max_total_bytes, on_evict=on_evict)
        self._link = RedisLink(s.url, ttl=s.ttl, lease_seconds=s.lease_seconds, timeout=s.timeout, prefix=s.prefix,
                               observer=observer, on_claim=on_claim)
        self._follower = RedisFollower(self._link)
        self._outbox = RedisOutbox(self._link, self._follower, retry_after=s.outbox_retry_seconds, on_record=on_swept)
        self._owner = RedisOwner(self._link, self._local, self._outbox, max_pending_bytes=s.max_pending_bytes)

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

    def stage_record(self, stream_id: str, payload: Callable[[], bytes]) -> None:
        if self._outbox.enabled:
            self._owner.stage_record(stream_id, payload())

    async def records_written(self, stream_ids: Sequence[str]) -> None:
        async with self._link.timed("outbox"):
            await self._outbox.written(stream_ids)

    async def sweep_outbox(self) -> int:
        """One sweep of the outboxes now (tests; it also runs every lease interval)."""
        return await self._outbox.sweep_once()

    async def create(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False, run: RunTags | None = None,
                     canceller: Canceller | None = None) -> StreamLog:
        return await self._owner.create(model=model, provider=provider, owner=owner, keep_events=keep_events,
                                        held=held, run=run, canceller=canceller)

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
