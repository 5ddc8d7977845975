"""What the Redis store's writes cost through redis-py: CPU per pipelined batch of XADDs (the owner's
write, one command a stream), against a private `redis-server` from PATH, three clients taking
turns, three rounds each:

- `socket_timeout`: redis-py's asyncio client with a socket timeout, as the store's other commands
  have it. It sends each batch under `asyncio.wait_for` (on Python 3.11 a task of its own) and
  reads each reply under `asyncio.timeout`.
- `none`: the same without a socket timeout.
- `hiredis_packing`: the owner's writer (app/streams/redis/link.py) as `app.redis_client.connect`
  builds it: no socket timeout, and commands packed by hiredis, where redis-py's asyncio client
  packs them in Python.

Usage: `python bench/redis_writes.py [--batches 3000] [--sizes 1,15,50]`. Numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.redis_client import connect
from bench.store_bench import redis_server

FRAME = b"id: 7\nevent: token\ndata: {\"index\":0,\"content\":\"word \"}\n\n"


CLIENTS = {
    "socket_timeout": lambda url: Redis.from_url(url, socket_timeout=10.0, socket_connect_timeout=5.0),
    "none": lambda url: Redis.from_url(url, socket_timeout=None, socket_connect_timeout=5.0),
    "hiredis_packing": lambda url: connect(url, socket_timeout=None, socket_connect_timeout=5.0),
}


async def cpu_per_batch(url: str, client_name: str, size: int, batches: int) -> float:
    """CPU microseconds of this process per pipelined batch of `size` XADDs, after a warm-up."""
    client = CLIENTS[client_name](url)
    seq = 0

    async def batch() -> None:
        nonlocal seq
        seq += 1
        pipe = client.pipeline(transaction=False)
        for stream in range(size):
            pipe.xadd(f"bench:{stream}", {b"f": FRAME, b"s": seq}, id=f"{seq}-0", minid=f"{max(1, seq - 50)}-0",
                      approximate=False)
        await pipe.execute(raise_on_error=False)

    try:
        for _ in range(200):
            await batch()
        began = time.process_time()
        for _ in range(batches):
            await batch()
        return (time.process_time() - began) / batches * 1e6
    finally:
        await client.flushdb()
        await client.aclose()


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--sizes", default="1,15,50", help="commands per batch")
    args = parser.parse_args()
    results: dict = {}
    with redis_server() as (_, url):
        for size in (int(s) for s in args.sizes.split(",")):
            runs: dict[str, list[float]] = {name: [] for name in CLIENTS}
            for _ in range(3):
                for name in CLIENTS:
                    runs[name].append(await cpu_per_batch(url, name, size, args.batches))
            best = {name: min(values) for name, values in runs.items()}
            results[f"{size} per batch"] = {
                "us_per_batch": {name: round(v, 1) for name, v in best.items()},
                "us_per_command_saved": {
                    "socket_timeout": round((best["socket_timeout"] - best["none"]) / size, 2),
                    "hiredis_packing": round((best["none"] - best["hiredis_packing"]) / size, 2)}}
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    asyncio.run(main())
