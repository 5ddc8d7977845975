"""The performance goals, judged from one `make bench` run: one line per goal, against the floor.

Reads the JSON that bench/run.py (`--gate --json`) and bench/paced_bench.py (`--json`) wrote in
the same run and prints, for each goal, the gateway's figure, the floor's (bench/relay.py:
Starlette + aiohttp), the ratio or difference the goal is about, the goal, DESIGN.md's long-term
budget where it has one, and whether the goal holds. Exit status 0 either way: a goal not met is
a finding to report, not a broken bench.

The goals are issue-level targets (DESIGN.md section 7): CPU per chunk at most 1.8x the floor
(2.5x with validators) and below Portkey's ratio when `make bench-peers` ran; CPU per short
request at most 2x; added time to first token at most 1 ms; 40 KiB RSS per open stream; paced,
CPU per event at most 1.3x the floor, every stream served on both stores (none failed mid-way),
the Redis store within 1.3x of the memory store.

Usage: `python bench/goals.py RUN_JSON PACED_JSON [--peers PEERS_JSON] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Goal:
    name: str
    figure: float | None  # what the goal bounds: a ratio (x) or a difference or amount (ms, us, KiB)
    limit: float
    unit: str
    detail: str
    budget: float | None = None  # DESIGN.md section 7's long-term target, where it names one
    inconclusive: str = ""  # why this run cannot judge the goal, when it cannot

    @property
    def holds(self) -> bool | None:
        if self.inconclusive or self.figure is None or self.figure != self.figure:
            return None
        return self.figure <= self.limit

    def line(self) -> str:
        verdict = "inconclusive" if self.inconclusive else {True: "met", False: "NOT met", None: "no figure"}[self.holds]
        budget = f"; budget <= {self.budget}{self.unit}" if self.budget is not None else ""
        figure = "n/a" if self.figure is None else f"{self.figure}{self.unit}"
        why = f" [{self.inconclusive}]" if self.inconclusive else ""
        return f"{verdict:>12}  {self.name}: {figure} (goal <= {self.limit}{self.unit}{budget}) -- {self.detail}{why}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _minus(a: float | None, b: float | None) -> float | None:
    return round(a - b, 1) if a is not None and b is not None else None


def run_goals(run: dict, peers: dict | None = None) -> list[Goal]:
    """The goals bench/run.py measures: CPU per chunk at c=20, TTFT at c=1, CPU per request, memory;
    with `peers` (bench/peers_bench.py --json, the same machine), the gateway's ratios against theirs."""
    cpu, ttft, mem = run["cpu_us_per_chunk"], run["ttft_ms_c1"], run["memory_kib"]
    shape = f"{run['chunks_per_stream']}-chunk streams at c={run['concurrency']}"
    goals = [Goal("CPU per relayed chunk, gateway / floor", cpu.get("ratio"), 1.8, "x",
                  f"gateway {cpu['gateway']} us, floor {cpu['relay']} us per chunk, {shape}", budget=1.3)]
    if "gateway_validators" in cpu:
        goals.append(Goal("CPU per chunk with sentence chunking and two regex validators, gateway / floor",
                          cpu.get("ratio_validators"), 2.5, "x",
                          f"gateway {cpu['gateway_validators']} us, floor {cpu['relay']} us per chunk, {shape}"))
    goals += _peer_goals(cpu, peers)
    per_request = run["cpu_ms_per_request"]
    goals.append(Goal("CPU per short request (1-chunk streams), gateway / floor",
                      _ratio(per_request["gateway"], per_request["relay"]), 2.0, "x",
                      f"gateway {per_request['gateway']} ms, floor {per_request['relay']} ms"))
    goals.append(Goal("added time to first token at c=1, median, gateway minus floor",
                      ttft["gateway_minus_relay_paired_median"], 1.0, " ms",
                      f"over a direct connection: gateway +{ttft['gateway_added_median']} ms, floor "
                      f"+{ttft['relay_added_median']} ms (direct {ttft['direct_median']} ms); {ttft['samples']} "
                      "paired samples"))
    goals.append(Goal(f"memory per open stream (RSS, one more past the first {mem['streams']} held)",
                      mem["per_open_stream"], 40, " KiB",
                      f"floor {mem.get('relay_per_open_stream')} KiB, gateway minus floor "
                      f"{_minus(mem['per_open_stream'], mem.get('relay_per_open_stream'))} KiB; "
                      f"three waves of {mem['streams']} streams held mid-generation, the first wave "
                      f"{mem.get('first_wave_per_open_stream')} KiB a stream (floor "
                      f"{mem.get('relay_first_wave_per_open_stream')}); "
                      f"retained after the end {mem['per_retained_stream']} KiB RSS, "
                      f"{mem['per_retained_stream_store_counted']} KiB counted by the store's cap"))
    return goals


