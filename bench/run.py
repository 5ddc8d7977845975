"""Gateway overhead benchmark: ratios against baselines measured in the same run.

Starts, each in its own process on loopback: a fake OpenAI-compatible upstream
(bench/upstream.py), the gateway (served as provider `bench` pointing at it), and a bare
parse-and-re-emit relay (bench/relay.py). This process is the load client. Reports:

1. CPU per relayed upstream chunk, no validators: gateway vs relay (DESIGN.md section 7: <= 2x);
2. added time to first token, median, at concurrency 1 and 50: gateway vs a direct connection
   to the upstream (goal: <= 2 ms), with the bare relay's for scale (the cost of any extra hop);
3. events per second through the gateway;
4. memory per open stream (RSS growth with many streams held open mid-generation);
5. with `--gate`: the same CPU run with the sentence chunker and two regex validators;
6. with `--facades`: the same CPU run through the drop-in facades (POST /v1/chat/completions and
   POST /v1/messages, streaming), next to /v1/stream's.

Usage: `python bench/run.py [--streams 400] [--chunks 200] [--json out.json]`. No timed
assertions anywhere: this prints numbers; the notes and README quote them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@contextmanager
def server(target: str, port: int, env: dict[str, str] | None = None):
    cmd = [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90  # a loaded 2-core machine takes a while to import the app
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()  # reading the stderr of a live process would wait forever
                raise RuntimeError(f"{target} did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def body(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "bench"}], **extra}


async def run_streams(url: str, payload: dict, streams: int, concurrency: int) -> tuple[int, float]:
    """Open `streams` SSE streams, `concurrency` at a time; return (events seen, wall seconds)."""
    sem = asyncio.Semaphore(concurrency)
    events = 0
    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one() -> None:
            nonlocal events
            async with sem, client.stream("POST", url, json=payload) as r:
                r.raise_for_status()
                async for chunk in r.aiter_bytes():
                    events += chunk.count(b"\n\n")

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(streams)))
        return events, time.perf_counter() - start


async def ttft_samples(url: str, payload: dict, *, rounds: int, concurrency: int, marker: bytes) -> list[float]:
    """Time from sending the request to the first byte carrying `marker` (first content)."""
    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency + 10)
    samples: list[float] = []
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one() -> None:
            start = time.perf_counter()
            async with client.stream("POST", url, json=payload) as r:
                chunks = r.aiter_bytes()
                seen = b""
                async for chunk in chunks:
                    seen += chunk
                    if marker in seen:
                        samples.append(time.perf_counter() - start)
                        break
                async for _ in chunks:  # drain, so the connection is reused
                    pass

        for _ in range(3):  # warm connections
            await one()
        samples.clear()
        for _ in range(rounds):
            await asyncio.gather(*(one() for _ in range(concurrency)))
    return samples


async def open_streams_memory(url: str, pid: int, streams: int) -> float:
    """RSS growth per stream held open mid-generation (upstream holds after its first chunks)."""
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        # Warm up allocator and code paths with a few held streams first.
        before = rss_bytes(pid)
        started = asyncio.Event()
        opened = 0
        release = asyncio.Event()

        async def hold() -> None:
            nonlocal opened
            async with client.stream("POST", url, json=body("bench/hold-20")) as r:
                async for chunk in r.aiter_bytes():
                    if b"event: token" in chunk:
                        break
                opened += 1
                if opened == streams:
                    started.set()
                await release.wait()

        tasks = [asyncio.create_task(hold()) for _ in range(streams)]
        await asyncio.wait_for(started.wait(), 60)
        after = rss_bytes(pid)
        release.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return (after - before) / streams


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--ttft-rounds", type=int, default=100)
    parser.add_argument("--memory-streams", type=int, default=500)
    parser.add_argument("--gate", action="store_true", help="also measure with two regex validators")
    parser.add_argument("--facades", action="store_true", help="also measure the OpenAI and Anthropic facades")
    parser.add_argument("--facade-rounds", type=int, default=3, help="interleaved rounds of the facade runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    up_port, gw_port, relay_port = free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    gw_env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000"}
    results: dict = {"streams": args.streams, "chunks_per_stream": args.chunks, "concurrency": args.concurrency}
    model = f"bench/chunks-{args.chunks}"

    with server("bench.upstream:app", up_port), server("app.main:app", gw_port, gw_env) as gw, \
            server("bench.relay:app", relay_port, {"RELAY_UPSTREAM": upstream_url}) as relay:
        gw_url, relay_url = f"http://127.0.0.1:{gw_port}/v1/stream", f"http://127.0.0.1:{relay_port}/v1/stream"

        async def cpu_per_chunk(pid: int, url: str, payload: dict) -> tuple[float, int, float]:
            await run_streams(url, payload, min(20, args.streams), args.concurrency)  # warm-up
            c0 = cpu_seconds(pid)
            events, wall = await run_streams(url, payload, args.streams, args.concurrency)
            used = cpu_seconds(pid) - c0
            return used / (args.streams * args.chunks) * 1e6, events, wall

        relay_us, _, _ = await cpu_per_chunk(relay.pid, relay_url, body(model))
        gw_us, gw_events, gw_wall = await cpu_per_chunk(gw.pid, gw_url, body(model))
        # CPU is read in clock ticks (10 ms): a tiny run can measure 0, so no ratio then.
        results["cpu_us_per_chunk"] = {"relay": round(relay_us, 2), "gateway": round(gw_us, 2),
                                       "ratio": round(gw_us / relay_us, 2) if relay_us else None}
        results["gateway_events_per_second"] = round(gw_events / gw_wall)
        if args.gate:
            validators = [{"name": "regex_deny", "config": {"patterns": [r"(?i)\bpassword\b"]}},
                          {"name": "regex_deny", "config": {"patterns": [r"\d{16}"]}}]
            gate_us, _, _ = await cpu_per_chunk(gw.pid, gw_url, body(model, validators=validators,
                                                                     chunking="sentence"))
            results["cpu_us_per_chunk"]["gateway_two_regex_validators"] = round(gate_us, 2)
        if args.facades:
            # Interleaved rounds, medians: the facades and /v1/stream see the same machine load.
            base = f"http://127.0.0.1:{gw_port}"
            targets = {"stream": (gw_url, body(model)),
                       "openai_facade": (f"{base}/v1/chat/completions", body(model, stream=True)),
                       "anthropic_facade": (f"{base}/v1/messages", body(model, stream=True, max_tokens=4096))}
            samples: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.facade_rounds):
                for name, (url, payload) in targets.items():
                    samples[name].append((await cpu_per_chunk(gw.pid, url, payload))[0])
            stream_us = statistics.median(samples["stream"])
            results["cpu_us_per_chunk"]["stream_interleaved"] = round(stream_us, 2)
            for name in ("openai_facade", "anthropic_facade"):
                facade_us = statistics.median(samples[name])
                results["cpu_us_per_chunk"][name] = round(facade_us, 2)
                ratio = round(facade_us / stream_us, 2) if stream_us else None
                results["cpu_us_per_chunk"][f"{name}_vs_stream"] = ratio
        direct = f"{upstream_url}/chat/completions"
        for concurrency in (1, 50):
            rounds = args.ttft_rounds if concurrency == 1 else max(4, args.ttft_rounds // 10)
            d = await ttft_samples(direct, {"model": "chunks-5", "messages": [], "stream": True},
                                   rounds=rounds, concurrency=concurrency, marker=b"tok0")
            g = await ttft_samples(gw_url, body("bench/chunks-5"), rounds=rounds, concurrency=concurrency,
                                   marker=b"event: token")
            r = await ttft_samples(relay_url, body("bench/chunks-5"), rounds=rounds, concurrency=concurrency,
                                   marker=b"event: token")
            results[f"ttft_ms_c{concurrency}"] = {
                "direct_median": round(statistics.median(d) * 1e3, 3),
                "gateway_median": round(statistics.median(g) * 1e3, 3),
                "added_median": round((statistics.median(g) - statistics.median(d)) * 1e3, 3),
                "relay_added_median": round((statistics.median(r) - statistics.median(d)) * 1e3, 3),
                "samples": len(g),
            }
        per_stream = await open_streams_memory(gw_url, gw.pid, args.memory_streams)
        results["memory_kib_per_open_stream"] = round(per_stream / 1024, 1)
        results["memory_streams"] = args.memory_streams
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    asyncio.run(main())
