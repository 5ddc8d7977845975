"""What both halves of the Redis stream store share: the clients, the key layout, timed
operations, and the end of a stream written once.

The owner half (app/streams/redis/owner.py) and the follower half (app/streams/redis/follower.py)
meet only here, so the key names, timeouts and error mapping are written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import structlog
from redis.asyncio import RedisCluster
from redis.exceptions import RedisError

from app.core.ending import final_event, final_status
from app.core.errors import ErrorData
from app.core.events import AssistantMessage, Usage
from app.lifecycle import LoopLag
from app.redis_client import connect
from app.streams.errors import ClaimHook, StoreUnavailable
from app.streams.frames import encode_frame

__all__ = ["CHECK", "END", "FIRST", "FRAMES", "LAG_ALLOWANCE", "REDIS_ERRORS", "Keys", "RedisLink", "StoreObserver",
           "Watch", "final_frame", "stop"]

StoreObserver = Callable[[str, str, float, bool], None]
"""(store, operation, seconds, failed): the metrics hook."""

FRAMES, FIRST, END = b"f", b"s", b"e"
"""The fields of a stream entry: its frames, the id of its first event, and the mark of the final."""
CHECK = "?"
"""Before a stream id in an owner's queue (`cancel_queue`): not a cancel, a follower's question (app/streams/redis/owner.py)."""
REDIS_ERRORS = (RedisError, OSError, TimeoutError)
"""What a Redis that cannot answer raises."""
LAG_ALLOWANCE = 8.0
"""A reply waited for while our own event loop lags gets more time (`Timed`), up to this many times
its bound in all."""

_log = structlog.get_logger("foundry.streams")

# The end of a stream whose owner is gone, written once: the first caller appends the final
# (numbered after the last stored event) and marks the stream done; later callers change nothing.
_CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if redis.call('HGET', KEYS[2], 'done') then return 0 end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local seq = 1
if #top > 0 then seq = tonumber(string.match(top[1][1], '^(%d+)')) + 1 end
redis.call('XADD', KEYS[1], seq .. '-0', 'f', 'id: ' .. seq .. '\\n' .. ARGV[1], 's', seq, 'e', '1')
redis.call('HSET', KEYS[2], 'done', '1', 'status', ARGV[3], 'claimed', ARGV[4], 'ended', ARGV[5])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[2]) end
return seq
"""


class Keys:
    """The keys of one stream (in braces, so a stream's keys share a cluster slot)."""

    __slots__ = ("events", "meta", "transcript")

    def __init__(self, prefix: str, stream_id: str) -> None:
        base = f"{prefix}:{{{stream_id}}}"
        self.events, self.meta, self.transcript = f"{base}:events", f"{base}:meta", f"{base}:transcript"


class Watch:
    """When a wait for Redis began, on the event loop's clock, and how late that loop had run so far
    (`LoopLag.late_total`): what the loop itself held the wait up is taken out of its length."""

    __slots__ = ("began", "late_before", "lag")

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.began = loop.time()
        self.lag = LoopLag.of(loop)
        self.late_before = self.lag.late_total if self.lag is not None else 0.0

    def late(self) -> float:
        """What our own loop's lag has added to the wait so far."""
        return self.lag.late_total - self.late_before if self.lag is not None else 0.0

    def held(self) -> float:
        """How long the wait has lasted, less what our own loop's lag added to it."""
        return asyncio.get_running_loop().time() - self.began - self.late()


