"""The stream log: numbered frames, replay, bounded memory, expiry."""

import asyncio

import orjson
import pytest

from app.core.errors import RequestError
from app.core.events import (
    AssistantMessage,
    FinalEvent,
    ReasoningEvent,
    StartEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
)
from app.streams.errors import ReplayUnavailable, StoreFull
from app.streams.frames import decode_frames, encode_frame
from app.streams.log import WINDOW
from app.streams.memory import MemoryStreamStore, parse_cursor
from tests.support import parse_sse


def final():
    return FinalEvent(status="ok", message=AssistantMessage(content="x"), usage=Usage(), stop_reason="stop",
                      model="m", provider="p")


def store(**kw):
    args = {"ttl": 60.0, "max_streams": 10, "max_events": 1000, "max_bytes": 1 << 20} | kw
    return MemoryStreamStore(**args)


async def test_frames_are_numbered_and_replayable_from_any_point():
    log = await store().create(model="m", provider="p")
    for i in range(3):
        log.append(TokenEvent(index=i, content=f"t{i}"))
    log.append(final())
    assert [i for i, _, _ in parse_sse(log.frames_after(0))] == [1, 2, 3, 4]
    assert [(i, e) for i, e, _ in parse_sse(log.frames_after(2))] == [(3, "token"), (4, "final")]
    assert log.frames_after(4) == b"" and log.finished
    with pytest.raises(RuntimeError):
        log.append(TokenEvent(index=9, content="late"))


async def test_each_log_is_bounded_and_refuses_replay_of_dropped_events():
    log = await store(max_events=5).create(model="m", provider="p")
    for i in range(20):
        log.append(TokenEvent(index=i, content="x" * 10))
    assert len(log) == 5
    log.check_replay(15)
    with pytest.raises(ReplayUnavailable):
        log.check_replay(3)
    log = await store(max_bytes=4096).create(model="m", provider="p")
    for i in range(1000):
        log.append(TokenEvent(index=i, content="y" * 100))
    assert log.size_bytes <= 4096


async def test_follow_replays_then_follows_live_until_final():
    log = await store().create(model="m", provider="p")
    log.append(TokenEvent(index=0, content="a"))
    got: list[bytes] = []
    first_read = asyncio.Event()

    async def reader():
        async for chunk in log.follow(0):
            got.append(chunk)
            first_read.set()

    task = asyncio.create_task(reader())
    await first_read.wait()
    log.append(TokenEvent(index=1, content="b"))
    log.append(final())
    await asyncio.wait_for(task, 5)
    assert [e for _, e, _ in parse_sse(b"".join(got))] == ["token", "token", "final"]


async def test_finished_streams_expire_and_the_store_is_bounded():
    s = store(ttl=0.0, max_streams=2)
    a = await s.create(model="m", provider="p")
    a.append(final())
    assert s.get(a.info.stream_id) is None  # ttl 0: gone as soon as it finished
    s = store(max_streams=2)
    a, _running = await s.create(model="m", provider="p"), await s.create(model="m", provider="p")
    a.append(final())
    c = await s.create(model="m", provider="p")  # evicts the oldest finished stream
    assert s.get(a.info.stream_id) is None and s.get(c.info.stream_id) is c
    with pytest.raises(StoreFull):
        await s.create(model="m", provider="p")  # b and c still running


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5", "", "9" * 30])
def test_garbage_last_event_id_is_a_400(bad):
    with pytest.raises(RequestError) as err:
        parse_cursor(bad, None)
    assert err.value.status == 400 and err.value.field == "Last-Event-ID"


def test_cursor_sources():
    assert parse_cursor(None, None) == 0
    assert parse_cursor(None, 4) == 4
    assert parse_cursor(" 3 ", 9) == 3


@pytest.mark.parametrize("event", [
    TokenEvent(index=3, content='say "hi"\n\u2028 \U0001f600 </script>'),
    ReasoningEvent(index=0, content="\\ \t\x00"),
    TokenEvent(index=12, content=""),
    TokenEvent(index=4, content="I can't help with that", refusal=True),
])
def test_the_text_delta_fast_path_encodes_the_same_bytes(event) -> None:
    # encode_frame skips event.data() for text deltas; the frame must not change.
    general = b"id: 7\nevent: %s\ndata: %s\n\n" % (event.type.encode(), orjson.dumps(event.data()))
    assert encode_frame(7, event) == general


def test_content_frames_decode_back_to_their_events_start_and_final_are_skipped() -> None:
    content = [
        TokenEvent(index=0, content='say "hi"\n\u2028 \U0001f600'),
        TokenEvent(index=1, content="I can't", refusal=True),
        ReasoningEvent(index=0, content="\\ \t"),
        ToolCallEvent(id="c1", name="add", index=0, args_fragment='{"a": ', is_final=False),
        ToolCallEvent(id="c1", name="add", index=0, args_fragment="1}", is_final=True, arguments={"a": 1}),
        ToolCallEvent(id="s1", name="web_search", index=1, args_fragment="{}", is_final=True, arguments={}, server=True),
        ToolResultEvent(tool_call_id="s1", name="web_search", content="sunny", is_error=True),
    ]
    around = [StartEvent(stream_id="str_1", model="m", provider="p"), *content,
              FinalEvent(status="ok", message=AssistantMessage(content="x"), usage=Usage(), stop_reason="stop",
                         model="m", provider="p")]
    frames = b"".join(encode_frame(i, e) for i, e in enumerate(around, start=1))
    assert decode_frames(frames) == content


