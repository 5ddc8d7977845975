"""The Redis stream store's cost and its replica-lost detection time, measured in one run.

Starts, each in its own process on loopback: the fake OpenAI-compatible upstream
(bench/upstream.py), a private `redis-server` (from PATH, no disk), a gateway with the in-memory
store and a gateway with the Redis store (FOUNDRY_REDIS_URL). This process is the load client.
Reports:

1. CPU per relayed upstream chunk, gateway process: Redis store vs in-memory store, as a ratio
   (DESIGN.md section 7: <= 1.3x); rounds alternate between the two so drift hits both alike.
   The redis-server's own CPU per chunk is reported beside it, for scale (not in the ratio).
2. Replica-lost detection: two Redis-store replicas; a run on A that never ends, followed from B;
   A is SIGKILLed; the seconds until B's follower receives `final{error: replica_lost}` (bounded
   by the lease, FOUNDRY_REDIS_LEASE_SECONDS, plus one read interval).

Usage: `python bench/store_bench.py [--streams 300] [--chunks 200] [--lease 10] [--json out.json]`.
No assertions: it prints numbers for the notes and README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import (  # noqa: E402
    NO_ADMISSION_BY_LAG,
    body,
    cpu_seconds,
    dies_with_parent,
    emit,
    free_port,
    run_streams,
    server,
)


@contextmanager
def redis_server():
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("store_bench needs redis-server on PATH")
    port, folder = free_port(), tempfile.mkdtemp(prefix="foundry-bench-redis-")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=dies_with_parent)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([shutil.which("redis-cli") or "redis-cli", "-p", str(port), "ping"],
                             capture_output=True).stdout.strip() != b"PONG":
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield proc, f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


async def replica_lost_seconds(gw_a: str, gw_b: str, proc_a: subprocess.Popen) -> tuple[float, dict]:
    """Seconds from SIGKILL of the owner to the replica_lost final on the follower."""
    async with httpx.AsyncClient(timeout=120) as client:
        r = await client.post(f"{gw_a}/v1/generate", json=body("bench/hold-5", stream=True))
        r.raise_for_status()
        stream_id = r.json()["stream_id"]
        async with client.stream("GET", f"{gw_b}/v1/stream/{stream_id}") as response:
            chunks = response.aiter_bytes()
            raw = b""
            async for chunk in chunks:
                raw += chunk
                if raw.count(b"event: token") >= 5:
                    break
            # Let the owner persist and renew its lease once more, as a real run would have.
            await asyncio.sleep(0.2)
            proc_a.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            async for chunk in chunks:
                raw += chunk
            detected = time.perf_counter() - killed
    final = json.loads(raw.rsplit(b"event: final\ndata: ", 1)[1].split(b"\n", 1)[0])
    return detected, final


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per store (alternating)")
    parser.add_argument("--lease", type=float, default=10.0, help="FOUNDRY_REDIS_LEASE_SECONDS for the kill test")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    up_port, mem_port, red_port = free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", **NO_ADMISSION_BY_LAG, "FOUNDRY_MAX_STREAMS": "100000"}
    model = f"bench/chunks-{args.chunks}"
    results: dict = {"streams": args.streams, "chunks_per_stream": args.chunks, "concurrency": args.concurrency,
                     "rounds": args.rounds}

    with redis_server() as (redis_proc, redis_url), server("bench.upstream:app", up_port):
        # A generous Redis timeout: this measures CPU, and a loaded bench box must not turn a slow
        # reply into a 503 mid-measurement.
        redis_env = {**env, "FOUNDRY_REDIS_URL": redis_url, "FOUNDRY_REDIS_TIMEOUT_SECONDS": "10"}
        with server("app.main:app", mem_port, env) as mem, server("app.main:app", red_port, redis_env) as red:
            targets = {"memory": (mem.pid, f"http://127.0.0.1:{mem_port}/v1/stream"),
                       "redis": (red.pid, f"http://127.0.0.1:{red_port}/v1/stream")}
            cpu = {"memory": 0.0, "redis": 0.0, "redis_server": 0.0}
            for _pid, url in targets.values():  # warm-up
                await run_streams(url, body(model), 20, args.concurrency)
            for _ in range(args.rounds):
                for name, (pid, url) in targets.items():
                    c0, r0 = cpu_seconds(pid), cpu_seconds(redis_proc.pid)
                    await run_streams(url, body(model), args.streams, args.concurrency)
                    cpu[name] += cpu_seconds(pid) - c0
                    if name == "redis":
                        cpu["redis_server"] += cpu_seconds(redis_proc.pid) - r0
            chunks = args.streams * args.chunks * args.rounds
            per = {k: v / chunks * 1e6 for k, v in cpu.items()}
            results["cpu_us_per_chunk"] = {
                "memory_store": round(per["memory"], 2), "redis_store": round(per["redis"], 2),
                "ratio": round(per["redis"] / per["memory"], 2) if per["memory"] else None,
                "redis_server": round(per["redis_server"], 2),
            }
        lease_env = {**redis_env, "FOUNDRY_REDIS_LEASE_SECONDS": str(args.lease)}
        a_port, b_port = free_port(), free_port()
        with server("app.main:app", a_port, lease_env) as a, server("app.main:app", b_port, lease_env):
            detected, final = await replica_lost_seconds(f"http://127.0.0.1:{a_port}", f"http://127.0.0.1:{b_port}", a)
        results["replica_lost"] = {"lease_seconds": args.lease, "detected_after_kill_seconds": round(detected, 2),
                                   "final_error_code": (final.get("error") or {}).get("code")}
    emit(results, args.json)
    return results


if __name__ == "__main__":
    asyncio.run(main())
