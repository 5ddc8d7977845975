"""RedisStreamStore against a real redis-server: persistence in order, bounds, expiry, the
owner-lost claim written once. (Replicas as separate processes: tests/test_redis_replicas.py.)"""

import asyncio

import pytest
import redis.asyncio as redis

from app.config_load import secret_values
from app.core.events import AssistantMessage, FinalEvent, ReasoningEvent, StartEvent, TokenEvent, ToolCallEvent, Usage
from app.streams.errors import CANCELLED_BY_REQUEST, CursorAhead, FinalDelivered, ReplayUnavailable, RunTags, StoreUnavailable
from app.streams.redis import RedisStoreSettings, RedisStreamStore
from tests.support import parse_sse, until


def final(status="ok"):
    return FinalEvent(status=status, message=AssistantMessage(content="x"), usage=Usage(), stop_reason="stop",
                      model="m", provider="p")


def store(url, on_claim=None, observer=None, **kw):
    args = {"ttl": 30.0, "max_streams": 100, "max_events": 1000, "max_bytes": 1 << 20, "lease_seconds": 0.5,
            "timeout": 0.5} | kw
    return RedisStreamStore(RedisStoreSettings(url=url, **args), on_claim=on_claim, observer=observer)


async def read_all(frames):
    return b"".join([chunk async for chunk in frames])


async def test_frames_reach_redis_in_order_and_another_replica_replays_and_follows(redis_url):
    a, b = store(redis_url), store(redis_url)
    await a.start()
    await b.start()
    try:
        log = await a.create(model="m", provider="p")
        sid = log.info.stream_id
        log.append(StartEvent(stream_id=sid, model="m", provider="p"))
        log.append(TokenEvent(index=0, content="a"))
        await a.flush()
        follower = asyncio.create_task(read_all(await b.open(sid, 1)))  # B follows live from event 1
        for i in range(1, 50):
            log.append(TokenEvent(index=i, content=f"t{i}"))
        log.append(final())
        followed = await asyncio.wait_for(follower, 10)
        assert followed == log.frames_after(1)  # byte for byte, ids 2..52, nothing missing or repeated
        assert [i for i, _, _ in parse_sse(followed)] == list(range(2, 53))
        assert await read_all(await b.open(sid, 0)) == log.frames_after(0)
        assert await b.open("str_unknown", 0) is None
        with pytest.raises(CursorAhead):
            await b.open(sid, 53)  # past the end of a finished stream: 400, as on the owner
        with pytest.raises(FinalDelivered):
            await b.open(sid, 52)  # at the final: the reader has it all (the API answers 204)
        assert await b.cancel(sid) == "finished"
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_running_streams_events_get_their_expiry_with_the_first_write_not_with_every_write(redis_url):
    """An orphaned stream (its replica gone, nobody claiming it) still expires: its events key
    gets the running grace with the write that creates it. Later writes within a minute send no
    EXPIRE (one per write was half the writer's commands at a token a write)."""
    a = store(redis_url, ttl=30.0)
    await a.start()
    client = redis.from_url(redis_url)
    try:
        log = await a.create(model="m", provider="p")
        key = f"foundry:{{{log.info.stream_id}}}:events"
        log.append(StartEvent(stream_id=log.info.stream_id, model="m", provider="p"))
        await a.flush()
        assert 3600 < await client.ttl(key) <= 3630  # the TTL and the running grace
        await client.persist(key)  # so a later EXPIRE would show
        log.append(TokenEvent(index=0, content="a"))
        await a.flush()
        assert await client.xlen(key) == 2 and await client.ttl(key) == -1  # written, no EXPIRE sent
        log.append(final())
        await a.flush()
        assert 0 < await client.ttl(key) <= 30  # ended: the stream's own TTL
    finally:
        await client.aclose()
        await a.aclose()


