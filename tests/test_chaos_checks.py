"""The chaos soak's invariant checks (bench/chaos.py) catch what they claim to: a missing id, a
second final, an id read twice with different frames, a run without a record, usage billed twice,
a spend counter that disagrees with the records. (The soak itself runs in `make chaos`.)"""

import orjson
from bench.chaos import Load, Stream, check_records, check_stream, fault_plan, parse_frames, plan


def stream(ids_events: list[tuple[int, str]], sid: str = "str_1", final: dict | None = None) -> Stream:
    s = Stream(n=0, kind="paced", tokens=10, sid=sid)
    for fid, event in ids_events:
        s.frames[fid] = (event, orjson.dumps(final or {"status": "ok", "usage": {"output_tokens": 2}})
                         if event == "final" else b"{}")
    return s


def test_a_whole_stream_passes_and_each_break_is_named() -> None:
    whole = stream([(1, "start"), (2, "token"), (3, "final")])
    check_stream(whole)
    assert whole.broken == []
    hole = stream([(1, "start"), (3, "final")])
    check_stream(hole)
    assert hole.broken and "missing [2]" in hole.broken[0]
    two = stream([(1, "start"), (2, "final"), (3, "final")])
    check_stream(two)
    assert two.broken == ["2 finals"]
    none = stream([(1, "start"), (2, "token")])
    check_stream(none)
    assert none.broken == ["0 finals"]


def test_an_id_read_twice_must_carry_the_same_frame() -> None:
    s = stream([(1, "start")])
    load = Load.__new__(Load)
    load._take(s, 1, "start", b"{}")
    assert s.broken == []
    load._take(s, 1, "token", b"{}")
    assert s.broken == ["id 1 read twice with different frames"]


def test_records_and_the_spend_counter_are_checked_against_the_finals() -> None:
    s = stream([(1, "start"), (2, "final")], sid="str_a")
    ok = {"str_a": {"status": "ok", "output_tokens": 2, "cost_usd": 0.5}}
    broken: list[str] = []
    check_records([s], ok, 0.5, broken)
    assert broken == []
    check_records([s], {}, 0.0, broken)
    assert broken == ["str_a: no run record (final ok)"]
    broken = []
    check_records([s], {"str_a": {"status": "ok", "output_tokens": 4, "cost_usd": 0.5}}, 1.0, broken)
    assert "bills 4 output tokens" in broken[0] and "spend counter is 1.000000000" in broken[1]


def test_a_final_the_run_record_contradicts_is_broken() -> None:
    """A final made up for one reader (a store away, say) is not the stream's end: its record says
    how the run really ended."""
    s = stream([(1, "start"), (2, "final")], sid="str_a",
               final={"status": "error", "error": {"code": "store_unavailable"}, "usage": {"output_tokens": None}})
    broken: list[str] = []
    check_records([s], {"str_a": {"status": "ok", "output_tokens": 2, "cost_usd": 0.5}}, 0.5, broken)
    assert broken == ["str_a: the reader's final says error, the run record ok"]


async def test_faults_come_one_at_a_time_each_after_the_fleet_settled() -> None:
    """A fault that takes long (a replica's drain and restart) pushes the next one back: the next
    starts `settle` after it recovered, never on its heels (the soak injects single faults)."""
    import asyncio
    import itertools
    import time

    from bench.chaos import inject

    class Slow:
        def __init__(self) -> None:
            self.started: list[float] = []

        async def fault(self, kind: str, index: int) -> None:
            self.started.append(time.monotonic())
            await asyncio.sleep(0.3)  # the recovery

    fleet, windows = Slow(), []
    await inject(fleet, [(0.0, "term", 0), (0.1, "redis", 0), (0.2, "kill", 1)], windows, settle=0.2)  # type: ignore[arg-type]
    gaps = [b - a for a, b in itertools.pairwise(fleet.started)]
    assert len(windows) == 3 and all(gap >= 0.5 for gap in gaps), gaps


def test_the_plan_is_seeded_and_frames_parse_across_chunks() -> None:
    assert [(at, s.kind, s.tokens) for at, s in plan(7, 50, 60)] == [(at, s.kind, s.tokens) for at, s in plan(7, 50, 60)]
    assert [k for _, k, _ in fault_plan(["term", "upstream"], 100, 3)] == ["term", "upstream", "term"]
    frames, rest = parse_frames(b"id: 1\nevent: start\ndata: {}\n\nid: 2\nevent: tok")
    assert frames == [(1, "start", b"{}")] and rest == b"id: 2\nevent: tok"
