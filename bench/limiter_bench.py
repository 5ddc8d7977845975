"""What access control costs per request: authenticate (key hash + cached lookup) and admit
(model check, requests/tokens/concurrency counters) then settle (release, tokens), with the
in-process limiter and with Redis (a private redis-server started here, if on PATH), and a key
lookup that misses the cache (SQLite). Numbers only, measured in one run: microseconds per request
and the ratio Redis/memory. Nothing here is per chunk: a stream of N chunks pays this once.

Usage: `python bench/limiter_bench.py [--requests 2000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth import Auth, MemoryLimiter, RedisLimiter
from app.auth.keystore import KeyStore
from app.auth.policy import KeyFields
from app.records import RecordStore
from bench.run import dies_with_parent, emit, free_port

LIMITS = KeyFields(name="bench", models=["mock/*"], rpm=10_000_000, tpm=10_000_000_000, max_concurrent=100_000)


async def per_request(auth: Auth, key: str, n: int) -> float:
    """Microseconds of one authenticate + admit + settle, averaged over n sequential requests."""
    started = time.perf_counter()
    for _ in range(n):
        principal = await auth.authenticate(f"Bearer {key}", None)
        ticket = await auth.admit(principal, "mock/simple")
        assert ticket is not None
        auth.run_ended(ticket, 30, None, "str_bench")
        await auth.settled()
    return (time.perf_counter() - started) / n * 1e6


def _redis_server(binary: str, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)], stdout=subprocess.DEVNULL,
                            preexec_fn=dies_with_parent)


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="foundry-limiter-bench-"))
    store = RecordStore(f"sqlite+aiosqlite:///{tmp / 'bench.db'}")
    await store.migrate()
    keystore = KeyStore(store.engine)
    row, key = await keystore.create(LIMITS)
    results: dict = {"requests": args.requests}

    memory = Auth(admin_key="admin", config_keys=[], keystore=keystore, limiter=MemoryLimiter(), cache_seconds=3600)
    await per_request(memory, key, 100)  # warm
    results["memory_us"] = round(await per_request(memory, key, args.requests), 1)

    uncached = Auth(admin_key="admin", config_keys=[], keystore=keystore, limiter=MemoryLimiter(),
                    cache_seconds=1e-9)
    results["memory_cache_miss_sqlite_us"] = round(await per_request(uncached, key, max(100, args.requests // 10)), 1)

    binary = shutil.which("redis-server")
    if binary:
        port = free_port()
        proc = _redis_server(binary, port, tmp)
        try:
            limiter = RedisLimiter(f"redis://127.0.0.1:{port}/0")
            for _ in range(100):
                if await limiter.ping():
                    break
                await asyncio.sleep(0.05)
            redis = Auth(admin_key="admin", config_keys=[], keystore=keystore, limiter=limiter, cache_seconds=3600)
            await per_request(redis, key, 100)
            results["redis_us"] = round(await per_request(redis, key, args.requests), 1)
            results["redis_over_memory"] = round(results["redis_us"] / results["memory_us"], 2)
            await limiter.aclose()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    await store.aclose()
    shutil.rmtree(tmp, ignore_errors=True)
    emit(results, args.json)
    return results


if __name__ == "__main__":
    asyncio.run(main())