async def test_redis_copy_is_bounded_like_the_memory_log_and_expires_after_the_ttl(redis_url):
    a, b = store(redis_url, max_events=16, ttl=7.0), store(redis_url)
    await a.start()
    try:
        log = await a.create(model="m", provider="p")
        sid = log.info.stream_id
        for i in range(100):
            log.append(TokenEvent(index=i, content="x" * 50))
        await a.flush()
        client = redis.from_url(redis_url)
        events_key = f"foundry:{{{sid}}}:events"
        assert log.first_seq == 85  # the memory log keeps 85..100; Redis keeps the same range
        entries = await client.xrange(events_key)
        assert int(entries[0][1][b"s"]) == 85 and entries[-1][0] == b"100-0"
        assert [i for i, _, _ in parse_sse(b"".join(e[1][b"f"] for e in entries))] == list(range(85, 101))
        with pytest.raises(ReplayUnavailable):
            await b.open(sid, 10)
        assert [i for i, _, _ in parse_sse(log.frames_after(84))] == list(range(85, 101))
        running_ttl = await client.ttl(events_key)
        assert running_ttl > 7  # running: kept while the run goes on
        log.append(final())
        await a.flush()
        for key in (events_key, f"foundry:{{{sid}}}:meta"):
            assert 0 < await client.ttl(key) <= 7  # finished: expires stream_ttl_seconds after its final
        await client.aclose()
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_follower_trimmed_past_ends_with_one_honest_final_never_a_cut_body(redis_url):
    # The flaky replica test's cause (issue 25): a reader on another replica opened before the
    # owner's writer reached Redis, and the first write kept only the retained window. It raised
    # mid-body (the HTTP response cut: "incomplete chunked read"); it ends with a final instead.
    a, b = store(redis_url, max_events=16), store(redis_url)
    await a.start()
    try:
        log = await a.create(model="m", provider="p")
        sid = log.info.stream_id
        frames = await b.open(sid, 0)  # nothing in Redis yet: it follows from the start
        for i in range(100):
            log.append(TokenEvent(index=i, content="x"))
        log.append(final())
        await a.flush()
        events = parse_sse(await asyncio.wait_for(read_all(frames), 10))
        assert [e for _, e, _ in events] == ["final"]
        error = events[0][2]["error"]
        assert error["code"] == "replay_unavailable" and error["first_available"] == log.first_seq
        with pytest.raises(ReplayUnavailable):  # opened now, it is the 410 before any byte
            await b.open(sid, 0)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_lost_owner_is_claimed_once_however_many_followers_notice(redis_url):
    owner, f1, f2 = store(redis_url), store(redis_url), store(redis_url)
    log = await owner.create(model="m", provider="p")  # never started: no lease renewal (a dead process)
    sid = log.info.stream_id
    log.append(StartEvent(stream_id=sid, model="m", provider="p"))
    log.append(ReasoningEvent(index=0, content="think"))
    log.append(TokenEvent(index=0, content="a"))
    log.append(ToolCallEvent(id="c1", name="add", index=0, args_fragment='{"a": 1}', is_final=True, arguments={"a": 1}))
    log.append(TokenEvent(index=1, content=" and b"))
    await owner._owner.write({sid: _pending(log)})
    readers = [asyncio.create_task(read_all(await s.open(sid, 0))) for s in (f1, f2, f1, f2)]
    bodies = await asyncio.wait_for(asyncio.gather(*readers), 10)
    assert len(set(bodies)) == 1
    events = parse_sse(bodies[0])
    assert [(i, e) for i, e, _ in events] == [(1, "start"), (2, "reasoning"), (3, "token"), (4, "tool_call"),
                                               (5, "token"), (6, "final")]
    lost = events[-1][2]
    assert lost["status"] == "error"
    assert lost["error"] == {"code": "replica_lost", "retryable": True,
                             "message": "the replica running this stream stopped; retry the request"}
    # What was released before the owner died, rebuilt from the stored events: an honest partial answer.
    assert lost["message"] == {"role": "assistant", "content": "a and b",
                               "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}],
                               "reasoning": [{"text": "think", "provider": "p"}]}
    assert lost["usage"]["output_tokens"] is None  # never reported: unknown, not 0
    client = redis.from_url(redis_url)
    finals = [e for e in await client.xrange(f"foundry:{{{sid}}}:events") if b"e" in e[1]]
    assert len(finals) == 1 and finals[0][0] == b"6-0"  # written once
    await client.aclose()
    for s in (owner, f1, f2):
        await s.aclose()


