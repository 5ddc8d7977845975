"""The loop-lag monitor's two readings (app/lifecycle.py `LoopLag`): admission's, which counts a
stall at once and decays, and the Redis reply timeout's, the lateness summed, so that a wait is
stretched by as long as the loop held it up and no more (app/streams/redis/link.py `Timed`)."""

from __future__ import annotations

import asyncio

from app.lifecycle import LoopLag
from app.streams.redis.link import LAG_ALLOWANCE, RedisLink


def test_a_stall_counts_at_once_for_admission_and_decays_with_on_time_wake_ups() -> None:
    lag = LoopLag(interval=0.05)
    lag.note(0.12)
    assert lag.current == 0.12
    for _ in range(3):
        lag.note(0.0)
    assert lag.current < 0.12 / 4


def test_the_lateness_of_every_wake_up_is_summed() -> None:
    lag = LoopLag(interval=0.05)
    for late in (0.2, 0.0, 0.1, 0.0):
        lag.note(late)
    assert abs(lag.late_total - 0.3) < 1e-9


async def test_a_wait_is_stretched_by_the_lateness_during_it_not_before_it() -> None:
    """A reply that never comes: the bound (0.2 s) moves out by the lateness noted during the wait
    (0.3 s, noted by hand: no timing involved), never by what was noted before the wait began."""
    link = RedisLink("redis://127.0.0.1:1/0", ttl=10, lease_seconds=2, timeout=0.1, prefix="lag-test",
                     observer=None)
    lag = LoopLag(interval=0.05)
    loop = asyncio.get_running_loop()
    LoopLag._loops[loop] = lag  # registered as `start` does, without its timer: the lateness is ours to note
    try:
        lag.note(5.0)  # a stall before the wait: stretches nothing
        timed = link.timed("read")
        await timed.__aenter__()
        lag.note(0.3)
        handle = timed._handle
        timed._judge(loop)  # judged at once: the deadline is the bound plus the lateness during the wait
        assert timed._handle is not handle
        assert abs(timed._handle.when() - (timed._watch.began + 0.2 + 0.3)) < 1e-6
        lag.note(10.0)  # more than the allowance
        timed._judge(loop)
        assert abs(timed._handle.when() - (timed._watch.began + LAG_ALLOWANCE * 0.2)) < 1e-6
        timed._handle.cancel()
        timed.timeout.reschedule(None)
        await timed.__aexit__(None, None, None)
    finally:
        LoopLag._loops.pop(loop, None)
        await link.client.aclose()
