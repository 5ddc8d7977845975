"""The follower half of the Redis stream store: what any replica reads of a stream another runs.

Replay with XRANGE/XREAD, then follow with XREAD BLOCK. A follower that sees nothing new checks the
owner's lease; when it has expired (process killed, node lost) it claims the stream's end with one
Lua script (`RedisLink.end`): the first claimer appends `final{error: replica_lost, retryable:
true}`, everyone else reads it. Detection takes at most the lease plus one block interval
(defaults: 10 s + 1 s). A cancel of a stream owned elsewhere is queued for its owner (a list it pops), or, when
nobody runs it any more, ends it here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson
import structlog

from app.core.errors import ErrorData
from app.core.events import STOP_REASON_FOR_STATUS, AssistantMessage
from app.core.released import Released
from app.streams.errors import (
    CANCELLED_BY_REQUEST,
    CancelOutcome,
    ClaimedRun,
    CursorAhead,
    FinalDelivered,
    ReplayUnavailable,
    RunTags,
)
from app.streams.frames import decode_frames
from app.streams.log import StreamRecord
from app.streams.redis.link import CHECK, END, FIRST, FRAMES, REDIS_ERRORS, Keys, RedisLink, Watch, final_frame

__all__ = ["RedisFollower"]

_READ_COUNT = 1000
_log = structlog.get_logger("foundry.streams")
_REPLICA_LOST: ErrorData = {"code": "replica_lost", "retryable": True,
                            "message": "the replica running this stream stopped; retry the request"}
_AWAY_SECONDS = 30.0
"""How long a reader waits for a Redis that stopped answering before its body ends (no final: the
stream has not ended; its client resumes from its last event id)."""


class RedisFollower:
    """Reads, follows and cancels streams from Redis, for streams this replica does not run."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._redis = link.client

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        keys = self._link.keys(stream_id)
        async with self._link.answering("read"):
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
        if done is not None and after == last_seq:
            raise FinalDelivered(last_seq)
        if first:
            first_seq = int(first[0][1][FIRST])
            if after + 1 < first_seq:
                raise ReplayUnavailable(
                    f"events {after + 1}..{first_seq - 1} of stream {stream_id} are no longer retained; "
                    f"replay from {first_seq - 1} or later", first_available=first_seq)
        return self._follow(stream_id, keys, after)

    async def _follow(self, stream_id: str, keys: Keys, after: int) -> AsyncIterator[bytes]:
        """Replay then follow from Redis until the final (or the stream expires)."""
        cursor = after
        failing_since: float | None = None
        quiet_since = asked_at = time.monotonic()
        lease = self._link.lease_ms / 1000
        while True:
            try:
                waited = Watch()
                reply = await self._link.xread(keys.events, f"{cursor}-0", count=_READ_COUNT, block=self._link.block_ms)
                if not reply:
                    now = time.monotonic()
                    check = now - max(quiet_since, asked_at) >= lease  # at most once a lease: `_idle`
                    asked_at = now if check else asked_at
                    if await self._idle(stream_id, keys, cursor, waited, check=check):
                        return
                    continue
                self._link.answered(waited, self._link.block_ms / 1000)  # in time, or a stall
                failing_since = None
            except REDIS_ERRORS:
                self._link.observe("read", 0.0, True)
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since < max(_AWAY_SECONDS, 3 * self._link.lease_ms / 1000):
                    await asyncio.sleep(min(0.5, self._link.timeout))
                    continue
                # Redis stays away: this body ends, without a final (only the stream's end is one,
                # and it has not come); the client resumes from its last event id, later.
                return
            try:
                frames, cursor, done = _frames_after(reply[0][1], cursor, stop_at_hole=True)
            except ReplayUnavailable as exc:
                # Events after our cursor are gone from Redis: the owner's writer trimmed past this
                # reader (it opened before the events reached Redis, or lags behind the retention
                # window), or a master was killed before it replicated them. The body ends with one
                # honest final saying where a replay can start, never cut short.
                yield final_frame(cursor + 1, "", "", exc.to_dict(), "error")
                return
            if frames:
                quiet_since = time.monotonic()
                yield b"".join(frames)
            if done:
                return

    async def _idle(self, stream_id: str, keys: Keys, cursor: int, waited: Watch, *, check: bool = False) -> bool:
        """Nothing new for a block interval (the read `waited`): True when the stream ended (or
        expired) without more to read; claims the end when its owner's lease is gone. With `check`
        (nothing for a lease), a live owner is asked to check that Redis holds the stream's final if
        it ended: one lost with a master that died before its replica had it is never written again
        otherwise, and its readers would wait for the stream's TTL (app/streams/redis/owner.py)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hmget(keys.meta, "done", "owner", "model", "provider")
        pipe.xrevrange(keys.events, count=1)
        (done, owner, model, provider), top = await pipe.execute()
        if owner is None:
            return True  # expired: nothing is left to read
        if done is not None:  # ended: its final may have come after the read that found nothing
            return not top or _seq(top[0][0]) <= cursor  # read it, unless this reader is past it
        if not await self._link.lost(owner.decode(), since=waited, expected=self._link.block_ms / 1000):
            if check:
                await self._ask(owner.decode(), CHECK + stream_id)
            return False
        await self.end_lost(stream_id, model.decode(), provider.decode())
        return False  # the next read returns the final (ours or another claimer's)

    async def _ask(self, owner: str, message: str) -> None:
        """Queue `message` (a stream id to cancel, or `CHECK` + id) for the replica `owner`. It pops
        its queue (BLPOP), also once it listens again after Redis came back; the queue expires with
        the owner's lease."""
        queue = self._link.cancel_queue(owner)
        pipe = self._redis.pipeline(transaction=False)
        pipe.rpush(queue, message)
        pipe.pexpire(queue, self._link.lease_ms)
        await pipe.execute()

    async def end_lost(self, stream_id: str, model: str, provider: str) -> bool:
        """End a stream whose owner is gone (`replica_lost`, with what it released), once: True
        when this replica wrote the final (and told the hook, for its record and its key's slot)."""
        keys = self._link.keys(stream_id)
        await self._free_slot(stream_id, keys)
        message = await self._released(keys, provider)
        if await self._link.end(stream_id, model, provider, _REPLICA_LOST, status="error", message=message) > 0:
            await self._claimed(stream_id, keys, "error", _REPLICA_LOST)
            return True
        return False

    async def reclaim(self, stream_id: str, status: str) -> None:
        """Tell the hook again of a run a replica claimed (its final is written) whose record that
        replica did not confirm (it died too): the store keeps the first record of a run."""
        error = CANCELLED_BY_REQUEST if status == "cancelled" else _REPLICA_LOST
        await self._claimed(stream_id, self._link.keys(stream_id), status, error)

    async def _free_slot(self, stream_id: str, keys: Keys) -> None:
        """Before a claimer writes the final of a run whose owner is gone: the key's slot goes first,
        so a client that reads the final and asks again at once is not refused (429) by the slot."""
        hook = self._link.on_claim
        if hook is None:
            return
        owner, slot = await self._redis.hmget(keys.meta, "key", "slot")
        if owner is None or slot is None:
            return
        try:
            await hook.free_slot(owner.decode(), slot.decode())
        except Exception as exc:  # the slot's lease frees it later; the claim goes on
            _log.warning("claim_hook_failed", stream_id=stream_id, error=type(exc).__name__)

    async def _claimed(self, stream_id: str, keys: Keys, status: str, error: ErrorData) -> None:
        """This replica wrote the final of a run whose owner cannot: it ends the stored transcript
        as claimed and tells the hook (the run's record, its key's slot). Once: only the claimer."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hmget(keys.meta, "model", "provider", "key", "created_at", "request", "slot")
            pipe.get(keys.transcript)
            (model, provider, key, created_at, request, slot), snapshot = await pipe.execute()
            transcript = orjson.loads(snapshot) if snapshot is not None else None
            if transcript is not None:
                usage = transcript.get("usage") or {}
                usage["output_tokens"] = usage["total_tokens"] = None  # the last step's report never came
                transcript.update(status=status, stop_reason=STOP_REASON_FOR_STATUS[status], usage=usage)
                await self._redis.set(keys.transcript, orjson.dumps(transcript), ex=self._link.ttl_s)
        except REDIS_ERRORS:
            return  # the final is written; the record waits for nobody (a store away: nothing to read)
        hook = self._link.on_claim
        if hook is None or model is None:
            return
        run = ClaimedRun(stream_id=stream_id, model=model.decode(), provider=provider.decode(),
                         owner=_text(key), tags=RunTags(request_id=_text(request), slot=_text(slot)),
                         created_at=float(created_at or 0.0), status=status, error=error, transcript=transcript)
        try:
            await hook.claimed(run)
        except Exception as exc:  # a record or a slot that cannot be settled must not break the readers
            _log.warning("claim_hook_failed", stream_id=stream_id, error=type(exc).__name__)

    async def _released(self, keys: Keys, provider: str) -> AssistantMessage:
        """What a stream whose owner is gone released, rebuilt from its stored (retained) events:
        the message of the final that ends it, so its readers keep an honest partial answer."""
        entries = await self._redis.xrange(keys.events)
        if not entries:
            return AssistantMessage()
        try:
            frames, _, _ = _frames_after(entries, int(entries[0][1][FIRST]) - 1)
        except ReplayUnavailable:  # a hole in the stored events: no message rather than a wrong one
            return AssistantMessage()
        return Released.of(decode_frames(b"".join(frames)), provider=provider).message()

    async def key_owner(self, stream_id: str) -> tuple[bool, str | None]:
        async with self._link.answering("read"):
            model, key = await self._redis.hmget(self._link.keys(stream_id).meta, "model", "key")
        return model is not None, key.decode() if key is not None else None

    async def transcript(self, stream_id: str) -> StreamRecord | None:
        keys = self._link.keys(stream_id)
        async with self._link.answering("read"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hmget(keys.meta, "model", "provider", "created_at")
            pipe.get(keys.transcript)
            (model, provider, created_at), snapshot = await pipe.execute()
        if model is None or snapshot is None:
            return None
        return StreamRecord(stream_id=stream_id, model=model.decode(), provider=provider.decode(),
                            created_at=float(created_at), transcript=orjson.loads(snapshot))

    async def cancel(self, stream_id: str) -> CancelOutcome | None:
        """Ask the owner to cancel (through its channel); end it here when nobody runs it any more."""
        keys = self._link.keys(stream_id)
        asked = Watch()
        async with self._link.answering("cancel"):
            done, owner, model, provider = await self._redis.hmget(keys.meta, "done", "owner", "model",
                                                                   "provider")
            if owner is None:
                return None
            if done is not None:
                return "finished"
            await self._ask(owner.decode(), stream_id)
            lost = await self._link.lost(owner.decode(), since=asked)
        if not lost:
            return "cancelling"
        async with self._link.answering("cancel"):
            # Nobody runs it any more: end it here, once, with what it released.
            await self._free_slot(stream_id, keys)
            message = await self._released(keys, provider.decode())
            claimed = await self._link.end(stream_id, model.decode(), provider.decode(), CANCELLED_BY_REQUEST,
                                           status="cancelled", message=message)
        if claimed > 0:
            await self._claimed(stream_id, keys, "cancelled", CANCELLED_BY_REQUEST)
        return "cancelled" if claimed > 0 else "finished"


def _text(value: bytes | None) -> str | None:
    return value.decode() if value is not None else None


def _skip_frames(data: bytes, n: int) -> bytes:
    """Drop the first `n` SSE frames (each ends with a blank line; JSON data holds no raw newline)."""
    pos = 0
    for _ in range(n):
        pos = data.index(b"\n\n", pos) + 2
    return data[pos:]


def _frames_after(entries: list[tuple[bytes, dict[bytes, bytes]]], cursor: int, *,
                  stop_at_hole: bool = False) -> tuple[list[bytes], int, bool]:
    """The frames of stream entries numbered after `cursor` (an entry that overlaps what was read,
    a retried write, is cut), the new cursor, and whether the final was among them. A hole raises
    ReplayUnavailable; with `stop_at_hole`, only when it comes first (the frames before it first)."""
    frames: list[bytes] = []
    for entry_id, fields in entries:
        last, first = _seq(entry_id), int(fields[FIRST])
        if last <= cursor:
            continue
        if first > cursor + 1:
            if stop_at_hole and frames:
                return frames, cursor, False
            raise ReplayUnavailable(f"events {cursor + 1}..{first - 1} are no longer retained; replay from "
                                    f"{first - 1} or later", first_available=first)
        data = fields[FRAMES]
        if first <= cursor:  # the entry starts before our cursor: skip what was delivered
            data = _skip_frames(data, cursor - first + 1)
        frames.append(data)
        cursor = last
        if END in fields:
            return frames, cursor, True
    return frames, cursor, False


def _seq(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])
