"""Gateway overhead benchmark: ratios against the floor, measured in the same run.

Starts, each in its own process on loopback: a fake OpenAI-compatible upstream
(bench/upstream.py), the gateway (as users run it, `foundry-gateway serve`; provider `bench` pointing at
the upstream), and the floor (bench/relay.py: a Starlette parse-and-re-emit relay on aiohttp, what
any gateway built from the same well-kept libraries pays per chunk). This process is the load
client (bench/loadgen.py: asyncio protocols and httptools, cheap enough not to be the
bottleneck). Every comparison is interleaved: the targets take turns in several short rounds, so
a neighbour's load on this shared machine hits them alike. Reports:

1. CPU per relayed upstream chunk, no validators: gateway / relay (200-chunk streams, c=20);
2. the same with the sentence chunker and two regex validators, / relay;
3. added time to first token at concurrency 1: each target's median over a direct connection
   to the upstream, and the gateway minus the relay (the median of paired differences);
4. CPU per request (1-chunk streams), gateway minus relay;
5. events per second at concurrency 50, gateway and relay;
6. memory per open stream (held mid-generation; gateway and relay) and per retained (finished)
   stream: RSS growth, and the encoded bytes the store counts against its global budget
   (FOUNDRY_MAX_STORE_BYTES);
7. with `--facades`: CPU per chunk through the drop-in facades (POST /v1/chat/completions and
   POST /v1/messages, streaming) in the same interleaved rounds, next to /v1/stream's.

`goals` judges 1-4 against GOALS (and prints DESIGN.md's long-term BUDGET); bench/goals.py prints
them with the paced-load goals of bench/paced_bench.py.

Usage: `python bench/run.py [--streams 300] [--chunks 200] [--rounds 3] [--json out.json]`.
No timed assertions anywhere: this prints numbers; the notes and README quote them.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import Connection, run_streams, split_url  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


NO_ADMISSION_BY_LAG = {"FOUNDRY_MAX_LOOP_LAG_SECONDS": "0"}
"""The CPU benches measure what relaying costs, so the gateway admits every stream however late its
loop runs (on a loaded machine it would refuse some); bench/paced_bench.py keeps the default."""


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


GATEWAY = "app.main:app"
"""The gateway, as `server` runs it: the way users do, `foundry-gateway serve` (`python -m app serve`)."""


def serve_command(python: str = sys.executable) -> list[str]:
    """The gateway as users run it (README, `make run`): `foundry-gateway serve`, with its own HTTP
    protocol (the request deadline, app/api/deadline.py), keep-alive (75 s) and log configuration;
    its settings from the environment (FOUNDRY_*). Add `--port N`."""
    return [python, "-m", "app", "serve", "--host", "127.0.0.1"]


@contextmanager
def server(target: str, port: int, env: dict[str, str] | None = None, *, cwd: Path = ROOT,
           python: str = sys.executable):
    """`target` under uvicorn (the gateway, `GATEWAY`: under its own `serve` command), run from
    `cwd` by `python`, once it answers /healthz. The gateway's embedded records database is a new
    one in a temporary directory (unless `env` names one): one left in the checkout's `var/` grows
    with every run (400 MB in a day of benchmarks), and a run's insert into a large database costs
    more CPU than into a new one (docs/performance.md, "A new records database each run")."""
    cmd = [*serve_command(python), "--port", str(port)] if target == GATEWAY else uvicorn_command(target, port, python)
    with tempfile.TemporaryDirectory(prefix="foundry-bench-data-") as data:
        # a loaded 2-core machine takes a while to import the app
        with process(cmd, port, what=target, cwd=cwd, env={"FOUNDRY_DATA_DIR": data, **(env or {})},
                     start_seconds=90) as proc:
            yield proc


def uvicorn_command(target: str, port: int, python: str = sys.executable) -> list[str]:
    """`target` (an ASGI app, `module:attr`) under plain uvicorn on 127.0.0.1:`port`: the floor, the
    fake upstream. Keep-alive past uvicorn's 5 s: on a loaded machine a round of 50 can outlast it,
    and a pooled connection closed by the server just as the client reuses it fails the run (ReadError)."""
    return [python, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "60"]


def dies_with_parent() -> None:
    """`preexec_fn` of a benchmark's servers: on Linux the child is killed when the thread that
    started it ends (`prctl(PR_SET_PDEATHSIG)`), so a benchmark killed mid-run (a test's timeout
    kills it with SIGKILL, which runs no `finally`) leaves no server behind to load the machine and
    skew the next run's numbers. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@contextmanager
