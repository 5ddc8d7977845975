"""What the response cache costs and saves: the same request through one gateway process, as
misses (each request new, so each goes to the fake upstream and is stored) and as hits (one
request repeated), measured in one run and interleaved so drift on a shared machine hits both.

Reports, per kind: median time to first token at concurrency 1 (request sent to the first token
frame read) and gateway CPU per request; then the hit's TTFT and CPU against the miss's. The fake
upstream answers at once, so a miss here is the gateway's own work plus a loopback call: a real
provider's time to first token is what a hit saves on top. No timed assertions: numbers only.

Usage: `python bench/cache_bench.py [--requests 200] [--chunks 20] [--rounds 3] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.run import body, cpu_seconds, emit, free_port, server


async def _ttft(client: httpx.AsyncClient, url: str, payload: dict) -> tuple[float, str | None]:
    """Seconds to the first token frame, and the X-Foundry-Cache answer; the stream read to its end."""
    started = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", url, json=payload) as response:
        async for chunk in response.aiter_bytes():
            if first is None and b"event: token" in chunk:
                first = time.perf_counter() - started
        verdict = response.headers.get("x-foundry-cache")
    return (first if first is not None else time.perf_counter() - started), verdict


async def _round(client: httpx.AsyncClient, url: str, pid: int, payloads: list[dict]) -> tuple[list[float], float, set]:
    cpu = cpu_seconds(pid)
    results = [await _ttft(client, url, p) for p in payloads]
    return [t for t, _ in results], (cpu_seconds(pid) - cpu) / len(payloads), {v for _, v in results}


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    up_port, gw_port = free_port(), free_port()
    providers = json.dumps([{"name": "bench", "base_url": f"http://127.0.0.1:{up_port}/v1", "api_key_env": None}])
    env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000",
           "FOUNDRY_RECORDS": "off", "FOUNDRY_CACHE": json.dumps([{"models": "bench/*", "ttl_seconds": 3600}]),
           "FOUNDRY_CACHE_MAX_ENTRIES": str(args.requests * (args.rounds + 2))}
    model = f"bench/chunks-{args.chunks}"
    hit_payload = body(model)
    ttft: dict[str, list[float]] = {"miss": [], "hit": []}
    cpu: dict[str, list[float]] = {"miss": [], "hit": []}
    with server("bench.upstream:app", up_port), server("app.main:app", gw_port, env) as gw:
        url = f"http://127.0.0.1:{gw_port}/v1/stream"
        async with httpx.AsyncClient(timeout=60) as client:
            await _ttft(client, url, hit_payload)  # stored: every later one is a hit
            await _round(client, url, gw.pid, [body(model, temperature=0.5) for _ in range(20)])  # warm-up
            serial = 0
            for _ in range(args.rounds):
                misses = []
                for _ in range(args.requests):
                    serial += 1
                    misses.append({**body(model), "messages": [{"role": "user", "content": f"bench {serial}"}]})
                for kind, payloads in (("miss", misses), ("hit", [hit_payload] * args.requests)):
                    times, per_request, verdicts = await _round(client, url, gw.pid, payloads)
                    if verdicts != {kind}:
                        raise RuntimeError(f"expected only {kind}es, the gateway answered {sorted(map(str, verdicts))}")
                    ttft[kind] += times
                    cpu[kind].append(per_request)
    miss_ttft, hit_ttft = statistics.median(ttft["miss"]) * 1000, statistics.median(ttft["hit"]) * 1000
    miss_cpu, hit_cpu = statistics.median(cpu["miss"]) * 1e6, statistics.median(cpu["hit"]) * 1e6
    return {
        "requests_per_round": args.requests, "rounds": args.rounds, "chunks": args.chunks,
        "ttft_ms_median": {"miss": round(miss_ttft, 3), "hit": round(hit_ttft, 3)},
        "hit_added_ttft_ms": round(hit_ttft - miss_ttft, 3),
        "cpu_us_per_request": {"miss": round(miss_cpu, 1), "hit": round(hit_cpu, 1)},
        "hit_cpu_ratio": round(hit_cpu / miss_cpu, 3) if miss_cpu else None,
    }


if __name__ == "__main__":
    parsed = argparse.ArgumentParser(add_help=False)
    parsed.add_argument("--json", type=Path)
    known, _ = parsed.parse_known_args()
    emit(asyncio.run(main()), known.json)
