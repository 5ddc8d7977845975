"""bench/goals.py judges a run's figures: when a figure cannot judge its goal, it says inconclusive."""

import pytest


@pytest.mark.parametrize(("redis_p50", "memory_p50", "redis_cpu", "verdict"), [
    (1.0, 1.0, 120.0, "met"),            # both kept the pace: judged
    (1.0, 1.0, 140.0, "NOT met"),
    (800.0, 1.0, 120.0, "inconclusive"),  # the Redis store fell behind: its figure reads low
    (800.0, 1.0, 140.0, "NOT met"),       # low, and still over the goal
    (1.0, 80.0, 140.0, "inconclusive"),   # the memory store fell behind: the ratio reads high
    (1.0, 80.0, 120.0, "met"),            # high, and still under the goal
    (800.0, 80.0, 120.0, "inconclusive"),
])
def test_the_paced_redis_over_memory_goal_is_inconclusive_when_a_store_fell_behind(redis_p50, memory_p50, redis_cpu,
                                                                                  verdict):
    """An overloaded paced run once read the Redis store at 1.03x the memory store, `met`, with both
    far behind the pace (their tokens coalesced into fewer reads and sends)."""
    from bench.goals import paced_goals

    def target(p50: float, cpu: float) -> dict:
        return {"events": 100, "gap_added_ms": {"p99": 1.0}, "ttft_ms": {"p50": 1.0}, "transit_ms": {"p50": p50},
                "cpu_us_per_event": cpu, "outcomes": {"served": 600, "refused": 0, "failed": 0}, "streams": 600}

    paced = {"streams": 300, "tokens_per_stream": 150, "interval_ms": 20, "rounds": 2,
             "hiredis": {"redis_utils_HIREDIS_AVAILABLE": True, "extension_mapped_in_gateway": True},
             "core_share": {"load_generator": 0.2, "pacer": 0.2},
             "targets": {"floor": target(1.0, 80.0), "memory_store": target(memory_p50, 100.0),
                         "redis_store": target(redis_p50, redis_cpu)}}
    goal, = (g for g in paced_goals(paced) if g.name == "paced load, CPU per event, Redis store / memory store")
    assert goal.line().strip().split("  ")[0] == verdict, goal.line()
