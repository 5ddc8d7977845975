"""CPU of the gateway's HTTP edge: per streamed event and per request, under uvicorn on loopback.

Starts the app as `make run` serves it (`foundry-gateway serve`, records off) and streams
`mock/lorem-N` through `httpx.AsyncClient`: once paced (`delay_ms`, so each token leaves in its
own send and the per-send middleware cost shows) and once unpaced; then many one-token
requests (`mock/simple` through /v1/generate) for the per-request cost (body parsing,
dependency resolution, routing). Reports the server process's CPU time (utime + stime) per
event and per request, the median of `--rounds` rounds. Numbers only: no goals are asserted.

Usage: `python bench/edge_bench.py [--root DIR ...] [--streams 40] [--tokens 200] [--requests 400]`
(`--root` serves another checkout's `app` with this venv, e.g. `git archive` of the commit before a
change; give several to compare them in interleaved rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.run import ROOT, cpu_seconds, free_port, server


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
    parser.add_argument("--root", type=Path, action="append",
                        help="a checkout whose `app` to serve (repeat to compare; default this one)")
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    roots: list[Path] = args.root or [ROOT]
    env = {"FOUNDRY_RECORDS": "off", "FOUNDRY_LOG_LEVEL": "warning"}
    workloads = {
        "paced us/event": lambda url: _streams(url, args.streams, args.concurrency, args.tokens, 1),
        "unpaced us/event": lambda url: _streams(url, args.streams, args.concurrency, args.tokens, 0),
        "us/request": lambda url: _requests(url, args.requests, args.concurrency),
    }
    results = {(str(root), name): [] for root in roots for name in workloads}
    with contextlib.ExitStack() as stack:
        targets = []
        for root in roots:
            port = free_port()
            proc = stack.enter_context(server("app.main:app", port, env, cwd=root))
            url = f"http://127.0.0.1:{port}"
            asyncio.run(_streams(url, 4, 4, 20, 0))  # warm up: imports, first-request setup
            asyncio.run(_requests(url, 20, 4))
            targets.append((str(root), url, proc))
        for _ in range(args.rounds):  # interleaved: a neighbour's load on this machine hits every target alike
            for name, work in workloads.items():
                for root, url, proc in targets:
                    before = cpu_seconds(proc.pid)
                    count = asyncio.run(work(url))
                    results[(root, name)].append((cpu_seconds(proc.pid) - before) / count * 1e6)
    for (root, name), values in results.items():
        print(f"{root:32} {name:18} median {statistics.median(values):8.1f}   "
              f"rounds {', '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    main()
