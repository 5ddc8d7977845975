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

from tests.records_support import postgres, postgres_url  # noqa: F401
from tests.redis_support import Replica
from tests.support import parse_sse

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
    a, b = Replica(private_redis.url).start(), Replica(private_redis.url).start()
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{a.url}/v1/generate", json=ask("mock/lorem-2000", 30))
            assert r.status_code == 202, r.text
            reader = Reader(c, r.json()["stream_id"])
            await reader.read(a.url, until=3)
            private_redis.kill()  # Redis restarted empty (as compose runs it): the owner writes it back
            await asyncio.sleep(3)
            private_redis.start()
            for _ in range(100):
                if (await c.get(f"{b.url}/v1/stream/{reader.sid}/transcript")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
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
    a, b = Replica(private_redis.url).start(), Replica(private_redis.url).start()
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
    a, b = Replica(private_redis.url, **env).start(), Replica(private_redis.url, **env).start()
    stopped = False
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{a.url}/v1/stream", json={**ask("mock/tool_call", 0), "stream": False})
            sid, events = r.headers["x-stream-id"], parse_sse(r.content)
            assert events[-1][2]["status"] == "ok"
            for _ in range(100):  # its record is written behind the run
                if (await c.get(f"{b.url}/v1/runs/{sid}")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
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
            for _ in range(100):  # the owner writes it back
                resumed = await c.get(f"{b.url}/v1/stream/{sid}", headers={"Last-Event-ID": "1"})
                if resumed.status_code == 200:
                    break
                assert resumed.status_code == 503, resumed.text
                await asyncio.sleep(0.1)
            assert resumed.status_code == 200 and parse_sse(resumed.content) == events[1:]
    finally:
        if stopped:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()
