"""CPU of the gateway's HTTP edge: per streamed event and per request, under uvicorn on loopback.

Starts the app as `make run` serves it (`uvicorn app.main:app`, records off) and streams
`mock/lorem-N` through `httpx.AsyncClient`: once paced (`delay_ms`, so each token leaves in its
own send and the per-send middleware cost shows) and once unpaced; then many one-token
requests (`mock/simple` through /v1/generate) for the per-request cost (body parsing,
dependency resolution, routing). Reports the server process's CPU time (utime + stime) per
event and per request, the median of `--rounds` rounds. Numbers only: no goals are asserted.

Usage: `python bench/edge_bench.py [--root DIR] [--streams 40] [--tokens 200] [--requests 400]`
(`--root` serves another checkout's `app`, e.g. the commit before a change, with this venv).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.run import ROOT, cpu_seconds, free_port, server  # noqa: E402


async def _streams(url: str, streams: int, concurrency: int, tokens: int, delay_ms: int) -> int:
    payload = {"model": f"mock/lorem-{tokens}", "messages": [{"role": "user", "content": "bench"}],
               "provider_options": {"delay_ms": delay_ms}}
    sem = asyncio.Semaphore(concurrency)
    events = 0
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency + 5)) as client:
        async def one() -> None:
            nonlocal events
            async with sem, client.stream("POST", f"{url}/v1/stream", json=payload) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        events += 1
        await asyncio.gather(*(one() for _ in range(streams)))
    return events


async def _requests(url: str, count: int, concurrency: int) -> int:
    payload = {"model": "mock/simple", "messages": [{"role": "user", "content": "bench"}]}
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency + 5)) as client:
        async def one() -> None:
            async with sem:
                (await client.post(f"{url}/v1/generate", json=payload)).raise_for_status()
        await asyncio.gather(*(one() for _ in range(count)))
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    results: dict[str, list[float]] = {"paced us/event": [], "unpaced us/event": [], "us/request": []}
    with server("app.main:app", port, {"FOUNDRY_RECORDS": "off", "FOUNDRY_LOG_LEVEL": "warning"},
                cwd=args.root) as proc:
        asyncio.run(_streams(url, 4, 4, 20, 0))  # warm up: imports, first-request setup
        asyncio.run(_requests(url, 20, 4))
        for _ in range(args.rounds):
            for name, work in (
                ("paced us/event", lambda: _streams(url, args.streams, args.concurrency, args.tokens, 1)),
                ("unpaced us/event", lambda: _streams(url, args.streams, args.concurrency, args.tokens, 0)),
                ("us/request", lambda: _requests(url, args.requests, args.concurrency)),
            ):
                before = cpu_seconds(proc.pid)
                count = asyncio.run(work())
                results[name].append((cpu_seconds(proc.pid) - before) / count * 1e6)
    for name, values in results.items():
        print(f"{name:18} median {statistics.median(values):8.1f}   rounds {', '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    main()