def _peer_goals(cpu: dict, peers: dict | None) -> list[Goal]:
    """CPU per chunk below Portkey's ratio to the floor (its own run of bench/peers_bench.py)."""
    portkey = ((peers or {}).get("ratios") or {}).get("portkey")
    why = "" if portkey is not None else "no peer figures in this run (make bench-peers)"
    goals = []
    for name, key in (("", "ratio"), (" with validators", "ratio_validators")):
        if key not in cpu:
            continue
        figure = _ratio(cpu.get(key), portkey) if portkey is not None else None
        goals.append(Goal(f"CPU per chunk{name}: gateway's ratio / Portkey's ratio (each to the floor)", figure,
                          1.0, "x", f"gateway {cpu.get(key)}x, Portkey {portkey}x the floor", inconclusive=why))
    return goals


_BEHIND_MS = 5.0  # a path whose median token transit exceeds this did not keep pace with the upstream


def _behind(target: dict) -> bool:
    return bool(target["transit_ms"]["p50"] > _BEHIND_MS)


def _pace_note(name: str, target: dict) -> str:
    """A warning when `target` fell behind the pace: its tokens then coalesce into fewer reads and
    sends, so its gaps are not a steady state's and its CPU per event reads low."""
    return f"; {name} FELL BEHIND the pace (token transit p50 {target['transit_ms']['p50']} ms)" if _behind(target) else ""


_OVERLOADED = "the floor itself fell behind the pace: the machine was overloaded during this run"


def _skewed(ratio: float | None, limit: float, *, over: dict, under: dict) -> str:
    """Why `over`'s CPU per event / `under`'s cannot judge the goal, if it cannot: a target that fell
    behind the pace reads low, so the ratio reads low when `over` fell behind (a figure over the
    goal still fails it) and high when `under` did (one under the goal still meets it)."""
    if ratio is None:
        return ""
    if _behind(over) and _behind(under):
        return "both fell behind the pace: their CPU per event reads low"
    if _behind(over) and ratio <= limit:
        return "the Redis store fell behind the pace: its CPU per event reads low"
    if _behind(under) and ratio > limit:
        return "the memory store fell behind the pace: its CPU per event reads low"
    return ""