def process(cmd: list[str], port: int, *, what: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
            start_seconds: float = 60):
    """`cmd` in a process of its own, once it answers /healthz on `port`; stopped on exit."""
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=dies_with_parent)
    try:
        deadline = time.monotonic() + start_seconds
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()  # reading the stderr of a live process would wait forever
                raise RuntimeError(f"{what} did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def body(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "bench"}], **extra}


async def cpu_rounds(targets: dict[str, tuple[int, str, dict]], total: int, concurrency: int,
                     rounds: int) -> dict[str, float]:
    """CPU seconds per stream of each target (its pid, its URL, the body it is sent), the targets
    taking turns each round, in an order that turns."""
    used = dict.fromkeys(targets, 0.0)
    for _, url, payload in targets.values():  # warm-up
        await run_streams(url, payload, concurrency, concurrency)
    names, per_round = list(targets), max(1, total // rounds)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            pid, url, payload = targets[name]
            c0 = cpu_seconds(pid)
            await run_streams(url, payload, per_round, concurrency)
            used[name] += cpu_seconds(pid) - c0
    return {name: used[name] / (per_round * rounds) for name in targets}


def sending(targets: dict[str, tuple[int, str]], model: str) -> dict[str, tuple[int, str, dict]]:
    """`cpu_rounds`' targets: each sent the same body, for `model`."""
    return {name: (pid, url, body(model)) for name, (pid, url) in targets.items()}


async def open_streams_memory(url: str, pid: int, streams: int, waves: int = 3) -> tuple[float, float]:
    """RSS growth per stream held open mid-generation (the upstream holds after its first chunks),
    `waves` waves of `streams` each, all held until the last: (the first wave's growth per stream,
    the growth per stream over the later waves).

    The first wave's figure depends on the heap the process built before it (memory freed earlier is
    reused): the floor reads 40-47 KiB on its first 300 streams and 0-10 on the next; a gateway whose
    requests left garbage for the collector read less on its first wave than one whose requests left
    none. The later waves' slope is what one more open stream costs (docs/performance.md)."""
    limits = httpx.Limits(max_connections=streams * waves + 10, max_keepalive_connections=streams * waves + 10)
    release = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        rss = [rss_bytes(pid)]
        try:
            for _ in range(waves):
                opened = 0
                started = asyncio.Event()

                async def hold(started: asyncio.Event = started) -> None:
                    nonlocal opened
                    async with client.stream("POST", url, json=body("bench/hold-20")) as r:
                        async for chunk in r.aiter_bytes():
                            if b"event: token" in chunk:
                                break
                        opened += 1
                        if opened == streams:
                            started.set()
                        await release.wait()

                tasks += [asyncio.create_task(hold()) for _ in range(streams)]
                await asyncio.wait_for(started.wait(), 60)
                rss.append(rss_bytes(pid))
        finally:
            release.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return (rss[1] - rss[0]) / streams, (rss[-1] - rss[1]) / (streams * (waves - 1))


# The goals this bench judges (bench/goals.py prints them with the paced-load ones): CPU per
# chunk as a ratio to the floor, added time to first token over the floor, CPU per request.
GOALS = {"cpu_ratio": 1.5, "cpu_ratio_validators": 2.0, "added_ttft_ms_c1": 0.5, "request_cpu_ms_over_relay": 0.3}
# DESIGN.md section 7, the long-term budget for the same two ratios.
BUDGET = {"cpu_ratio": 1.3, "cpu_ratio_validators": 1.6}
VALIDATORS = [{"name": "regex_deny", "config": {"patterns": [r"(?i)\bpassword\b"]}},
              {"name": "regex_deny", "config": {"patterns": [r"\d{16}"]}}]


async def interleaved_ttft(targets: dict[str, tuple[str, dict, bytes]], rounds: int) -> dict[str, list[float]]:
    """Time to first content at concurrency 1, one request per target per round, in turn."""
    samples: dict[str, list[float]] = {name: [] for name in targets}
    conns = {name: await Connection.open(*split_url(url)[:2]) for name, (url, _, _) in targets.items()}

    async def one(name: str) -> float:
        url, payload, marker = targets[name]
        seen, first = b"", 0

        def sink(data: bytes, now: int) -> None:
            nonlocal seen, first
            if not first:
                seen += data
                if marker in seen:
                    first = now
        start = time.monotonic_ns()
        status = await conns[name].exchange(split_url(url)[2], orjson.dumps(payload), sink)
        assert status == 200 and first, url
        return (first - start) / 1e9

    try:
        for _ in range(3):  # warm connections and code paths
            for name in targets:
                await one(name)
        for i in range(rounds):
            names = list(targets)
            for name in names[i % len(names):] + names[:i % len(names)]:
                samples[name].append(await one(name))
    finally:
        for conn in conns.values():
            conn.close()
    return samples


def store_bytes(base_url: str) -> float:
    """The stream store's own count of retained encoded bytes (`foundry_store_bytes`)."""
    for line in httpx.get(f"{base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("foundry_store_bytes "):
            return float(line.split()[1])
    return 0.0


async def retained_memory(url: str, pid: int, streams: int, concurrency: int, chunks: int) -> tuple[float, float]:
    """Per finished stream kept for replay (measured right after start, nothing retained yet):
    RSS growth, and the encoded bytes the store counts against its global budget."""
    base = url.rsplit("/v1/", 1)[0]
    await run_streams(url, body(f"bench/chunks-{chunks}"), concurrency, concurrency)  # warm-up
    before, counted = rss_bytes(pid), store_bytes(base)
    await run_streams(url, body(f"bench/chunks-{chunks}"), streams, concurrency)
    return (rss_bytes(pid) - before) / streams, (store_bytes(base) - counted) / streams


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None  # CPU is read in 10 ms ticks: tiny runs can read 0


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=300, help="streams per target for the CPU measure")
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the CPU measures")
    parser.add_argument("--requests", type=int, default=1200,
                        help="1-chunk requests per target (CPU per request; the kernel counts CPU in 10 ms ticks)")
    parser.add_argument("--ttft-rounds", type=int, default=300, help="interleaved c=1 rounds (direct, gateway, relay)")
    parser.add_argument("--memory-streams", type=int, default=300)
    parser.add_argument("--gate", action="store_true", help="also measure with two regex validators")
    parser.add_argument("--facades", action="store_true", help="also measure the OpenAI and Anthropic facades")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    up_port, gw_port, relay_port = free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    gw_env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000",
              **NO_ADMISSION_BY_LAG}
    results: dict = {"streams": args.streams, "chunks_per_stream": args.chunks, "concurrency": args.concurrency,
                     "rounds": args.rounds}
    model = f"bench/chunks-{args.chunks}"

    with server("bench.upstream:app", up_port), server("app.main:app", gw_port, gw_env) as gw, \
            server("bench.relay:app", relay_port, {"RELAY_UPSTREAM": upstream_url}) as relay:
        gw_url, relay_url = f"http://127.0.0.1:{gw_port}/v1/stream", f"http://127.0.0.1:{relay_port}/v1/stream"
        per_retained, per_retained_counted = await retained_memory(gw_url, gw.pid, args.memory_streams,
                                                                   args.concurrency, args.chunks)

        # name -> (pid, url, payload); CPU summed over interleaved rounds.
        targets = {"relay": (relay.pid, relay_url, body(model)), "gateway": (gw.pid, gw_url, body(model))}
        if args.gate:
            targets["gateway_validators"] = (gw.pid, gw_url, body(model, validators=VALIDATORS, chunking="sentence"))
        if args.facades:
            base = f"http://127.0.0.1:{gw_port}"
            targets["openai_facade"] = (gw.pid, f"{base}/v1/chat/completions", body(model, stream=True))
            targets["anthropic_facade"] = (gw.pid, f"{base}/v1/messages", body(model, stream=True, max_tokens=4096))

        async def cpu_per_chunk(targets: dict, streams: int, chunks: int) -> dict[str, float]:
            """CPU microseconds per chunk of each target (`cpu_rounds`)."""
            per_stream = await cpu_rounds(targets, streams, args.concurrency, args.rounds)
            return {name: seconds / chunks * 1e6 for name, seconds in per_stream.items()}

        cpu = await cpu_per_chunk(targets, args.streams, args.chunks)
        results["cpu_us_per_chunk"] = {name: round(v, 2) for name, v in cpu.items()}
        results["cpu_us_per_chunk"]["ratio"] = _ratio(cpu["gateway"], cpu["relay"])
        if args.gate:
            results["cpu_us_per_chunk"]["ratio_validators"] = _ratio(cpu["gateway_validators"], cpu["relay"])
        for name in ("openai_facade", "anthropic_facade"):
            if name in cpu:
                results["cpu_us_per_chunk"][f"{name}_vs_stream"] = _ratio(cpu[name], cpu["gateway"])

        one = {name: (pid, url, body("bench/chunks-1")) for name, (pid, url, _) in targets.items()
               if name in ("relay", "gateway")}
        per_request = await cpu_per_chunk(one, args.requests, 1)
        results["cpu_ms_per_request"] = {
            "relay": round(per_request["relay"] / 1e3, 3), "gateway": round(per_request["gateway"] / 1e3, 3),
            "gateway_over_relay": round((per_request["gateway"] - per_request["relay"]) / 1e3, 3)}

        rate = {}
        for name in ("relay", "gateway"):
            _, url, payload = targets[name]
            events, wall = await run_streams(url, payload, max(50, args.streams // 3), 50)
            rate[name] = round(events / wall)
        results["events_per_second_c50"] = rate

        samples = await interleaved_ttft({
            "direct": (f"{upstream_url}/chat/completions", {"model": "chunks-5", "messages": [], "stream": True},
                       b"tok0"),
            "gateway": (gw_url, body("bench/chunks-5"), b"event: token"),
            "relay": (relay_url, body("bench/chunks-5"), b"event: token"),
        }, args.ttft_rounds)
        direct = statistics.median(samples["direct"])
        results["ttft_ms_c1"] = {
            "direct_median": round(direct * 1e3, 3),
            "gateway_added_median": round((statistics.median(samples["gateway"]) - direct) * 1e3, 3),
            "relay_added_median": round((statistics.median(samples["relay"]) - direct) * 1e3, 3),
            # Each round times both back to back: the median of their differences drifts least
            # with the load of a shared machine (the absolute figures above move with it).
            "gateway_minus_relay_paired_median": round(statistics.median(
                g - r for g, r in zip(samples["gateway"], samples["relay"], strict=True)) * 1e3, 3),
            "samples": len(samples["gateway"]),
        }
        first, per_open = await open_streams_memory(gw_url, gw.pid, args.memory_streams)
        first_relay, per_open_relay = await open_streams_memory(relay_url, relay.pid, args.memory_streams)
        results["memory_kib"] = {"per_open_stream": round(per_open / 1024, 1),
                                 "relay_per_open_stream": round(per_open_relay / 1024, 1),
                                 "first_wave_per_open_stream": round(first / 1024, 1),
                                 "relay_first_wave_per_open_stream": round(first_relay / 1024, 1),
                                 "per_retained_stream": round(per_retained / 1024, 1),
                                 "per_retained_stream_store_counted": round(per_retained_counted / 1024, 1),
                                 "streams": args.memory_streams}
    results["goals"] = goals(results)
    emit(results, args.json)
    return results


def emit(results: dict, path: Path | None) -> None:
    """A bench's results: printed, and written to `path` (`--json`) when given."""
    text = json.dumps(results, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n")


def goals(results: dict) -> dict[str, str]:
    """Each goal against this run's figure: `met`/`NOT met` with both numbers."""
    cpu = results["cpu_us_per_chunk"]
    figures = {
        "cpu_ratio": cpu.get("ratio"),
        "cpu_ratio_validators": cpu.get("ratio_validators"),
        "added_ttft_ms_c1": results["ttft_ms_c1"]["gateway_minus_relay_paired_median"],
        "request_cpu_ms_over_relay": results["cpu_ms_per_request"]["gateway_over_relay"],
    }
    return {name: f"{'met' if value <= GOALS[name] else 'NOT met'}: {value} (goal <= {GOALS[name]})"
            for name, value in figures.items() if value is not None}


if __name__ == "__main__":
    asyncio.run(main())