class RedisLink:
    """The clients (one for every command, one for the owner's writes) and this replica's identity in Redis."""

    name = "redis"

    def __init__(self, url: str, *, ttl: float, lease_seconds: float, timeout: float, prefix: str,
                 observer: StoreObserver | None, on_claim: ClaimHook | None = None) -> None:
        self.replica = "rep_" + uuid.uuid4().hex[:16]
        self.observer = observer
        self.prefix = prefix
        self.ttl_s = max(1, int(ttl + 0.999))
        self.lease_ms = max(100, int(lease_seconds * 1000))
        self.block_ms = max(50, min(1000, self.lease_ms // 4))
        self.timeout = timeout
        # One Redis or a cluster, by the URL's scheme (app/redis_client.py). The bound a request
        # waits on is `Timed`'s, which forgives our own loop's lag; the socket's own timeouts are only
        # the backstop past that allowance (redis-py's would judge a connect or a read that is late
        # on a busy loop as a dead Redis).
        backstop = LAG_ALLOWANCE * max(2 * timeout, self.block_ms / 1000 + timeout)
        self.client = connect(url, socket_timeout=backstop, socket_connect_timeout=backstop)
        # The owner's batched writes, one pipeline a batch behind every stream's live path, are bounded by
        # `Timed` alone (a command it cancels disconnects its connection): redis-py's socket timeout wraps
        # each send in `asyncio.wait_for` and each reply in a timeout, about 4 us more a command and 12 us
        # a pipeline (docs/performance.md, "The Redis store's writes").
        self.writer = connect(url, socket_timeout=None, socket_connect_timeout=backstop)
        self._claim = self.client.register_script(_CLAIM)
        self._failed_at = time.monotonic()  # a replica starting has seen nothing of the leases yet
        self._trouble_at = float("-inf")  # when Redis last failed or lost its state
        self.on_claim = on_claim
        """Told of each run this replica ends for a lost owner (its record, its key's slot)."""

    def keys(self, stream_id: str) -> Keys:
        return Keys(self.prefix, stream_id)

    def lease_key(self, replica: str) -> str:
        return f"{self.prefix}:lease:{{{replica}}}"

    def cancel_queue(self, replica: str) -> str:
        """The list a replica pops (BLPOP) the ids of its streams to cancel from: a key, not a
        pub/sub channel, so it lives in one slot of a cluster and outlasts a failover."""
        return f"{self.prefix}:cancel:{{{replica}}}"

    async def xread(self, key: str, cursor: str, *, count: int, block: int) -> Any:
        """XREAD BLOCK of one stream. On a cluster it goes straight to the node of the key's slot:
        redis-py cannot find XREAD's key by itself and would ask the server first (COMMAND GETKEYS,
        one more round trip per read: the soak's INFO commandstats showed it)."""
        if isinstance(self.client, RedisCluster):
            node = self.client.get_node_from_key(key)
            return await self.client.execute_command("XREAD", "COUNT", count, "BLOCK", block, "STREAMS", key, cursor,
                                                     target_nodes=node)
        return await self.client.xread({key: cursor}, count=count, block=block)

    async def alive(self, replica: str) -> bool:
        """Whether a replica's lease is held (it runs, or ran within the lease)."""
        return bool(await self.client.exists(self.lease_key(replica)))

    def state_lost(self) -> None:
        """Redis lost what it held (this replica's lease went missing: restarted empty), with no
        failed command to tell: judged as a failure, for `lost` and `recovering`."""
        self._failed_at = self._trouble_at = time.monotonic()

    @property
    def recovering(self) -> bool:
        """Redis failed or lost its state within the last two leases: the replicas holding streams
        may still be writing them back."""
        return time.monotonic() - self._trouble_at < 2 * self.lease_ms / 1000

    async def lost(self, replica: str, since: Watch | None = None, expected: float = 0.0) -> bool:
        """Whether a replica is gone: its lease missing on a Redis this replica has reached without
        a failure for a whole lease. After Redis stalled or restarted, a lease may be missing only
        because its live owner could not renew it yet: it gets that lease to do so before anyone
        claims its streams.

        A stall counts as a failure (`answered`): `since` is when the caller's wait that led here
        began (a follower's XREAD BLOCK, `expected` seconds long when nothing comes), and the lease
        read itself is judged too: a lease that lapsed while Redis did not answer says nothing of its
        owner."""
        if time.monotonic() - self._failed_at < self.lease_ms / 1000:
            return False
        since = since or Watch()
        gone = not await self.alive(replica)
        return self.answered(since, expected) and gone

    def answered(self, watch: Watch, expected: float = 0.0) -> bool:
        """Whether Redis answered a wait in time: not later than `expected` by a third of the lease
        (our own loop's lag taken out). A later reply is a Redis that stalled (a slow disk, a busy
        host, a failover's pause) and is judged as a failure for `lost`: meanwhile the leases of
        live replicas may have lapsed (a stall past two thirds of the lease lapses the lease of an
        owner that renews every third), and their owners get a lease to renew them in."""
        if watch.held() - expected <= self.lease_ms / 3000:
            return True
        self._failed_at = time.monotonic()
        return False

    async def ping(self) -> bool:
        try:
            async with self.timed("ping"):
                return bool(await self.client.ping())
        except REDIS_ERRORS:
            return False

    async def aclose(self) -> None:
        """Give up this replica's lease (its streams' followers claim them at once), close the client."""
        try:
            async with asyncio.timeout(self.timeout):
                await self.client.delete(self.lease_key(self.replica))
        except REDIS_ERRORS:
            pass
        await self.client.aclose()
        await self.writer.aclose()

    async def end(self, stream_id: str, model: str, provider: str, error: ErrorData, *, status: str,
                  message: AssistantMessage | None = None) -> int:
        """Append a final for a stream whose writer cannot, once: its id, 0 when it had ended, -1 unknown."""
        keys = self.keys(stream_id)
        body = final_frame(0, model, provider, error, status, message).split(b"\n", 1)[1]
        async with self.timed("claim"):
            return int(await self._claim(keys=[keys.events, keys.meta, keys.transcript],
                                         args=[body, self.ttl_s, status, self.replica, repr(time.time())]))

    def observe(self, op: str, seconds: float, failed: bool, error: BaseException | None = None) -> None:
        if failed:
            self._failed_at = self._trouble_at = time.monotonic()
        if self.observer is not None:
            self.observer(self.name, op, seconds, failed)
        if error is not None:  # the class only: a message could carry the URL (and its password)
            _log.warning("store_error", store=self.name, op=op, error=type(error).__name__,
                         seconds=round(seconds, 4))

    def timed(self, op: str) -> Timed:
        return Timed(self, op)

    @contextlib.asynccontextmanager
    async def answering(self, op: str) -> AsyncIterator[None]:
        """A store operation a request waits on: timed, and a Redis that cannot answer is
        StoreUnavailable (503, retryable) for the caller, never a hang or a 500."""
        try:
            async with self.timed(op):
                yield
        except REDIS_ERRORS:
            raise StoreUnavailable("the redis stream store is unreachable; retry later") from None


class Timed:
    """Times one store operation and reports it to the observer. Bounded by twice the store's
    timeout, judged with the event loop's lag (`LoopLag.late_total`): while our own loop runs late,
    a reply that arrived in time may not have been read yet, and that is not a Redis failure, so
    the bound moves out by as long as the loop ran late during this wait, up to LAG_ALLOWANCE times
    the bound in all. Lag from before the wait began stretches nothing, and on a loop that kept
    time a Redis that does not answer fails at the bound. The bound is judged one loop turn after
    it passes, so a reply read in that turn (the one a stall delayed) counts."""

    __slots__ = ("link", "op", "started", "timeout", "_watch", "_handle")

    def __init__(self, link: RedisLink, op: str) -> None:
        self.link, self.op = link, op

    async def __aenter__(self) -> None:
        self.started = time.perf_counter()
        loop = asyncio.get_running_loop()
        self._watch = Watch()
        self.timeout = asyncio.timeout(None)
        await self.timeout.__aenter__()
        self._handle = loop.call_at(self._watch.began + self.link.timeout * 2, self._judge, loop)

    def _judge(self, loop: asyncio.AbstractEventLoop) -> None:
        now, watch, bound = loop.time(), self._watch, self.link.timeout * 2
        deadline = watch.began + min(bound + watch.late(), LAG_ALLOWANCE * bound)
        if now < deadline:
            self._handle = loop.call_at(deadline, self._judge, loop)
        else:
            self.timeout.reschedule(now)  # expires after what this loop turn already woke

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._handle.cancel()
        try:
            await self.timeout.__aexit__(exc_type, exc, tb)
        finally:
            self.link.observe(self.op, time.perf_counter() - self.started, exc_type is not None, exc)
            if exc_type is None:
                self.link.answered(self._watch)  # in time, or a stall


def final_frame(seq: int, model: str, provider: str, error: ErrorData, status: str,
                message: AssistantMessage | None = None) -> bytes:
    """A final written for a stream whose owner cannot: the provider's usage report never reached
    the writer, so the output counts are unknown (null), not 0."""
    final = final_event(final_status(status), error, model=model, provider=provider, message=message,
                        usage=Usage(output_unknown=True))
    return encode_frame(seq, final)


async def stop(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel the store's background loops and wait until every one has stopped, cancelling again
    while any runs. One cancel is not enough: the loops live on after a failed Redis command, and a
    cancel can come out of a command as its result (on Python 3.11 `asyncio.wait_for`, which
    redis-py wraps around every command it sends, returns the result when the cancel lands as the
    command completes) or as a connection error (the cluster client, when it lands while it connects)."""
    for task in tasks:
        task.cancel()
    while not all(task.done() for task in tasks):
        await asyncio.wait(tasks, timeout=0.1)
        for task in tasks:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
