"""The peers in the same rounds: the floor, Foundry, LiteLLM's proxy and Portkey's gateway (Node).

`make bench-peers` installs the peers in throwaway environments, pinned (bench/peers/: LiteLLM in
`.venv-peers-litellm` from requirements.txt, Portkey's gateway under bench/peers/portkey from its
package-lock.json, `@hono/node-server` held at 1.13.5) and runs this. Every target relays the same
fake OpenAI upstream (bench/upstream.py) on loopback, each in its own process:

1. CPU per relayed chunk (200-chunk streams at c=20), in interleaved rounds, as a ratio to the
   floor's (bench/relay.py: Starlette + aiohttp) in the same run: the load moves every target alike;
2. CPU per short request (5-chunk streams at c=20, `--short-requests` a round), the same way;
3. the direct-vs-gateway subtraction that Bifrost's and TensorZero's published numbers use: short
   streams sent at a fixed request rate (open loop, each on a connection of its own), the latency
   to the last byte through each target minus the latency straight to the upstream, p50 and p99.

Usage: `python bench/peers_bench.py --litellm .venv-peers-litellm/bin/litellm --portkey
bench/peers/portkey [--streams 60] [--short-requests 300] [--rate 20] [--requests 200] [--json out.json]`. A peer whose
command is not given is left out (the table says so). Numbers, no assertions; bench/goals.py
reads `ratios` (`--peers`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.litellm_bench import litellm_proxy, tree_cpu_seconds  # noqa: E402
from bench.loadgen import Connection, run_streams, split_url  # noqa: E402
from bench.run import NO_ADMISSION_BY_LAG, body, dies_with_parent, emit, free_port, server  # noqa: E402

_CHAT = {"messages": [{"role": "user", "content": "bench"}], "stream": True}


@contextmanager
def portkey_gateway(folder: Path, port: int):
    """Portkey's gateway (`node build/start-server.js`, as its package's bin runs it), once it answers."""
    folder = folder.resolve()
    entry = folder / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    proc = subprocess.Popen(["node", str(entry), f"--port={port}", "--headless"], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=dies_with_parent)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Portkey's gateway did not start (make bench-peers installs it)")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


async def fixed_rate(url: str, payload: dict, headers: dict[str, str] | None, rate: float, n: int) -> list[float]:
    """`n` requests started `rate` a second (whatever the answers do), each on a connection of its own;
    each one's latency to its last byte (seconds)."""
    host, port, path = split_url(url)
    data = orjson.dumps(payload)
    latencies: list[float] = []

    async def one(i: int) -> None:
        await asyncio.sleep(i / rate)  # the schedule: open loop
        conn = await Connection.open(host, port)
        try:
            started = time.perf_counter()
            status = await conn.exchange(path, data, headers=(headers or {}).items())
            if status == 200:
                latencies.append(time.perf_counter() - started)
        finally:
            conn.close()

    await asyncio.gather(*(one(i) for i in range(n)))
    return latencies


