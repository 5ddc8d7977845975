"""Gateways from several checkouts side by side, with the relay, in one run: added time to first
token (c=1, interleaved rounds), CPU per 1-chunk request (c=1, interleaved rounds) and, with
`--chunk-streams N`, CPU per chunk of 200-chunk streams at c=20 as `bench/run.py` measures it
(N streams per target, in six rounds whose order turns).

What a change did, measured against the commit before it on the same machine in the same minute:
`git worktree add ../before <commit>` (with `../before/.venv` pointing at a venv that has its
dependencies), then `python bench/compare.py ../before .`. Each checkout's gateway runs from its
own directory with its own `.venv`; the fake upstream and the relay come from this checkout.

Usage: `python bench/compare.py CHECKOUT [CHECKOUT ...] [--rounds 300] [--requests 600] [--chunk-streams 360]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import (  # noqa: E402
    NO_ADMISSION_BY_LAG,
    body,
    cpu_rounds,
    cpu_seconds,
    free_port,
    interleaved_ttft,
    run_streams,
    sending,
    server,
)


def serving(target: str, port: int, cwd: Path, env: dict[str, str] | None = None):
    """`bench.run.server` from another checkout, with that checkout's own venv when it has one."""
    python = cwd / ".venv" / "bin" / "python"
    return server(target, port, env, cwd=cwd, python=str(python) if python.exists() else sys.executable)


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=300, help="interleaved TTFT rounds")
    parser.add_argument("--requests", type=int, default=600, help="1-chunk requests per target (CPU)")
    parser.add_argument("--chunk-streams", type=int, default=0,
                        help="200-chunk streams per target at c=20 for CPU per chunk (0: not measured)")
    args = parser.parse_args()
    up = free_port()
    upstream_url = f"http://127.0.0.1:{up}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", **NO_ADMISSION_BY_LAG, "FOUNDRY_MAX_STREAMS": "100000"}
    out: dict = {}
    with ExitStack() as stack:
        stack.enter_context(serving("bench.upstream:app", up, ROOT))
        targets: dict[str, tuple[int, str]] = {}
        for checkout in args.checkouts:
            port = free_port()
            proc = stack.enter_context(serving("app.main:app", port, checkout.resolve(), env))
            targets[str(checkout)] = (proc.pid, f"http://127.0.0.1:{port}/v1/stream")
        port = free_port()
        relay = stack.enter_context(serving("bench.relay:app", port, ROOT, {"RELAY_UPSTREAM": upstream_url}))
        targets["relay"] = (relay.pid, f"http://127.0.0.1:{port}/v1/stream")

        ttft = {"direct": (f"{upstream_url}/chat/completions", {"model": "chunks-5", "messages": [], "stream": True},
                           b"tok0")}
        ttft.update({name: (url, body("bench/chunks-5"), b"event: token") for name, (_, url) in targets.items()})
        samples = await interleaved_ttft(ttft, args.rounds)
        direct = statistics.median(samples["direct"])
        out["direct_ttft_ms"] = round(direct * 1e3, 3)

        used = dict.fromkeys(targets, 0.0)
        for _, url in targets.values():  # warm-up
            await run_streams(url, body("bench/chunks-1"), 20, 1)
        rounds = 3
        for _ in range(rounds):
            for name, (pid, url) in targets.items():
                c0 = cpu_seconds(pid)
                await run_streams(url, body("bench/chunks-1"), args.requests // rounds, 1)
                used[name] += cpu_seconds(pid) - c0
        for name in targets:
            out[name] = {"added_ttft_median_ms": round((statistics.median(samples[name]) - direct) * 1e3, 3),
                         "cpu_ms_per_request": round(used[name] / (args.requests // rounds * rounds) * 1e3, 3)}
        if args.chunk_streams:  # 200-chunk streams, c=20, six rounds whose order turns
            per_stream = await cpu_rounds(sending(targets, "bench/chunks-200"), args.chunk_streams, 20, 6)
            for name, seconds in per_stream.items():
                out[name]["cpu_us_per_chunk"] = round(seconds / 200 * 1e6, 2)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    asyncio.run(main())