@pytest.mark.parametrize("max_events, ahead", [(1000, WINDOW + 1), (4, 5)])
async def test_a_held_log_keeps_what_its_reader_has_not_taken_and_makes_the_writer_wait(max_events, ahead) -> None:
    log = store(max_events=max_events).create_local(model="m", provider="p", held=True)
    written: list[int] = []

    async def writer() -> None:
        for i in range(100):
            log.append(TokenEvent(index=i, content=f"t{i} "))
            written.append(i)
            if log.lagging:
                await log.room()  # as the run does after each released batch
        log.append(final())

    writing = asyncio.ensure_future(writer())
    await asyncio.sleep(0)
    # No reader yet: the writer ran a window ahead (or to the log's bounds), then waits; nothing dropped.
    assert len(written) == ahead and len(log) == ahead
    raw = b"".join([chunk async for chunk in log.follow(0, hold=True)])
    await writing
    events = parse_sse(raw)
    assert [i for i, _, _ in events] == list(range(1, 102))  # nothing lost to the reader that holds
    assert len(log) <= max_events  # and once it let go, the log keeps to its bounds


async def test_a_log_nobody_holds_drops_its_oldest_frames_and_a_late_reader_gets_410() -> None:
    log = store(max_events=4).create_local(model="m", provider="p")
    for i in range(20):
        log.append(TokenEvent(index=i, content="x"))
    assert not log.over_bounds and len(log) == 4 and log.first_seq == 17
    with pytest.raises(ReplayUnavailable):
        log.check_replay(0)


async def test_a_finished_stream_kept_for_replay_lets_go_of_its_run() -> None:
    """A stream stays replayable for its TTL after its final; what ran it (the run's task, and
    through it the run, its accumulator, gate, transcript builder and upstream response) is
    not kept with it. The log's canceller held all of it, 77 objects for the collector to walk per
    finished stream instead of 15 (docs/performance.md)."""
    import gc

    import httpx

    from app.main import create_app
    from app.settings import Settings
    from tests.support import serve, tasks_started

    ask = {"model": "mock/lorem-5", "messages": [{"role": "user", "content": "hi"}]}
    async with serve(create_app(Settings(records=False))) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        with tasks_started() as started:
            response = await client.post("/v1/stream", json=ask)
        stream_id = response.headers["x-stream-id"]
        runs = [ref for name, ref in started if name == "RunTasks._lifetime"]  # the run's task
        assert parse_sse(response.text)[-1][2]["status"] == "ok" and len(runs) == 1
        # replayable; and this next request on the connection lets go of the first one's response
        replay = await client.get(f"/v1/stream/{stream_id}")
        assert parse_sse(replay.text) == parse_sse(response.text)
        gc.collect()
        assert runs[0]() is None, "the finished stream keeps its run's task"


async def test_readers_that_leave_a_silent_stream_leave_no_waiters_piling_up() -> None:
    """Each reader waits for the next append on a future of its own; one that leaves (its client
    gone) while nothing is appended leaves a cancelled future behind, and those are dropped as
    more readers come, not kept until the stream's next event."""
    log = await store().create(model="m", provider="p")
    log.append(TokenEvent(index=0, content="t0"))

    async def read() -> None:
        async for _ in log.follow(0):
            pass

    for _ in range(5):
        readers = [asyncio.create_task(read()) for _ in range(40)]
        await asyncio.sleep(0.01)  # each took the first frame and waits for the next
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    waiting = asyncio.create_task(read())
    await asyncio.sleep(0.01)
    assert len(log._waiters or ()) <= 17
    log.append(final())
    await asyncio.wait_for(waiting, 5)  # the reader that stayed is woken and ends with the final


