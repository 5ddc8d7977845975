"""What run records cost: the same streams through two gateway processes, records off and records on
(SQLite in a temporary directory, or PostgreSQL with --database-url), measured in one run.

Reports gateway CPU per stream (the writer's batched inserts included: the CPU is read after every
record of the round is written), the ratio on/off, and wall time per round. Rounds alternate
between the two gateways so drift on a shared machine hits both. No timed assertions: numbers only.

Usage: `python bench/records_bench.py [--streams 200] [--chunks 20] [--rounds 3] [--database-url URL]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.run import NO_ADMISSION_BY_LAG, body, cpu_seconds, emit, free_port, run_streams, server


def _counted(metrics: str, name: str) -> float:
    """The sum of a counter's samples (all label values)."""
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", metrics, re.M))


async def wait_recorded(base: str, expected: float) -> float:
    """Until the writer has handled `expected` records (their CPU belongs to the round); the dropped count."""
    async with httpx.AsyncClient(timeout=10) as client:
        deadline = time.monotonic() + 120
        while True:
            metrics = (await client.get(f"{base}/metrics")).text
            dropped = _counted(metrics, "foundry_records_dropped_total")
            if _counted(metrics, "foundry_records_written_total") + dropped >= expected:
                return dropped
            if time.monotonic() > deadline:
                raise RuntimeError("records were neither written nor dropped within 120 s")
            await asyncio.sleep(0.05)


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", help="records database for the `on` gateway (default: SQLite, tmp)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    up_port, off_port, on_port = free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    common = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000",
              **NO_ADMISSION_BY_LAG}
    payload = body(f"bench/chunks-{args.chunks}")
    with tempfile.TemporaryDirectory() as data:
        on_env = {**common, "FOUNDRY_RECORDS": "on", "FOUNDRY_DATA_DIR": data}
        if args.database_url:
            on_env["FOUNDRY_DATABASE_URL"] = args.database_url
        with server("bench.upstream:app", up_port), \
                server("app.main:app", off_port, {**common, "FOUNDRY_RECORDS": "off"}) as off, \
                server("app.main:app", on_port, on_env) as on:
            gateways = {"off": (off.pid, f"http://127.0.0.1:{off_port}"), "on": (on.pid, f"http://127.0.0.1:{on_port}")}
            cpu: dict[str, list[float]] = {"off": [], "on": []}
            wall: dict[str, list[float]] = {"off": [], "on": []}
            submitted, dropped = 0, 0.0
            for _, base in gateways.values():  # warm-up
                await run_streams(f"{base}/v1/stream", payload, 20, args.concurrency)
            submitted += 20
            await wait_recorded(gateways["on"][1], submitted)
            for _ in range(args.rounds):
                for name, (pid, base) in gateways.items():
                    c0 = cpu_seconds(pid)
                    _, seconds = await run_streams(f"{base}/v1/stream", payload, args.streams, args.concurrency)
                    if name == "on":
                        submitted += args.streams
                        dropped = await wait_recorded(base, submitted)
                    cpu[name].append((cpu_seconds(pid) - c0) / args.streams * 1e6)
                    wall[name].append(seconds)
    off_us, on_us = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    results = {
        "streams_per_round": args.streams, "chunks_per_stream": args.chunks, "rounds": args.rounds,
        "database": "postgresql" if args.database_url else "sqlite",
        "cpu_us_per_stream": {"records_off": round(off_us, 1), "records_on": round(on_us, 1),
                              "ratio": round(on_us / off_us, 3) if off_us else None,
                              "added_per_run": round(on_us - off_us, 1)},
        "wall_seconds_per_round": {"records_off": round(statistics.median(wall["off"]), 3),
                                   "records_on": round(statistics.median(wall["on"]), 3)},
        "records": int(submitted),
        "records_dropped": int(dropped),
    }
    emit(results, args.json)
    return results


if __name__ == "__main__":
    asyncio.run(main())