async def test_a_cancel_of_a_stream_nobody_runs_any_more_ends_it_here_with_what_it_released(redis_url):
    owner, other = store(redis_url), store(redis_url)
    log = await owner.create(model="m", provider="p")  # never started: no lease renewal, no cancel listener
    sid = log.info.stream_id
    log.append(StartEvent(stream_id=sid, model="m", provider="p"))
    log.append(TokenEvent(index=0, content="so far"))
    await owner._owner.write({sid: _pending(log)})
    client = redis.from_url(redis_url)
    await client.delete(owner._link.lease_key(owner.replica))  # the owner is gone
    await asyncio.sleep(0.5)  # a replica judges another lost once it reached Redis for a whole lease
    assert await other.cancel(sid) == "cancelled"
    events = parse_sse(await read_all(await other.open(sid, 0)))
    assert [e for _, e, _ in events] == ["start", "token", "final"]
    final = events[-1][2]
    assert final["status"] == "cancelled" and final["error"] == CANCELLED_BY_REQUEST
    assert final["message"]["content"] == "so far"
    assert await other.cancel(sid) == "finished"
    await client.aclose()
    for s in (owner, other):
        await s.aclose()


async def test_an_unreachable_redis_refuses_new_streams_at_once():
    s = store("redis://127.0.0.1:1/0")  # nothing listens on port 1
    await s.start()
    try:
        assert not await s.ping()
        with pytest.raises(StoreUnavailable) as info:
            await s.create(model="m", provider="p")
        assert info.value.status == 503 and info.value.retryable
        assert len(s) == 0
    finally:
        await s.aclose()


def _pending(log):
    from app.streams.redis.owner import Pending

    pending = Pending(log)
    pending.entries.extend((seq, frame, False) for seq, frame in enumerate(log._frames, start=log.first_seq))
    return pending


async def test_a_rewritten_batch_overlapping_stored_events_reads_once(redis_url):
    # A write that failed mid-way is retried merged with later frames: its entry overlaps the stored
    # ones. Readers still see every id once, in order.
    from app.streams.redis.owner import Pending

    owner, reader = store(redis_url), store(redis_url)
    await owner.start()
    try:
        log = await owner.create(model="m", provider="p")
        sid = log.info.stream_id
        for i in range(5):
            log.append(TokenEvent(index=i, content=f"t{i}"))
        await owner.flush()  # entry 1..5
        log.sink = None  # events 6 and 7 reach Redis only through the merged retry below
        for i in range(5, 7):
            log.append(TokenEvent(index=i, content=f"t{i}"))
        frames = list(log._frames)
        await owner._owner.write({sid: Pending(log, [(s, frames[s - 1], False) for s in range(3, 8)])})  # 3..7
        log.sink = owner._owner.sink
        log.append(final())
        await owner.flush()
        events = parse_sse(await read_all(await reader.open(sid, 0)))
        assert [i for i, _, _ in events] == [1, 2, 3, 4, 5, 6, 7, 8]
        assert await read_all(await reader.open(sid, 0)) == log.frames_after(0)
        events = parse_sse(await read_all(await reader.open(sid, 4)))
        assert [i for i, _, _ in events] == [5, 6, 7, 8]
    finally:
        await owner.aclose()
        await reader.aclose()