async def test_a_finished_facade_stream_keeps_its_frames_not_its_events() -> None:
    """A drop-in stream's log keeps its events for the facade that translates them (app/api/compat);
    once that reader has read the final, the log lets go of them: the stream stays kept for its TTL
    with its frames, not with an event object per token."""
    import gc

    import httpx

    from app.core.events import TokenEvent
    from app.main import create_app
    from app.settings import Settings
    from tests.support import serve

    def tokens_alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is TokenEvent)

    ask = {"model": "mock/lorem-20", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with serve(create_app(Settings(records=False))) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        assert (await client.post("/v1/chat/completions", json=ask)).status_code == 200
        before = tokens_alive()
        for _ in range(5):
            response = await client.post("/v1/chat/completions", json=ask)
            assert response.status_code == 200 and "[DONE]" in response.text
        await client.get("/healthz")  # the connection's last request lets go of the last answer
        assert tokens_alive() - before < 20, "finished facade streams keep their token events"


def test_a_finished_logs_packed_frames_read_as_its_frames_did() -> None:
    """`PackedFrames` (a finished log's frames in one bytes object) gives what the deque of frames
    gave: the same frames popped from the left, iterated, and every span a reader or the store's
    writer takes (by count, by bytes: the frame that reaches the byte budget is the last)."""
    import random
    from collections import deque

    from app.streams.frames import PackedFrames

    rng = random.Random(7)
    frames = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(40)]
    packed, live = PackedFrames(frames), deque(frames)
    for _ in range(5):  # the log evicts from the left while its holding reader catches up
        assert packed.popleft() == live.popleft()
    assert len(packed) == len(live) and list(packed) == list(live)
    kept = list(live)
    for offset in range(len(kept)):
        for stop in range(offset + 1, len(kept) + 1):
            for max_bytes in (None, 1, 25, 100, 10_000):
                for max_frames in (1, 3, 1000):
                    taken: list[bytes] = []
                    for frame in kept[offset:min(stop, offset + max_frames)]:
                        taken.append(frame)
                        if max_bytes is not None and sum(map(len, taken)) >= max_bytes:
                            break
                    assert packed.span(offset, stop, max_bytes, max_frames) == (b"".join(taken), len(taken))
    while packed:
        packed.popleft()
    with pytest.raises(IndexError):
        packed.popleft()


async def test_a_finished_log_holds_its_frames_in_a_few_allocations() -> None:
    """A log kept for replay after its final holds its frames packed (`PackedFrames`): a couple of
    allocations, not one small bytes object per event scattered over the heap for the stream's
    TTL (RSS per finished 200-event stream: 59-62 KiB before, about 50 after; docs/performance.md)."""
    import gc
    import tracemalloc

    tracemalloc.start()
    try:
        log = await store().create(model="m", provider="p")
        for i in range(200):
            log.append(TokenEvent(index=i, content=f"token {i} "))
        log.append(final())
        gc.collect()
        held = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/app/streams/*")])
        blocks = sum(stat.count for stat in held.statistics("filename"))
    finally:
        tracemalloc.stop()
    assert blocks < 20, f"a finished log holds its frames in {blocks} allocations"
    assert [i for i, _, _ in parse_sse(log.frames_after(0))] == list(range(1, 202))


async def test_a_relay_reader_waits_on_a_future_and_leaving_mid_wait_harms_nothing() -> None:
    """The same-wire relay's one reader waits for the next frame on a future: frames pushed while it
    waits wake it, a reader cancelled mid-wait leaves nothing that breaks the next push or reader,
    and the final ends the read."""
    from app.streams.relay import Relay

    relay = Relay()
    first = relay.follow()
    waiting = asyncio.create_task(anext(first))
    await asyncio.sleep(0)
    relay.push(b"a")
    assert await asyncio.wait_for(waiting, 5) == (b"a", None)
    gone = asyncio.create_task(anext(first))
    await asyncio.sleep(0)
    gone.cancel()  # the client left while the reader waited
    await asyncio.gather(gone, return_exceptions=True)
    relay.push(b"b")  # nobody waits: kept for a reader
    again = relay.follow()
    assert await asyncio.wait_for(anext(again), 5) == (b"b", None)
    later = asyncio.create_task(anext(again))
    await asyncio.sleep(0)
    relay.push(b"c")
    relay.finish(final())
    assert await asyncio.wait_for(later, 5) == (b"c", final())


@pytest.mark.parametrize("hold", [True, False])
async def test_followers_at_the_live_tail_and_behind_it_read_every_frame_once_in_order(hold):
    # A follower that keeps up takes one new frame per append (the live tail's short path); one
    # that falls behind takes what piled up in batches. Both read exactly what the log holds.
    import random

    rng = random.Random(7)
    log = await store(max_events=64).create(model="m", provider="p")
    got: list[bytes] = []
    reader = log.follow(0, hold=hold)
    pending = asyncio.ensure_future(reader.__anext__())
    for i in range(300):
        log.append(TokenEvent(index=i, content="t" * rng.randint(1, 40)))
        for _ in range(rng.choice((0, 1, 1, 3))):  # sometimes the reader falls behind, then catches up
            await asyncio.sleep(0)
            if pending.done():
                got.append(pending.result())
                pending = asyncio.ensure_future(reader.__anext__())
    log.append(final())
    try:
        while True:
            got.append(await pending)
            pending = asyncio.ensure_future(reader.__anext__())
    except StopAsyncIteration:  # the final was read
        pass
    read = b"".join(got)
    assert [i for i, _, _ in parse_sse(read)] == list(range(1, 302))
    assert read.endswith(log.frames_after(log.first_seq - 1))  # the same bytes as what the log retains
    assert log.first_seq > 200  # it kept its bound (64) while the reader took the rest
