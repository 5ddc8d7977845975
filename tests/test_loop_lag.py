"""The loop-lag monitor's two readings (app/lifecycle.py `LoopLag`): admission's, which counts a
stall at once, and the Redis reply timeout's, averaged so that one stall does not stretch the wait
on a Redis that is gone while a loop that keeps running late still gets more time."""

from __future__ import annotations

from app.lifecycle import LoopLag


def test_one_stall_counts_at_once_for_admission_but_not_for_the_redis_wait() -> None:
    lag = LoopLag(interval=0.05)
    lag.note(0.12)
    assert lag.current == 0.12
    assert lag.smoothed < lag.interval  # the Redis bound is not stretched for it
    for _ in range(3):
        lag.note(0.0)
    assert lag.current < 0.12 / 4
    assert lag.smoothed < 0.12 / 2


def test_a_loop_that_keeps_running_late_stretches_the_redis_wait() -> None:
    lag = LoopLag(interval=0.05)
    for _ in range(4):
        lag.note(0.2)
    assert lag.smoothed > lag.interval
    assert 0.1 < lag.smoothed <= 0.2  # an average of what was seen, never more


def test_the_average_fades_once_the_loop_is_on_time_again() -> None:
    lag = LoopLag(interval=0.05)
    for _ in range(20):
        lag.note(0.3)
    for _ in range(10):
        lag.note(0.0)
    assert lag.smoothed < lag.interval