async def test_redis_unreachable_at_start_readyz_names_the_store_and_runs_fail_fast():
    import httpx

    from app.main import create_app
    from app.settings import Settings
    from tests.support import serve

    app = create_app(Settings(redis_url="redis://:hunter2-redis-pass@127.0.0.1:1/0", redis_timeout_seconds=0.5))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        assert (await c.get("/healthz")).status_code == 200
        ready = await c.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["store_backend"] == "redis" and ready.json()["store"] is False
        r = await c.post("/v1/stream", json={"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert r.json()["error"]["retryable"] is True and "hunter2" not in r.text
    assert "hunter2-redis-pass" in secret_values(Settings(redis_url="redis://:hunter2-redis-pass@h:1/0"))


async def test_events_lost_by_the_store_end_a_reader_with_an_honest_final_not_a_cut_body(redis_url):
    # A master SIGKILLed before it replicated a write (Redis Cluster failover) leaves a hole in the
    # stored events. A reader that reaches it gets what came before and one final saying so; before,
    # the error escaped the body mid-response and the connection was cut (incomplete chunked read).
    owner, reader = store(redis_url), store(redis_url)
    await owner.start()
    try:
        log = await owner.create(model="m", provider="p")
        sid = log.info.stream_id
        for batch in ((0, 1), (2, 3)):
            for i in batch:
                log.append(TokenEvent(index=i, content=f"t{i}"))
            await owner.flush()  # entries 1..2 and 3..4
        client = redis.from_url(redis_url)
        assert await client.xdel(f"foundry:{{{sid}}}:events", "4-0") == 1  # the write the dead master lost
        await client.aclose()
        log.append(TokenEvent(index=4, content="t4"))
        log.append(final())
        await owner.flush()  # entry 5..6
        events = parse_sse(await read_all(await reader.open(sid, 0)))
        assert [i for i, _, _ in events] == [1, 2, 3] and [e for _, e, _ in events].count("final") == 1
        assert events[-1][1] == "final" and events[-1][2]["error"]["code"] == "replay_unavailable"
        assert [d["content"] for _, e, d in events if e == "token"] == ["t0", "t1"]
    finally:
        await owner.aclose()
        await reader.aclose()


async def test_a_subscription_at_the_final_is_204_on_the_replica_that_did_not_run_it(redis_url):
    """An EventSource that did not close on `final` reconnects with Last-Event-ID = the final's id;
    through a load balancer it may reach the other replica, which reads the stream from Redis."""
    import httpx

    from app.main import create_app
    from app.settings import Settings
    from tests.support import serve

    settings = Settings(redis_url=redis_url)
    async with serve(create_app(settings)) as a, serve(create_app(settings)) as b, httpx.AsyncClient() as c:
        answer = await c.post(f"{a}/v1/stream", json={"model": "mock/simple",
                                                     "messages": [{"role": "user", "content": "hi"}]})
        last_id, kind, _ = parse_sse(answer.text)[-1]
        assert kind == "final"
        sid = answer.headers["x-stream-id"]
        for replica in (a, b):
            done = await c.get(f"{replica}/v1/stream/{sid}", headers={"Last-Event-ID": str(last_id)})
            assert done.status_code == 204 and done.content == b"", (replica, done.text)
        before = await c.get(f"{b}/v1/stream/{sid}", headers={"Last-Event-ID": str(last_id - 1)})
        assert [k for _, k, _ in parse_sse(before.text)] == ["final"]


async def test_a_final_written_just_after_a_follower_read_nothing_still_reaches_it(redis_url):
    """The final (the owner's, or a claimer's for a lost owner) can land between a follower's
    blocking read that found nothing and its look at the stream's meta, which then says `done`:
    the follower reads that final; its body never ends without one."""
    a, b = store(redis_url), store(redis_url)
    await a.start()
    await b.start()
    try:
        log = await a.create(model="m", provider="p")
        sid = log.info.stream_id
        log.append(StartEvent(stream_id=sid, model="m", provider="p"))
        log.append(TokenEvent(index=0, content="a"))
        await a.flush()
        read = b._link.xread
        calls = 0

        async def read_then_the_final_lands(*args, **kwargs):
            nonlocal calls
            calls += 1
            reply = await read(*args, **kwargs)
            if calls == 1 and not reply:  # this read found nothing; the final lands right after it
                log.append(final())
                await a.flush()
            return reply

        b._link.xread = read_then_the_final_lands
        body = await asyncio.wait_for(read_all(await b.open(sid, 2)), 10)
        events = parse_sse(body)
        assert [(i, e) for i, e, _ in events] == [(3, "final")]
    finally:
        await a.aclose()
        await b.aclose()


class _ClaimOrder:
    """Claim hooks that note whether the claimed stream's final was in Redis when each was called."""

    def __init__(self, url):
        self.client = redis.from_url(url)
        self.calls = []

    async def _final_stored(self, sid):
        return any(b"e" in fields for _, fields in await self.client.xrange(f"foundry:{{{sid}}}:events"))

    async def free_slot(self, owner, slot):
        self.calls.append(("free_slot", owner, slot, await self._final_stored(self.sid)))

    async def claimed(self, run):
        self.calls.append(("claimed", run.owner, run.tags.slot, await self._final_stored(run.stream_id)))


@pytest.mark.parametrize("ending", ["lost", "cancelled"])
async def test_a_claimed_runs_slot_is_free_before_its_final_is_written(redis_url, ending):
    # A client that reads the claimed final and asks again at once must find its key's slot free
    # (found by the soak of two replicas: 429 to the retry, the slot freed just after the final).
    hooks = _ClaimOrder(redis_url)
    owner = store(redis_url)
    other = store(redis_url, on_claim=hooks)
    log = await owner.create(model="m", provider="p", owner="key-1", run=RunTags(request_id="r1", slot="slot-1"))
    hooks.sid = sid = log.info.stream_id
    log.append(StartEvent(stream_id=sid, model="m", provider="p"))
    await owner._owner.write({sid: _pending(log)})
    try:
        if ending == "lost":
            events = parse_sse(await asyncio.wait_for(read_all(await other.open(sid, 0)), 10))
        else:
            await hooks.client.delete(owner._link.lease_key(owner.replica))
            await asyncio.sleep(0.5)
            assert await other.cancel(sid) == "cancelled"
            events = parse_sse(await read_all(await other.open(sid, 0)))
        assert events[-1][1] == "final"
        assert hooks.calls == [("free_slot", "key-1", "slot-1", False), ("claimed", "key-1", "slot-1", True)]
    finally:
        await hooks.client.aclose()
        for s in (owner, other):
            await s.aclose()


async def test_a_stalled_redis_fails_the_owners_write_within_its_bound_though_the_writer_has_no_socket_timeout(
        private_redis):
    """The owner's writes go through a client without redis-py's socket timeout (its cost on every
    command: app/streams/redis/link.py): `Timed` alone bounds them. A Redis that stops answering
    (SIGSTOP) fails the write within twice the store's timeout, and the stream is written whole
    once it answers again."""
    import os
    import signal

    from app.streams.redis.link import LAG_ALLOWANCE

    failures: list[float] = []

    def observe(store_name: str, op: str, seconds: float, failed: bool) -> None:
        if op == "write" and failed:
            failures.append(seconds)

    owner = store(private_redis.url, observer=observe, lease_seconds=5.0)
    assert owner._link.writer.connection_pool.connection_kwargs.get("socket_timeout") is None
    reader = store(private_redis.url)
    await owner.start()
    try:
        log = await owner.create(model="m", provider="p")
        sid = log.info.stream_id
        log.append(StartEvent(stream_id=sid, model="m", provider="p"))
        await owner.flush()
        os.kill(private_redis.proc.pid, signal.SIGSTOP)
        try:
            log.append(TokenEvent(index=0, content="a"))
            await until(lambda: bool(failures), "the write's failure (it waited on a Redis that did not answer)", 10)
        finally:
            os.kill(private_redis.proc.pid, signal.SIGCONT)
        assert failures[0] <= 2 * 0.5 * LAG_ALLOWANCE, failures
        log.append(FinalEvent(status="ok", message=AssistantMessage(content="a"), usage=Usage(), stop_reason="stop",
                              model="m", provider="p"))
        await asyncio.wait_for(owner.flush(), 10)
        # what Redis holds, as another replica reads it (a retried batch may overlap what the stalled write stored)
        frames = await asyncio.wait_for(read_all(await reader.open(sid, 0)), 10)
        assert [e for _, e, _ in parse_sse(frames)] == ["start", "token", "final"]
    finally:
        for s in (owner, reader):
            await s.aclose()
