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


class _Windows:
    """bench/instructions.py's `Counted`, replaying the counts of windows measured under callgrind."""

    def __init__(self, rates: list[float], load: float = 0.0) -> None:
        self.rates, self.load = list(rates), load
        self.served: list[tuple[str | None, int]] = []

    def window(self, model: str | None = None, streams: int = 0):
        from bench.instructions import Window

        self.served.append((model, streams))
        seconds = 2.0
        return Window(round(self.rates.pop(0) * seconds + (self.load if streams else 0)), seconds)


def test_the_instructions_bench_takes_the_idle_rate_once_the_start_up_work_is_done():
    """Measured on the gateway under callgrind: the first window after start-up or a warm-up ran
    15.6M and 11.3M instructions a second (its first records written, their statements compiled), the
    next ones 0.62-0.69M. Taken from the first window, the idle rate was 25 times too high, and
    subtracted from a stream's count it took most of a chunk away (0.97x the floor, where it is 2.1x)."""
    from bench.instructions import idle_rate

    assert idle_rate(_Windows([15.6e6, 0.65e6, 0.62e6])) == 0.62e6
    assert idle_rate(_Windows([11.3e6, 2.4e6, 0.66e6, 0.64e6])) == 0.64e6
    with pytest.raises(SystemExit, match="did not go idle"):
        idle_rate(_Windows([9e6, 5e6, 3e6, 2e6]), most=4)


def test_the_instructions_bench_counts_what_a_load_left_to_do_until_the_process_is_idle_again():
    """A load's records are written after its streams ended: the windows after it belong to it until
    one runs at the idle rate; what the timers ran in all of them is taken out."""
    from bench.instructions import per_stream

    windows = _Windows([0.6e6, 4e6, 2e6, 0.6e6], load=100e6)
    cost = per_stream(windows, "bench/chunks-1", 50, rate=0.6e6)  # type: ignore[arg-type]
    assert windows.served == [("bench/chunks-1", 50), (None, 0), (None, 0), (None, 0)]
    assert cost == pytest.approx((100e6 + (4e6 - 0.6e6) * 2 + (2e6 - 0.6e6) * 2) / 50)


def test_the_instructions_bench_gives_up_on_a_load_after_which_the_process_never_goes_idle():
    """As the idle rate does: a process still busy after `most` windows ends the benchmark with a
    reason, rather than keeping it running."""
    from bench.instructions import per_stream

    windows = _Windows([0.6e6] + [3e6] * 5, load=100e6)
    with pytest.raises(SystemExit, match="did not go idle"):
        per_stream(windows, "bench/chunks-1", 50, rate=0.6e6, most=4)  # type: ignore[arg-type]
    assert len(windows.served) == 5  # the load's window and four after it


def test_the_peer_table_shows_cpu_per_short_request_beside_cpu_per_chunk():
    """The issue's own table put the peers' CPU per short request beside their CPU per event (Foundry
    trailed Portkey per request); bench/peers_bench.py measured only the chunk, so the README's peer
    table could not say whether that lead was taken back."""
    from bench.peers_bench import table

    results = {"cpu_us_per_chunk": {"floor": 5.0, "foundry": 10.0}, "ratios": {"floor": 1.0, "foundry": 2.0},
               "cpu_ms_per_short_request": {"floor": 0.5, "foundry": 1.4},
               "request_ratios": {"floor": 1.0, "foundry": 2.8},
               "added_ms": {"foundry": {"p50": 2.0, "p99": 3.0}}, "peers_missing": ["portkey"]}
    lines = table(results).splitlines()
    assert "CPU per short request" in lines[0]
    assert lines[3] == "| foundry | 10.0 us | 2.0x | 1.4 ms | 2.8x | 2.0 ms | 3.0 ms |"
    assert lines[4].startswith("| portkey | not run |")
