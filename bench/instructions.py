"""Instructions per request and per chunk, counted by valgrind's callgrind: the gateway against the
floor (bench/relay.py), and checkouts against each other, in figures that do not move with the
machine's pace.

On a shared machine CPU time moves by ±10% from one run to the next (the same change read -6.5%
and +6% in two `bench/compare.py` runs, docs/performance.md), too much to see a change of a few per
cent. Callgrind counts the instructions a process runs, whatever else the machine does. Each target
runs under `valgrind --tool=callgrind` twice, serving a few streams and then many more of the same
kind; the difference divided by the difference in streams is what one stream costs, start-up and
warm-up cancelled out. A gateway's timers tick by the clock (about 2M instructions a second of a
run under callgrind, measured idle for each target), so what they ran in the longer run's extra
time is taken out (without it, two tiny runs of a gateway differed by about 100M instructions,
and a count per request over 2 requests came out negative). Counts are per process (all its threads: the records
writer's SQLite thread counts too).

What it does not show: time spent waiting (system calls count only their user-space side), and
the batching of a loaded process. A process under callgrind runs about 50 times slower while the
upstream sends at full speed, so a 200-chunk stream's reads coalesce (many chunks per read and
per wake of its reader), as they do in `bench/run.py`'s burst rounds, not as a paced stream's do.

Usage: `python bench/instructions.py [CHECKOUT ...] [--requests 200] [--streams 20] [--json out]`
(no checkout: this one). Each checkout's gateway runs from its own directory with its own `.venv`.
valgrind is a Debian package (`apt-get install valgrind`); this is not part of `make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import run_streams  # noqa: E402
from bench.run import NO_ADMISSION_BY_LAG, body, free_port, process, serve_command, server  # noqa: E402

CHUNKS = 200
"""Chunks per stream of the per-chunk workload, as bench/run.py's."""


def count(cmd: list[str], cwd: Path, env: dict[str, str], port: int, model: str, streams: int,
          idle: float = 0.0) -> tuple[int, float]:
    """Instructions a server process ran from its start to its exit, having served one warm-up
    stream and then `streams` more (10 at a time) or sat `idle` seconds; and how long that took."""
    with tempfile.TemporaryDirectory() as out, \
            process(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", *cmd], port,
                    what=f"{cmd} under valgrind", cwd=cwd, env={"FOUNDRY_DATA_DIR": out, **env},  # a new records database
                    start_seconds=600) as proc:
        url = f"http://127.0.0.1:{port}/v1/stream"
        started = time.monotonic()
        asyncio.run(run_streams(url, body(model), 1, 1))
        if streams:
            asyncio.run(run_streams(url, body(model), streams, 10))
        time.sleep(idle)
        took = time.monotonic() - started
        proc.send_signal(signal.SIGINT)  # callgrind prints its total as the process exits
        _, err = proc.communicate(timeout=600)
    collected = re.search(r"Collected : (\d+)", err.decode())
    if collected is None:
        raise SystemExit(f"no callgrind total for {cmd}: {err.decode()[-2000:]}")
    return int(collected.group(1)), took


Target = tuple[list[str], Path, dict[str, str]]


def _counts(target: Target, model: str, runs: list[tuple[int, float]], jobs: int) -> list[tuple[int, float]]:
    cmd, cwd, env = target

    def one(run: tuple[int, float]) -> tuple[int, float]:
        port = free_port()
        return count([*cmd, "--port", str(port)], cwd, env, port, model, *run)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, runs))


def idle_rate(target: Target, jobs: int) -> float:
    """Instructions per second of a server that serves nothing: its timers (the gateway's loop-lag
    monitor, sweepers, the records writer) tick by the clock, and under callgrind a run lasts
    50 times longer than it would, so what they ran is taken out of each count (`per_stream`)."""
    (short, short_s), (long, long_s) = _counts(target, "bench/chunks-1", [(0, 5.0), (0, 25.0)], jobs)
    return max(0.0, (long - short) / (long_s - short_s))


def per_stream(target: Target, model: str, few: int, many: int, jobs: int, rate: float) -> float:
    """Instructions one stream costs: the difference of two counts (start-up and warm-up cancel),
    less what the idle timers ran in the longer run's extra time, over the difference in streams."""
    (low, low_s), (high, high_s) = _counts(target, model, [(few, 0.0), (many, 0.0)], jobs)
    return (high - low - rate * (high_s - low_s)) / (many - few)


def targets(checkouts: list[Path], upstream: str) -> dict[str, Target]:
    uvicorn = ["-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning", "--no-access-log",
               "--timeout-keep-alive", "600"]
    gateway_env = {"FOUNDRY_PROVIDERS": json.dumps([{"name": "bench", "base_url": upstream, "api_key_env": None}]),
                   "FOUNDRY_LOG_LEVEL": "warning", "FOUNDRY_MAX_STREAMS": "100000", **NO_ADMISSION_BY_LAG}
    found = {"relay": ([sys.executable, *uvicorn, "bench.relay:app"], ROOT, {"RELAY_UPSTREAM": upstream})}
    for checkout in checkouts:
        python = checkout / ".venv" / "bin" / "python"
        found[str(checkout)] = (serve_command(str(python) if python.exists() else sys.executable), checkout, gateway_env)
    return found


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="*", type=Path)
    parser.add_argument("--requests", type=int, default=200, help="1-chunk streams counted per target (beyond 2)")
    parser.add_argument("--streams", type=int, default=20,
                        help="200-chunk streams counted per target (beyond 2); 0: per request only")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at once (counts do not depend on load)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    checkouts = [c.resolve() for c in args.checkouts] or [ROOT]
    up_port = free_port()
    results: dict = {"chunks_per_stream": CHUNKS, "requests": args.requests, "streams": args.streams}
    with server("bench.upstream:app", up_port):
        for name, target in targets(checkouts, f"http://127.0.0.1:{up_port}/v1").items():
            rate = idle_rate(target, args.jobs)
            request = per_stream(target, "bench/chunks-1", 2, 2 + args.requests, args.jobs, rate)
            results[name] = {"idle_instructions_per_second": round(rate), "instructions_per_request": round(request)}
            if args.streams:
                stream = per_stream(target, f"bench/chunks-{CHUNKS}", 2, 2 + args.streams, args.jobs, rate)
                results[name] |= {"instructions_per_chunk": round(stream / CHUNKS),
                                  "instructions_per_chunk_past_the_first": round((stream - request) / (CHUNKS - 1))}
            print(name, results[name], file=sys.stderr, flush=True)
    floor = results["relay"]
    for checkout in checkouts:
        mine = results[str(checkout)]
        for what in ("request", "chunk"):
            if f"instructions_per_{what}" in mine:
                mine[f"per_{what}_over_floor"] = round(mine[f"instructions_per_{what}"] / floor[f"instructions_per_{what}"], 2)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