def paced_goals(paced: dict) -> list[Goal]:
    """The goals bench/paced_bench.py measures: added inter-token gap and CPU per event under paced load."""
    floor, memory, redis = (paced["targets"][name] for name in ("floor", "memory_store", "redis_store"))
    shape = (f"{paced['streams']} streams x {paced['tokens_per_stream']} tokens at one per "
             f"{paced['interval_ms']} ms, {paced['rounds']} rounds")
    hiredis = paced["hiredis"]
    parser = ("hiredis" if hiredis["redis_utils_HIREDIS_AVAILABLE"] and hiredis["extension_mapped_in_gateway"]
              else "pure-Python (hiredis not loaded)")
    share = paced["core_share"]
    goals = []
    for name, store, limit, extra in (("memory store", memory, 5, ""),
                                      ("Redis store", redis, 10, f"; redis-py reply parser: {parser}")):
        added = (round(store["gap_added_ms"]["p99"] - floor["gap_added_ms"]["p99"], 3)
                 if store["events"] and floor["events"] else None)
        goals.append(Goal(f"paced load, {name}: added inter-token gap p99, gateway minus floor", added, limit, " ms",
                          f"gap p99 over the upstream's own: gateway {store['gap_added_ms']['p99']} ms, floor "
                          f"{floor['gap_added_ms']['p99']} ms; TTFT p50 gateway {store['ttft_ms']['p50']} ms, floor "
                          f"{floor['ttft_ms']['p50']} ms; {shape}{extra}{_pace_note('gateway', store)}"
                          f"{_pace_note('floor', floor)}", budget=5 if name == "memory store" else None,
                          inconclusive=_OVERLOADED if _behind(floor) else ""))
    cpu = memory["cpu_us_per_event"]
    # Falling behind lowers CPU per event (coalesced tokens): a figure over the goal still fails it.
    ratio = _ratio(cpu, floor["cpu_us_per_event"])
    low = _behind(memory) and ratio is not None and ratio <= 1.3
    goals.append(Goal("paced load, CPU per event, gateway (memory store) / floor", ratio, 1.3, "x",
                      f"gateway {cpu} us, Redis store {redis['cpu_us_per_event']} us (+ redis-server "
                      f"{redis.get('redis_server_cpu_us_per_event')} us), floor {floor['cpu_us_per_event']} us; load "
                      f"generator {share['load_generator']} of a core, pacer {share['pacer']}"
                      f"{_pace_note('gateway', memory)}{_pace_note('floor', floor)}",
                      inconclusive="the gateway fell behind the pace: its CPU per event reads low" if low else ""))
    stores = _ratio(redis["cpu_us_per_event"], cpu)
    goals.append(Goal("paced load, CPU per event, Redis store / memory store", stores, 1.3, "x",
                      f"Redis store {redis['cpu_us_per_event']} us, memory store {cpu} us (gateway processes)"
                      f"{_pace_note('Redis store', redis)}{_pace_note('memory store', memory)}",
                      inconclusive=_skewed(stores, 1.3, over=redis, under=memory)))
    for name, store in (("memory store", memory), ("Redis store", redis)):
        out = store.get("outcomes") or {}
        streams = store["streams"]
        goals.append(Goal(f"paced load, {name}: streams failed mid-way (never; refusals at admission are clean)",
                          out.get("failed"), 0, "", f"{out.get('served')} of {streams} served, "
                          f"{out.get('refused')} refused at admission (503), {out.get('failed')} failed"))
        goals.append(Goal(f"paced load, {name}: streams not served (goal: all {streams} served)",
                          streams - out["served"] if "served" in out else None, 0, "",
                          f"{out.get('served')} of {streams} served"))
    return goals


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path, help="bench/run.py --gate --json output")
    parser.add_argument("paced", type=Path, help="bench/paced_bench.py --json output")
    parser.add_argument("--peers", type=Path, help="bench/peers_bench.py --json output (make bench-peers), if run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    peers = json.loads(args.peers.read_text()) if args.peers is not None and args.peers.exists() else None
    goals = run_goals(json.loads(args.run.read_text()), peers) + paced_goals(json.loads(args.paced.read_text()))
    print("Performance goals, from this run (the floor: bench/relay.py, Starlette + aiohttp):")
    for goal in goals:
        print(goal.line())
    print(f"{sum(g.holds is True for g in goals)} of {len(goals)} goals met, "
          f"{sum(bool(g.inconclusive) for g in goals)} inconclusive")
    if args.json is not None:
        args.json.write_text(json.dumps([{**asdict(g), "holds": g.holds} for g in goals], indent=2) + "\n")


if __name__ == "__main__":
    main()
