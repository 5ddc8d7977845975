"""What a second worker gives: `foundry-gateway serve --workers N` against one worker, and the
floor (bench/relay.py under `uvicorn --workers N`) the same way, in one run.

More than one worker needs the Redis stream store, so every gateway here runs on it (a private
redis-server); the one-worker gateway too, so that the workers are the only difference. Each
target relays the fake upstream (bench/upstream.py) and is loaded by this process
(bench/loadgen.py) at a concurrency that keeps every worker busy. Per target, in interleaved
rounds (the targets take turns, in an order that turns):
- chunks relayed a second: 200-chunk streams at `--concurrency`, over the round's wall time
  (`chunks_200`);
- requests a second: 1-chunk streams the same way (`chunks_1`);
- CPU per chunk (per request): the CPU of the target's process tree (its workers and uvicorn's
  supervisor), so that a second worker that only adds contention shows as more CPU.
Scaling is the N-worker rate over the one-worker rate, for the gateway and for the floor. On a
machine of few cores the upstream, the load generator and redis-server share the cores with the
workers: the floor's scaling in the same run says what the machine itself allows.

Usage: `python bench/workers_bench.py [--workers 2] [--streams 60] [--requests 600] [--rounds 3]
[--concurrency 40] [--json out.json]`. Numbers, no assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.litellm_bench import tree_cpu_seconds  # noqa: E402
from bench.loadgen import run_streams  # noqa: E402
from bench.run import NO_ADMISSION_BY_LAG, body, emit, free_port, process, serve_command, server, uvicorn_command  # noqa: E402
from bench.store_bench import redis_server  # noqa: E402

CHUNKS = 200
WARM_UPS = 3
"""Warm-up loads a target serves before it is measured: a worker's first streams import, connect and
specialize, and a load's connections may all go to one worker."""


@contextmanager
def target(name: str, workers: int, upstream: str, redis_url: str) -> Iterator[tuple[int, str]]:
    """(pid of the supervisor, the stream URL) of the gateway or the floor with `workers` worker
    processes, once it answers."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="foundry-bench-data-") as data:
        if name == "gateway":
            cmd = [*serve_command(), "--port", str(port), "--workers", str(workers)]
            env = {"FOUNDRY_PROVIDERS": json.dumps([{"name": "bench", "base_url": upstream, "api_key_env": None}]),
                   "FOUNDRY_REDIS_URL": redis_url, "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000",
                   "FOUNDRY_DATA_DIR": data, **NO_ADMISSION_BY_LAG}
        else:
            cmd = [*uvicorn_command("bench.relay:app", port), "--workers", str(workers)]
            env = {"RELAY_UPSTREAM": upstream}
        with process(cmd, port, what=f"{name} x{workers}", env=env, start_seconds=120) as proc:
            yield proc.pid, f"http://127.0.0.1:{port}/v1/stream"


async def rounds(targets: dict[str, tuple[int, str]], chunks: int, streams: int, concurrency: int,
                 count: int) -> dict[str, dict[str, float]]:
    """Per target, the median over rounds of chunks relayed a second (requests a second for 1-chunk
    streams) and the CPU microseconds a chunk cost its process tree."""
    payload = body(f"bench/chunks-{chunks}")
    for _, url in targets.values():  # warm-up: each time new connections, which every worker takes a share of
        for _ in range(WARM_UPS):
            await run_streams(url, payload, concurrency * 2, concurrency)
    rates: dict[str, list[float]] = {name: [] for name in targets}
    cpu: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    for i in range(count):
        for name in names[i % len(names):] + names[:i % len(names)]:
            pid, url = targets[name]
            c0 = tree_cpu_seconds(pid)
            _, wall = await run_streams(url, payload, streams, concurrency)
            cpu[name].append((tree_cpu_seconds(pid) - c0) / (streams * chunks) * 1e6)
            rates[name].append(streams * chunks / wall)
    return {name: {"per_second": round(statistics.median(rates[name])),
                   "cpu_us_each": round(statistics.median(cpu[name]), 2)} for name in targets}


def scaling(found: dict[str, dict[str, float]], workers: int) -> dict[str, float]:
    """The N-worker rate over the one-worker rate, for the gateway and the floor."""
    return {name: round(found[f"{name}_x{workers}"]["per_second"] / found[f"{name}_x1"]["per_second"], 2)
            for name in ("gateway", "floor")}


async def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--streams", type=int, default=60, help="200-chunk streams per target per round")
    parser.add_argument("--requests", type=int, default=600, help="1-chunk streams per target per round")
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict = {"workers": args.workers, "cores": os.cpu_count(), "concurrency": args.concurrency,
                     "rounds": args.rounds, "load_average_before": os.getloadavg()[0]}
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    with ExitStack() as stack:
        stack.enter_context(server("bench.upstream:app", up_port))
        _, redis_url = stack.enter_context(redis_server())
        targets = {f"{name}_x{n}": stack.enter_context(target(name, n, upstream, redis_url))
                   for name in ("gateway", "floor") for n in (1, args.workers)}
        results["chunks_200"] = await rounds(targets, CHUNKS, args.streams, args.concurrency, args.rounds)
        results["chunks_1"] = await rounds(targets, 1, args.requests, args.concurrency, args.rounds)
    results["scaling_chunks"] = scaling(results["chunks_200"], args.workers)
    results["scaling_requests"] = scaling(results["chunks_1"], args.workers)
    emit(results, args.json)
    return results


if __name__ == "__main__":
    asyncio.run(main())