def _ms(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return None
    point = statistics.median(values) if q == 50 else statistics.quantiles(values, n=100)[q - 1]
    return round(point * 1e3, 2)


def _targets(args: argparse.Namespace, stack: ExitStack, upstream: str, chunks: int) -> dict[str, tuple]:
    """name -> (pid, stream URL, payload, headers) of every target that could start."""
    ports = {name: free_port() for name in ("floor", "foundry", "litellm", "portkey")}
    env = {"FOUNDRY_PROVIDERS": json.dumps([{"name": "bench", "base_url": upstream, "api_key_env": None}]),
           "FOUNDRY_LOG_LEVEL": "warning", **NO_ADMISSION_BY_LAG, "FOUNDRY_MAX_STREAMS": "100000"}
    floor = stack.enter_context(server("bench.relay:app", ports["floor"], {"RELAY_UPSTREAM": upstream}))
    gw = stack.enter_context(server("app.main:app", ports["foundry"], env))
    out: dict[str, tuple] = {
        "floor": (floor.pid, f"http://127.0.0.1:{ports['floor']}/v1/stream", body(f"bench/chunks-{chunks}"), None),
        "foundry": (gw.pid, f"http://127.0.0.1:{ports['foundry']}/v1/stream", body(f"bench/chunks-{chunks}"), None)}
    if args.litellm:
        key = "sk-" + secrets.token_hex(16)
        ll = stack.enter_context(litellm_proxy(args.litellm, ports["litellm"], upstream, f"chunks-{chunks}", key,
                                               short="chunks-5"))
        out["litellm"] = (ll.pid, f"http://127.0.0.1:{ports['litellm']}/v1/chat/completions",
                          {"model": "bench", **_CHAT}, {"authorization": f"Bearer {key}"})
    if args.portkey:
        pk = stack.enter_context(portkey_gateway(Path(args.portkey), ports["portkey"]))
        out["portkey"] = (pk.pid, f"http://127.0.0.1:{ports['portkey']}/v1/chat/completions",
                          {"model": f"chunks-{chunks}", **_CHAT},
                          {"x-portkey-provider": "openai", "x-portkey-custom-host": upstream,
                           "authorization": "Bearer unused"})
    return out


def _short(target: tuple) -> tuple:
    """The same target asked for 5-chunk streams (LiteLLM's models are its configuration's)."""
    pid, url, payload, headers = target
    model = payload["model"]
    model = "bench-short" if model == "bench" else "bench/chunks-5" if model.startswith("bench/") else "chunks-5"
    return pid, url, {**payload, "model": model}, headers


async def cpu_rounds(targets: dict[str, tuple], streams: int, concurrency: int, rounds: int) -> dict[str, float]:
    """CPU seconds per stream of each target (the CPU of its process tree), `streams` a round, the
    targets taking turns each round in an order that turns, after a warm-up round of `concurrency`."""
    for _, url, payload, headers in targets.values():
        await run_streams(url, payload, concurrency, concurrency, headers)
    used = dict.fromkeys(targets, 0.0)
    names = list(targets)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            pid, url, payload, headers = targets[name]
            c0 = tree_cpu_seconds(pid)
            await run_streams(url, payload, streams, concurrency, headers)
            used[name] += tree_cpu_seconds(pid) - c0
    return {name: seconds / (streams * rounds) for name, seconds in used.items()}


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--litellm", help="the `litellm` command of its own venv (make bench-peers)")
    parser.add_argument("--portkey", help="the folder Portkey's gateway is installed in (bench/peers/portkey)")
    parser.add_argument("--streams", type=int, default=60, help="200-chunk streams per target per round")
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--short-requests", type=int, default=300,
                        help="5-chunk streams per target per round, for CPU per short request")
    parser.add_argument("--rate", type=float, default=20.0, help="requests a second for the subtraction")
    parser.add_argument("--requests", type=int, default=200, help="requests per target for the subtraction")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    results: dict = {"chunks_per_stream": args.chunks, "concurrency": args.concurrency, "rounds": args.rounds,
                     "rate_per_second": args.rate, "requests": args.requests}
    with ExitStack() as stack:
        stack.enter_context(server("bench.upstream:app", up_port))
        targets = _targets(args, stack, upstream, args.chunks)
        results["peers_missing"] = [p for p in ("litellm", "portkey") if p not in targets]
        per_stream = await cpu_rounds(targets, args.streams, args.concurrency, args.rounds)
        us = {name: round(v / args.chunks * 1e6, 2) for name, v in per_stream.items()}
        results["cpu_us_per_chunk"] = us
        results["ratios"] = {name: round(v / us["floor"], 2) if us["floor"] else None for name, v in us.items()}
        short_targets = {name: _short(t) for name, t in targets.items()}
        per_request = await cpu_rounds(short_targets, args.short_requests, args.concurrency, args.rounds)
        ms = {name: round(v * 1e3, 3) for name, v in per_request.items()}
        results["cpu_ms_per_short_request"] = ms
        results["request_ratios"] = {name: round(v / ms["floor"], 2) if ms["floor"] else None for name, v in ms.items()}
        short = {"direct": (0, f"{upstream}/chat/completions", {"model": "chunks-5", **_CHAT}, None), **short_targets}
        latency = {name: await fixed_rate(url, payload, headers, args.rate, args.requests)
                   for name, (_, url, payload, headers) in short.items()}
    direct = latency.pop("direct")
    results["direct_ms"] = {"p50": _ms(direct, 50), "p99": _ms(direct, 99)}
    results["added_ms"] = {name: {"p50": _minus(_ms(v, 50), results["direct_ms"]["p50"]),
                                  "p99": _minus(_ms(v, 99), results["direct_ms"]["p99"]), "ok": len(v)}
                           for name, v in latency.items()}
    print(table(results))
    emit(results, args.json)
    return results


def _minus(a: float | None, b: float | None) -> float | None:
    return round(a - b, 2) if a is not None and b is not None else None


def table(results: dict) -> str:
    """The ratio table (markdown), as the README's performance section shows it."""
    rows = ["| target | CPU per chunk | / floor | CPU per short request | / floor | added latency p50 | added p99 |",
            "|---|---|---|---|---|---|---|"]
    for name, us in results["cpu_us_per_chunk"].items():
        added = results.get("added_ms", {}).get(name, {})
        request = results.get("cpu_ms_per_short_request", {}).get(name)
        rows.append(f"| {name} | {us} us | {results['ratios'][name]}x | {request} ms | "
                    f"{results.get('request_ratios', {}).get(name)}x | {added.get('p50')} ms | {added.get('p99')} ms |")
    for name in results["peers_missing"]:
        rows.append(f"| {name} | not run | | | | | |")
    return "\n".join(rows)


if __name__ == "__main__":
    asyncio.run(main())
