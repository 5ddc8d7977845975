"""What the chaos soak found, each on real processes (two gateway replicas, a private Redis),
deterministically: the fault the soak hit by chance, made to happen at the moment that matters.

- After a Redis restart the owner served its readers from memory for the rest of each stream's
  life, ahead of Redis; killed later, it left readers holding ids that the replica taking its
  stream over numbered otherwise (a resume answered 400 `cursor_ahead`, or an id read twice with
  two different frames, and no final).
- A follower whose Redis stayed away longer than the lease made up a final
  (`store_unavailable`) for a stream that had not ended: its reader stopped there, with a status
  the run's record contradicts.
- Right after Redis restarted empty, before the owner wrote its streams back, a resume of a
  finished stream answered 410 `stream_expired`: gone for good, for a stream that came back a
  moment later.
"""

import asyncio
import os
import signal

import httpx
import pytest
import redis.asyncio as redis

from tests.records_support import postgres, postgres_url  # noqa: F401
from tests.redis_support import Replica, start_together, written_back
from tests.support import get_until, parse_sse

pytestmark = pytest.mark.slow  # starts processes


def ask(model: str, delay_ms: int) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}],
            "provider_options": {"delay_ms": delay_ms}, "stream": True}


class Reader:
    """One client reading a stream, across resumes: every frame it saw, by id."""

    def __init__(self, client: httpx.AsyncClient, sid: str) -> None:
        self.client, self.sid = client, sid
        self.frames: dict[int, tuple[str, dict]] = {}
        self.conflicts: list[int] = []
        self.statuses: list[int] = []

    @property
    def last(self) -> int:
        return max(self.frames, default=0)

    def finals(self) -> list[int]:
        return [i for i, (event, _) in self.frames.items() if event == "final"]

    def take(self, raw: bytes) -> None:
        for fid, event, data in parse_sse(raw[:raw.rfind(b"\n\n") + 2]):
            seen = self.frames.setdefault(fid, (event, data))
            if seen != (event, data):
                self.conflicts.append(fid)

    async def read(self, url: str, *, until: int | None = None, moved: asyncio.Event | None = None) -> None:
        """Read from `url` after the last id seen: to the end of the body, or until `until` ids."""
        raw = b""
        try:
            async with self.client.stream("GET", f"{url}/v1/stream/{self.sid}?after={self.last}") as r:
                self.statuses.append(r.status_code)
                if r.status_code != 200:
                    return
                async for chunk in r.aiter_bytes():
                    raw += chunk
                    self.take(raw)
                    if moved is not None:
                        moved.set()
                    if until is not None and self.last >= until:
                        return
        except httpx.TransportError:  # the replica died under the reader
            self.take(raw)

    async def to_the_final(self, url: str, seconds: float = 30) -> None:
        """Resume on `url` until the final, as a client with Last-Event-ID would."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.finals() and loop.time() < deadline:
            await self.read(url)
            if not self.finals():
                await asyncio.sleep(0.2)


def contiguous(reader: Reader) -> bool:
    return sorted(reader.frames) == list(range(1, reader.last + 1))


async def test_an_owner_killed_after_a_redis_restart_leaves_no_reader_ahead_of_its_successor(private_redis):
    a, b = start_together(Replica(private_redis.url), Replica(private_redis.url))
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{a.url}/v1/generate", json=ask("mock/lorem-2000", 30))
            assert r.status_code == 202, r.text
            reader = Reader(c, r.json()["stream_id"])
            await reader.read(a.url, until=3)
            private_redis.kill()  # Redis restarted empty (as compose runs it): the owner writes it back
            await asyncio.sleep(3)
            private_redis.start()
            await get_until(c, f"{b.url}/v1/stream/{reader.sid}/transcript", lambda r: r.status_code == 200,
                            "the owner writing the stream back to the restarted Redis")
            await reader.read(a.url, until=reader.last + 10)  # the owner streams on, persisted again
            # Now Redis stalls (a slow disk, a busy host): the owner's frames wait for it. Its own
            # reader reads meanwhile, then the owner dies before Redis answers again.
            moved = asyncio.Event()
            following = asyncio.create_task(reader.read(a.url, moved=moved))
            await moved.wait()
            os.kill(private_redis.proc.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(0.6)
                a.kill()
            finally:
                os.kill(private_redis.proc.pid, signal.SIGCONT)
            await following
            # The reader resumes on the other replica, which ends the stream for its lost owner.
            await reader.to_the_final(b.url)
        assert reader.statuses.count(400) == 0, reader.statuses
        assert not reader.conflicts, f"ids read twice with different frames: {reader.conflicts}"
        assert len(reader.finals()) == 1 and contiguous(reader)
        assert reader.frames[reader.last][1]["error"]["code"] == "replica_lost"
    finally:
        a.stop()
        b.stop()


async def test_a_follower_waits_for_redis_and_makes_up_no_final(private_redis):
    a, b = start_together(Replica(private_redis.url), Replica(private_redis.url))
    try:
        async with httpx.AsyncClient(timeout=60) as c:
            r = await c.post(f"{a.url}/v1/generate", json=ask("mock/lorem-300", 20))
            assert r.status_code == 202, r.text
            reader = Reader(c, r.json()["stream_id"])
            moved = asyncio.Event()
            following = asyncio.create_task(reader.read(b.url, moved=moved))
            await moved.wait()
            os.kill(private_redis.proc.pid, signal.SIGSTOP)  # away for longer than the lease (2 s)
            try:
                await asyncio.sleep(5)
            finally:
                os.kill(private_redis.proc.pid, signal.SIGCONT)
            await following
            await reader.to_the_final(b.url)
        assert len(reader.finals()) == 1 and contiguous(reader) and not reader.conflicts
        final = reader.frames[reader.last][1]
        assert final["status"] == "ok", final  # the stream's own end, not one made up for the reader
    finally:
        a.stop()
        b.stop()


async def test_a_resume_while_redis_recovers_is_retryable_never_gone(private_redis, postgres_url):  # noqa: F811
    env = {"FOUNDRY_DATABASE_URL": postgres_url, "FOUNDRY_RECORDS_LINGER": "0"}
    a, b = start_together(Replica(private_redis.url, **env), Replica(private_redis.url, **env))
    stopped = False
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{a.url}/v1/stream", json={**ask("mock/tool_call", 0), "stream": False})
            sid, events = r.headers["x-stream-id"], parse_sse(r.content)
            assert events[-1][2]["status"] == "ok"
            await get_until(c, f"{b.url}/v1/runs/{sid}", lambda r: r.status_code == 200,
                            "the record, written behind the run")
            # Redis restarted empty while the owner cannot write back yet (stalled), and a reader
            # that left before the final resumes on the other replica.
            os.kill(a.proc.pid, signal.SIGSTOP)
            stopped = True
            private_redis.kill()
            private_redis.start()
            statuses = []
            for _ in range(15):  # 1.5 s: B has found Redis restarted (its own lease gone) meanwhile
                resumed = await c.get(f"{b.url}/v1/stream/{sid}", headers={"Last-Event-ID": "1"})
                statuses.append(resumed.status_code)
                await asyncio.sleep(0.1)
            assert set(statuses) == {503}, statuses
            assert resumed.json()["error"]["retryable"] is True and resumed.headers["retry-after"]
            os.kill(a.proc.pid, signal.SIGCONT)
            stopped = False
            resumed = await get_until(c, f"{b.url}/v1/stream/{sid}", written_back, "the owner writing it back",
                                      headers={"Last-Event-ID": "1"})
            assert parse_sse(resumed.content) == events[1:]
    finally:
        if stopped:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()


async def test_a_stream_whose_persistence_was_given_up_is_written_back_after_a_restart(private_redis):
    """A stream whose frames passed the writer's buffer while Redis stalled is given up (its
    followers get `store_unavailable`), and goes on from memory. Redis then restarted empty: the
    owner writes back what it holds, that stream too. The write-back used to assert such a stream
    had ended, and the writer task died of it: nothing of this replica was written again."""
    from app.core.events import StartEvent, TokenEvent
    from app.streams.redis import RedisStoreSettings, RedisStreamStore

    s = RedisStreamStore(RedisStoreSettings(url=private_redis.url, ttl=30.0, max_streams=100, max_events=1000,
                                            max_bytes=1 << 20, lease_seconds=0.5, timeout=0.25,
                                            max_pending_bytes=4096))
    await s.start()
    try:
        log = await s.create(model="m", provider="p")
        log.append(StartEvent(stream_id=log.info.stream_id, model="m", provider="p"))
        await asyncio.wait_for(s.flush(), 10)
        os.kill(private_redis.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(100):  # 100 x ~90 bytes: past the 4 KiB buffer, the stream is given up
                log.append(TokenEvent(index=0, content="x" * 40))
            await asyncio.sleep(1.0)  # the stalled write fails (twice the timeout)
        finally:
            os.kill(private_redis.proc.pid, signal.SIGCONT)
        await asyncio.wait_for(s.flush(), 10)  # its followers' end written once Redis answers
        private_redis.kill()  # restarted empty
        private_redis.start()
        other = await _create_when_redis_answers(s)
        other.append(StartEvent(stream_id=other.info.stream_id, model="m", provider="p"))
        await asyncio.wait_for(s.flush(), 10)  # the writer still writes
        client = redis.from_url(private_redis.url)
        try:
            assert await client.exists(f"foundry:{{{log.info.stream_id}}}:meta")  # written back
            assert await client.exists(f"foundry:{{{other.info.stream_id}}}:events")
        finally:
            await client.aclose()
    finally:
        await s.aclose()


async def _create_when_redis_answers(store):
    from app.streams.errors import StoreUnavailable

    for _ in range(100):
        try:
            return await store.create(model="m", provider="p")
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    raise AssertionError("Redis did not answer again")


async def test_a_follower_that_waited_out_a_redis_stall_leaves_the_owner_its_lease(private_redis):
    """Redis stalls (a slow disk, a busy host: SIGSTOP here) for longer than the lease: the lease of
    a live owner lapses in Redis, for want of a Redis to renew it in. A follower's read that waited
    the stall out is a Redis that did not answer: the follower leaves the owner a lease to renew
    before judging it lost, as after a failed command. (CI of stop 47: the follower read the lapsed
    lease in the moment between the stall's end and the owner's renewal, and ended a live stream
    `replica_lost`.) The owner here renews by hand, late, so that moment is there every run."""
    from app.core.events import AssistantMessage, FinalEvent, StartEvent, TokenEvent, Usage
    from tests.test_redis_store import read_all, store

    # neither started: the test renews the owner's lease and writes its frames
    owner, follower = store(private_redis.url, lease_seconds=1.0), store(private_redis.url, lease_seconds=1.0)
    client = redis.from_url(private_redis.url)
    lease = f"foundry:lease:{{{owner.replica}}}"

    async def renew():  # the owner's lease loop: every third of the lease
        while True:
            await client.set(lease, "1", px=1000)
            await asyncio.sleep(0.3)

    renewer = asyncio.create_task(asyncio.sleep(0))
    try:
        log = await owner.create(model="m", provider="p")
        renewer = asyncio.create_task(renew())
        sid = log.info.stream_id
        log.append(StartEvent(stream_id=sid, model="m", provider="p"))
        log.append(TokenEvent(index=0, content="a"))
        await owner._owner.write(owner._owner._pending)
        owner._owner._pending.clear()
        await asyncio.sleep(1.2)  # past the follower's start-up guard (it has seen no lease yet)
        body = asyncio.create_task(read_all(await follower.open(sid, 0)))
        await asyncio.sleep(0.5)  # the follower waits in XREAD BLOCK, and finds the lease each time
        renewer.cancel()
        await asyncio.gather(renewer, return_exceptions=True)
        await client.set(lease, "1", px=1000)  # the owner's last renewal before Redis stalls
        os.kill(private_redis.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(2.5)  # the lease lapses in Redis meanwhile
        finally:
            os.kill(private_redis.proc.pid, signal.SIGCONT)
        await asyncio.sleep(0.4)  # the owner's renewal comes late (its loop slept, or ran late)
        renewer = asyncio.create_task(renew())
        log.append(TokenEvent(index=0, content="b"))
        log.append(FinalEvent(status="ok", message=AssistantMessage(content="ab"), usage=Usage(), stop_reason="stop",
                              model="m", provider="p"))
        await owner._owner.write(owner._owner._pending)
        events = parse_sse(await asyncio.wait_for(body, 10))
        assert [e for _, e, _ in events] == ["start", "token", "token", "final"], events
        assert events[-1][2]["status"] == "ok", events[-1][2].get("error")  # the owner's own end, not a claim
    finally:
        renewer.cancel()
        await client.aclose()
        for s in (owner, follower):
            await s.aclose()
