"""Paced load: hundreds of concurrent streams at one token per 20 ms, as real models stream.

Starts, each in its own process on loopback: the pacer (bench/pacer.py, a fake upstream that
stamps each token with the time it wrote it), the floor (bench/relay.py: Starlette + aiohttp,
under uvicorn), the gateway on the in-memory store and the gateway on the Redis store (a private
`redis-server` from PATH, no disk), both as a user runs it (`foundry-gateway serve`). This
process is the load generator (bench/loadgen.py on uvloop: asyncio protocols and httptools, a
few microseconds per read, so it is not the bottleneck; its own share of a core is reported).
The targets take turns in interleaved rounds, so a neighbour's load hits them alike. Per target:

- added inter-token gap: for two consecutive tokens of a stream, the gap between their arrivals
  minus the gap the upstream left between writing them (from the stamps): what the path added,
  whatever the pacer's own timer did; p50, p99, max over every token;
- transit (arrival minus upstream write) p50/p99, and time to first token (request written to
  first token read) p50/p99: the upstream writes the first token at once;
- CPU per token event of the target's process (and of redis-server, for the Redis store);
- each stream's outcome: served (200 and a final `ok`), refused at admission (503 before it
  began), or failed (anything else: a stream that began and did not end ok is a failure mid-way);
- for the Redis store, whether redis-py parses replies with hiredis: `redis.utils.HIREDIS_AVAILABLE`
  in the gateway's interpreter (redis-py's own switch to its hiredis parser) and the hiredis C
  extension mapped in the gateway process.

Usage: `python bench/paced_bench.py [--streams 300] [--tokens 150] [--rounds 2] [--json out.json]`.
No timed assertions: it prints numbers; bench/goals.py judges them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import Connection, split_url  # noqa: E402
from bench.run import body, cpu_seconds, emit, free_port, process, server  # noqa: E402
from bench.store_bench import redis_server  # noqa: E402


@dataclass(slots=True)
class Tokens:
    """One stream as the client saw it: each token's upstream write stamp and arrival time (ns)."""

    sent: int = 0
    stamps: list[int] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    tail: bytes = b""
    status: int = 0
    final: bytes | None = None
    """The final's status (`ok`, `error`, ...), once it came."""

    @property
    def outcome(self) -> str:
        """served (200, final ok), refused (503 before the stream began: at admission), failed (the rest:
        an error status other than 503, or a stream that began and did not end ok)."""
        if self.status == 503:
            return "refused"
        return "served" if self.status == 200 and self.final == b"ok" else "failed"

    def feed(self, data: bytes, now: int) -> None:
        seen = self.tail + data
        end = seen.rfind(b"\n\n")
        if end < 0:
            self.tail = seen
            return
        self.tail = seen[end + 2:]
        for frame in seen[:end].split(b"\n\n"):
            if b"event: token" in frame:  # the final repeats every stamp in its message: skip it
                start = frame.index(b"~") + 1
                self.stamps.append(int(frame[start:frame.index(b"~", start)]))
                self.arrivals.append(now)
            elif b"event: final" in frame:  # the floor's final says nothing: it ended
                at = frame.find(b'"status":"') + 10
                self.final = frame[at:frame.index(b'"', at)] if at >= 10 else b"ok"


def pacer(port: int):
    """The paced upstream (bench/pacer.py) in a process of its own, once it answers."""
    return process([sys.executable, str(ROOT / "bench" / "pacer.py"), "--port", str(port)], port, what="the pacer")


async def paced(url: str, streams: int, tokens: int, ramp: float) -> list[Tokens]:
    """`streams` streams of `tokens` paced tokens, started evenly over `ramp` seconds."""
    host, port, path = split_url(url)
    payload = orjson.dumps(body(f"bench/paced-{tokens}"))
    conns = await asyncio.gather(*(Connection.open(host, port) for _ in range(streams)))
    seen = [Tokens() for _ in range(streams)]

    async def one(i: int) -> None:
        await asyncio.sleep(i * ramp / streams)  # the load's schedule, not a synchronisation
        seen[i].sent = time.monotonic_ns()
        seen[i].status = await conns[i].exchange(path, payload, seen[i].feed)

    try:
        await asyncio.gather(*(one(i) for i in range(streams)))
    finally:
        for conn in conns:
            conn.close()
    return seen


def _ms(values: list[int], q: int) -> float:
    """The q-th percentile of nanosecond values, in ms (q=50 is the median)."""
    if not values:
        return float("nan")
    point = statistics.median(values) if q == 50 else statistics.quantiles(values, n=100)[q - 1]
    return round(point / 1e6, 3)


