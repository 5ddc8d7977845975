"""The outbox of run records (app/streams/redis/outbox.py): a run's record travels with its final
in Redis, and another replica writes it when the one that ran it cannot. On the store against a
real redis-server, then with gateway processes: a replica SIGKILLed inside its records writer's
linger (a finding of the chaos soak), and a run nobody was reading whose replica died."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable

import httpx
import pytest
import redis.asyncio as redis

from app.core.events import AssistantMessage, FinalEvent, StartEvent, TokenEvent, Usage
from app.streams.errors import SweptHook, SweptRecord
from app.streams.redis import RedisStoreSettings, RedisStreamStore
from tests.records_support import postgres, postgres_url  # noqa: F401
from tests.redis_support import Replica, start_together
from tests.support import HANG_GUARD, parse_sse, until

ADMIN = "admin-secret-for-outbox-tests-0123"
PRICES = '{"mock/*": {"input": 0, "output": 1000}}'


def store(url: str, on_swept: SweptHook | None = None, **kw) -> RedisStreamStore:
    """A store on `url`; `on_swept` set keeps the outbox (records on)."""
    args = {"ttl": 30.0, "max_streams": 100, "max_events": 1000, "max_bytes": 1 << 20, "lease_seconds": 0.5,
            "timeout": 0.5} | kw
    return RedisStreamStore(RedisStoreSettings(url=url, **args), on_swept=on_swept)


async def swept_until(replica: RedisStreamStore, taken: Callable[[], bool | Awaitable[bool]]) -> None:
    """Sweep the outboxes until `taken()` holds: a replica judges another lost only once it has
    reached Redis without a failure for a whole lease (one that just started too), so the first
    sweeps may take nothing."""
    async def sweep() -> bool:
        await replica.sweep_outbox()
        held = taken()
        return await held if inspect.isawaitable(held) else held

    await until(sweep, "the outbox of the replica that is gone taken")


async def run_one(owner: RedisStreamStore, payload: bytes) -> str:
    """A stream run to its final on `owner`, its record staged as the records observer does."""
    log = await owner.create(model="m", provider="p")
    sid = log.info.stream_id
    log.append(StartEvent(stream_id=sid, model="m", provider="p"))
    log.append(TokenEvent(index=0, content="hi"))
    log.append(FinalEvent(status="ok", message=AssistantMessage(content="hi"), usage=Usage(output_tokens=1),
                          stop_reason="stop", model="m", provider="p"))
    owner.stage_record(sid, lambda: payload)
    await owner.flush()
    return sid


async def test_a_record_its_writer_gave_up_is_handed_on_again_until_written(redis_url: str) -> None:
    swept: list[SweptRecord] = []
    # Records on: the outbox is kept. The store also sweeps on its own, every half lease to a lease;
    # with a retry after 0 s such a sweep hands the record on again, and once (a loaded CI host) it
    # did so between the run's flush and the sweep below. A lease of 30 s leaves the sweeps to the test.
    a = store(redis_url, swept.append, outbox_retry_seconds=0.0, lease_seconds=30.0)
    await a.start()
    try:
        sid = await run_one(a, b'{"id": "the record"}')
        await a.sweep_outbox()  # overdue (retry after 0 s): the writer may have dropped it
        mine = [s for s in swept if s.stream_id == sid]
        assert [s.payload for s in mine] == [b'{"id": "the record"}']
        assert mine[0].transcript is None  # this stream kept no transcript
        await a.records_written([sid])  # the database has it: it leaves the outbox
        swept.clear()
        await a.sweep_outbox()
        assert [s for s in swept if s.stream_id == sid] == []
    finally:
        await a.aclose()


async def test_without_records_nothing_is_kept(redis_url: str) -> None:
    a = store(redis_url, outbox_retry_seconds=0.0)
    await a.start()
    try:
        sid = await run_one(a, b"{}")
        client = redis.from_url(redis_url)
        assert not await client.sismember(f"foundry:outbox:{{{a.replica}}}", sid)
        assert await client.hget(f"foundry:{{{sid}}}:meta", "record") is None
        await client.aclose()
    finally:
        await a.aclose()


async def test_the_outbox_of_a_replica_that_is_gone_is_taken_by_another(redis_url: str) -> None:
    swept: list[SweptRecord] = []
    a, b = store(redis_url, lambda s: None), store(redis_url, swept.append)
    await a.start()
    await b.start()
    try:
        done = await run_one(a, b'{"id": "done"}')
        running = (await a.create(model="m", provider="p")).info.stream_id  # never ends, nobody reads it
        await a.flush()
    finally:
        await a.aclose()  # gives up its lease at once, as a replica that died loses it after the lease
    try:
        await swept_until(b, lambda: any(s.stream_id == done for s in swept))
        assert [s.payload for s in swept if s.stream_id == done] == [b'{"id": "done"}']
        await b.sweep_outbox()  # the run that never ended was ended by the first sweep, once
        events = b"".join([c async for c in await b.open(running, 0)])
        assert events.count(b"event: final") == 1 and b"replica_lost" in events
    finally:
        await b.aclose()


async def test_a_record_that_cannot_be_read_blocks_no_other(redis_url: str) -> None:
    taken: list[bytes] = []
    readable = f'{{"id": "{uuid.uuid4().hex}"}}'.encode()  # this test's own: other tests' outboxes hold records too

    def take(swept: SweptRecord) -> None:  # as the records writer's hook: a payload it cannot read raises
        if swept.payload == b"not a record":
            raise ValueError("not a record")
        taken.append(swept.payload)

    a, b = store(redis_url, lambda s: None), store(redis_url, take)
    await a.start()
    await b.start()
    try:
        poison = await run_one(a, b"not a record")
        good = await run_one(a, readable)
    finally:
        await a.aclose()
    client = redis.from_url(redis_url)
    outbox = f"foundry:outbox:{{{a.replica}}}"

    async def settled() -> bool:  # b's own sweeper may hold a's outbox mid-pass: wait for the pass's end
        return readable in taken and not await client.sismember(outbox, poison)

    try:
        await swept_until(b, settled)
        assert await client.sismember(outbox, good)  # the poison dropped (logged); the good kept until written
    finally:
        await client.aclose()
        await b.aclose()


async def test_closing_stops_a_sweeper_whose_cancel_was_lost(redis_url: str) -> None:
    """A cancel can be lost inside a Redis command: on Python 3.11 `asyncio.wait_for`, which
    redis-py wraps around every command it sends, returns the command's result instead of raising
    when the cancel lands as the command completes (fixed in 3.12), and the cluster client turns a
    cancel that lands while it connects into a connection error. The sweeper lives on after either,
    so closing the store must not rest on one cancel (a CI run hung in `aclose` this way: the
    outbox test's sweeps went on, the test waited for the sweeper to stop)."""
    a = store(redis_url, lambda s: None)
    sweeping = asyncio.Event()
    sweeps = 0

    async def sweep_losing_the_cancel() -> int:
        nonlocal sweeps
        sweeps += 1
        sweeping.set()
        if sweeps == 1:
            try:
                await asyncio.Event().wait()  # a command under way when the store closes ...
            except asyncio.CancelledError:
                pass  # ... whose result came back instead of the cancel
        return 0

    a._outbox.sweep_once = sweep_losing_the_cancel  # type: ignore[method-assign]
    await a.start()
    async with asyncio.timeout(HANG_GUARD):
        await sweeping.wait()
    async with asyncio.timeout(HANG_GUARD):  # a hang guard: without it the test waits forever
        await a.aclose()


async def test_the_owner_releases_a_frame_to_its_readers_once_redis_holds_it(redis_url: str) -> None:
    a = store(redis_url)
    await a.start()
    try:
        log = await a.create(model="m", provider="p")
        sid = log.info.stream_id
        reader = log.follow(0)
        log.append(StartEvent(stream_id=sid, model="m", provider="p"))
        log.append(TokenEvent(index=0, content="hi"))
        assert log.readable_seq <= 2
        first = await asyncio.wait_for(anext(reader), 5)  # ... once written
        client = redis.from_url(redis_url)
        top = (await client.xrevrange(f"foundry:{{{sid}}}:events", count=1))[0][0]
        assert int(top.split(b"-")[0]) >= int(first.rsplit(b"id: ", 1)[1].split(b"\n")[0])
        await client.aclose()
    finally:
        await a.aclose()


# -- gateway processes ------------------------------------------------------------------------------


async def _streaming(redis_url: str, sid: str) -> bool:
    """Whether Redis holds an event of the stream (its owner has written it)."""
    client = redis.from_url(redis_url)
    try:
        return bool(await client.xlen(f"foundry:{{{sid}}}:events"))
    finally:
        await client.aclose()


async def _record(client: httpx.AsyncClient, url: str, sid: str, key: dict[str, str], within: float = 20.0) -> dict:
    async def written() -> bool:
        nonlocal run
        run = await client.get(f"{url}/v1/runs/{sid}", headers=key)
        return run.status_code == 200

    run = httpx.Response(0)
    await until(written, f"the run record of {sid}", within)
    return run.json()


@pytest.mark.slow
async def test_a_replica_killed_inside_its_records_linger_loses_no_record(redis_url, postgres_url) -> None:  # noqa: F811
    env = {"FOUNDRY_DATABASE_URL": postgres_url, "FOUNDRY_ADMIN_KEY": ADMIN, "FOUNDRY_PRICES": PRICES}
    # A's writer lingers 10 s, so its records are still queued when it is killed.
    a, b = start_together(Replica(redis_url, FOUNDRY_RECORDS_LINGER="10", **env),
                          Replica(redis_url, FOUNDRY_RECORDS_LINGER="0", **env))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            made = await c.post(f"{b.url}/v1/admin/keys", json={"name": "team-outbox", "budget_usd": 10},
                                headers=admin)
            key = {"Authorization": f"Bearer {made.json()['key']}"}
            body = {"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}
            done = await c.post(f"{a.url}/v1/generate", json=body, headers=key)
            assert done.status_code == 200, done.text
            sid, usage = done.headers["x-stream-id"], done.json()["usage"]
            unread = await c.post(f"{a.url}/v1/generate", headers=key, json={
                **body, "model": "mock/lorem-2000", "stream": True, "provider_options": {"delay_ms": 30}})
            assert unread.status_code == 202, unread.text
            await until(lambda: _streaming(redis_url, unread.json()["stream_id"]), "the unread run streaming")
            a.kill()  # inside the linger: both records are only in A's memory ... and in Redis
            record = await _record(c, b.url, sid, key)
            assert record["status"] == "ok" and record["usage"]["output_tokens"] == usage["output_tokens"]
            assert record["usage"]["cost_usd"] == pytest.approx(usage["cost_usd"])
            transcript = (await c.get(f"{b.url}/v1/stream/{sid}/transcript", headers=key)).json()
            assert transcript["status"] == "ok" and transcript["response_messages"][0]["content"] == "Hello, world"
            lost = await _record(c, b.url, unread.json()["stream_id"], key)  # nobody read it: still recorded
            assert lost["status"] == "error" and lost["error_code"] == "replica_lost"
            spent = (await c.get(f"{b.url}/v1/usage", headers=key)).json()["total"]
            assert spent["requests"] == 2 and spent["cost_usd"] == pytest.approx(usage["cost_usd"])
    finally:
        a.stop()
        b.stop()


@pytest.mark.slow
async def test_a_reader_of_a_killed_owner_resumes_from_its_last_id_on_another_replica(redis_url) -> None:
    # The reader reads from the owner's memory. Were a frame released to it before Redis held it,
    # the replica taking over would number its final after what Redis held, and the resume from the
    # reader's last id would be refused (400, the cursor past the end) or repeat its ids with other
    # frames. Three owners, each killed mid-stream: three chances to catch a frame released early.
    # All four processes start at once; each owner serves one stream.
    b, *owners = start_together(*(Replica(redis_url) for _ in range(4)))
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            for a in owners:
                started = await c.post(f"{a.url}/v1/generate", json={
                    "model": "mock/lorem-2000", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                    "provider_options": {"delay_ms": 1}})
                sid = started.json()["stream_id"]
                raw = b""
                async with c.stream("GET", f"{a.url}/v1/stream/{sid}") as r:
                    try:
                        async for chunk in r.aiter_bytes():
                            raw += chunk
                            if raw.count(b"\n\n") >= 150 and a.proc.poll() is None:
                                a.kill()
                    except httpx.HTTPError:
                        pass  # the owner died mid-body
                seen = parse_sse(raw[:raw.rfind(b"\n\n") + 2])
                last = seen[-1][0]
                resumed = await c.get(f"{b.url}/v1/stream/{sid}", headers={"Last-Event-ID": str(last)})
                assert resumed.status_code == 200, resumed.text
                events = parse_sse(resumed.content)
                assert [i for i, _, _ in events] == list(range(last + 1, last + 1 + len(events)))
                assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final", \
                    (dict(resumed.headers), resumed.text[:2000], last)  # what the resume answered, if not
                assert events[-1][2]["error"]["code"] == "replica_lost"
    finally:
        for replica in (b, *owners):
            replica.stop()


async def test_a_store_that_keeps_no_outbox_never_encodes_the_record(redis_url: str) -> None:
    """The record's encoding is asked for only by a store that keeps it: not the memory store, nor
    a Redis store with records off."""
    from app.streams.memory import MemoryStreamStore

    def encode() -> bytes:
        raise AssertionError("encoded for a store that keeps no outbox")

    memory = MemoryStreamStore(ttl=30.0, max_streams=10, max_events=100, max_bytes=1 << 20)
    log = await memory.create(model="m", provider="p")
    memory.stage_record(log.info.stream_id, encode)
    shared = store(redis_url)  # no on_swept: records are off, the outbox is not kept
    try:
        shared.stage_record("str_unknown", encode)
    finally:
        await shared.aclose()
    encoded: list[bytes] = []
    kept = store(redis_url, lambda swept: None)
    try:
        kept.stage_record("str_unknown", lambda: encoded.append(b"{}") or b"{}")
    finally:
        await kept.aclose()
    assert encoded == [b"{}"]  # a store that keeps the outbox does ask for it