def summarize(runs: list[Tokens], cpu: float, extra_cpu: float | None) -> dict:
    gaps, transit, ttft = [], [], []
    for run in runs:
        transit += [a - s for a, s in zip(run.arrivals, run.stamps, strict=True)]
        gaps += [(run.arrivals[i] - run.arrivals[i - 1]) - (run.stamps[i] - run.stamps[i - 1])
                 for i in range(1, len(run.arrivals))]
        if run.arrivals:
            ttft.append(run.arrivals[0] - run.sent)
    events = len(transit)
    outcomes = {kind: sum(r.outcome == kind for r in runs) for kind in ("served", "refused", "failed")}
    out = {"events": events, "streams": len(runs), "outcomes": outcomes,
           "streams_without_tokens": sum(not r.arrivals for r in runs),
           "gap_added_ms": {"p50": _ms(gaps, 50), "p99": _ms(gaps, 99), "max": round(max(gaps, default=0) / 1e6, 3)},
           "transit_ms": {"p50": _ms(transit, 50), "p99": _ms(transit, 99)},
           "ttft_ms": {"p50": _ms(ttft, 50), "p99": _ms(ttft, 99)},
           "cpu_seconds": round(cpu, 2), "cpu_us_per_event": round(cpu / events * 1e6, 2) if events else None}
    if extra_cpu is not None:
        out["redis_server_cpu_us_per_event"] = round(extra_cpu / events * 1e6, 2) if events else None
    return out


def hiredis_in(pid: int) -> dict:
    """Whether the gateway process `pid` parses Redis replies with hiredis (redis-py's C parser)."""
    probe = subprocess.run([sys.executable, "-c", "import redis.utils; print(redis.utils.HIREDIS_AVAILABLE)"],
                           capture_output=True, text=True, check=True)
    mapped = any("hiredis" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())
    return {"redis_utils_HIREDIS_AVAILABLE": probe.stdout.strip() == "True", "extension_mapped_in_gateway": mapped}


def raise_open_files() -> None:
    """Each stream holds two sockets in a relay: lift the soft descriptor limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=300, help="concurrent paced streams per target")
    parser.add_argument("--tokens", type=int, default=150, help="tokens per stream, one every 20 ms")
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds over which the streams start")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per target")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    raise_open_files()

    up_port, floor_port, mem_port, red_port = free_port(), free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000"}
    results: dict = {"streams": args.streams, "tokens_per_stream": args.tokens, "interval_ms": 20,
                     "ramp_seconds": args.ramp, "rounds": args.rounds}

    with ExitStack() as stack:
        redis_proc, redis_url = stack.enter_context(redis_server())
        pace = stack.enter_context(pacer(up_port))
        floor = stack.enter_context(server("bench.relay:app", floor_port, {"RELAY_UPSTREAM": upstream_url}))
        mem = stack.enter_context(server("app.main:app", mem_port, env))
        # the Redis store at its default reply timeout (2 s), as users run it
        red = stack.enter_context(server("app.main:app", red_port, {**env, "FOUNDRY_REDIS_URL": redis_url}))
        targets = {"floor": (floor.pid, f"http://127.0.0.1:{floor_port}/v1/stream"),
                   "memory_store": (mem.pid, f"http://127.0.0.1:{mem_port}/v1/stream"),
                   "redis_store": (red.pid, f"http://127.0.0.1:{red_port}/v1/stream")}
        for _, url in targets.values():  # warm-up: connections, code paths, allocator
            await paced(url, min(20, args.streams), 10, 0.1)
        runs: dict[str, list[Tokens]] = {name: [] for name in targets}
        cpu = dict.fromkeys(targets, 0.0)
        redis_cpu, own_cpu, pacer_cpu, wall = 0.0, 0.0, 0.0, 0.0
        names = list(targets)
        for i in range(args.rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:
                pid, url = targets[name]
                c0, r0, p0, o0, w0 = (cpu_seconds(pid), cpu_seconds(redis_proc.pid), cpu_seconds(pace.pid),
                                      time.process_time(), time.perf_counter())
                runs[name] += await paced(url, args.streams, args.tokens, args.ramp)
                cpu[name] += cpu_seconds(pid) - c0
                if name == "redis_store":
                    redis_cpu += cpu_seconds(redis_proc.pid) - r0
                own_cpu += time.process_time() - o0
                pacer_cpu += cpu_seconds(pace.pid) - p0
                wall += time.perf_counter() - w0
        results["targets"] = {name: summarize(runs[name], cpu[name], redis_cpu if name == "redis_store" else None)
                              for name in targets}
        results["hiredis"] = hiredis_in(red.pid)
        # Shares of one core over the measured phases: a load generator near 1.0 would be the bottleneck.
        results["core_share"] = {"load_generator": round(own_cpu / wall, 2), "pacer": round(pacer_cpu / wall, 2)}
    emit(results, args.json)
    return results


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
