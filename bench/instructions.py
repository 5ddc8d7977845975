"""Instructions per request and per chunk, counted by valgrind's callgrind: the gateway against the
floor (bench/relay.py), and checkouts against each other, in figures that do not move with the
machine's pace.

On a shared machine CPU time moves by ±10% from one run to the next (the same change read -6.5%
and +6% in two `bench/compare.py` runs, docs/performance.md), too much to see a change of a few per
cent. Callgrind counts the instructions a process runs, whatever else the machine does. Each target
runs under `valgrind --tool=callgrind` once. After a warm-up its counters are zeroed and dumped
(`callgrind_control`) around each measured window, so start-up (about 8G instructions for the
gateway) and warm-up stay out of the count:
- idle windows (`SETTLE_SECONDS` each) until two in a row agree: what the process's timers run by
  the clock (the gateway's loop-lag monitor and sweepers, uvicorn's tick), per second. The first
  ones after a warm-up are not idle: the gateway's first records are written and their statements
  compiled then (measured: 11-15M instructions a second in the first window after start-up or a
  warm-up, 0.6-0.7M in the next ones);
- `--requests` 1-chunk streams, then `--streams` 200-chunk streams, each window followed by more
  windows until one is idle again (the records writer's SQLite thread has written the runs).
A window's count, less its length times the idle rate, over its streams is what one stream costs.
Counts are per process (all its threads: the records writer's SQLite thread counts too).

Before, each figure was the difference of two whole-process counts (a few streams and many more)
less an idle rate taken from two idle runs; run side by side on a loaded machine, start-up work that
outlasted the shorter idle run was read as idle ticking (27M instructions a second, where one idle
process under callgrind runs 0.4-0.7M), and that correction took most of a chunk's count away.

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import run_streams  # noqa: E402
from bench.run import NO_ADMISSION_BY_LAG, body, free_port, process, serve_command, server  # noqa: E402

CHUNKS = 200
"""Chunks per stream of the per-chunk workload, as bench/run.py's."""
WARM_UP = 10
"""Streams of each workload served before any count (imports, caches, the interpreter's specializing)."""
SETTLE_SECONDS = 2.0
QUIET = 1.25
"""Two idle windows agree when neither runs more than this times the other's rate; a window after a
load is idle again when it runs no more than this times the idle rate."""
CONCURRENCY = 10


@dataclass
class Window:
    instructions: int
    seconds: float


class Counted:
    """A server under callgrind whose counts are taken by windows (`window`)."""

    def __init__(self, proc: subprocess.Popen, out: Path, port: int) -> None:
        self.proc, self.out, self.url = proc, out, f"http://127.0.0.1:{port}/v1/stream"
        self.dumps = 0

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True, timeout=300)

    def serve(self, model: str, streams: int) -> None:
        asyncio.run(run_streams(self.url, body(model), streams, min(CONCURRENCY, streams)))

    def window(self, model: str | None = None, streams: int = 0) -> Window:
        """The instructions run while `streams` of `model` were served and `SETTLE_SECONDS` after."""
        self._control("--zero")
        started = time.monotonic()
        if streams:
            self.serve(model or "", streams)
        time.sleep(SETTLE_SECONDS)
        seconds = time.monotonic() - started
        self._control(f"--dump=window{self.dumps}")
        self.dumps += 1
        return Window(self._last_total(), seconds)

    def _last_total(self) -> int:
        """The total of the newest dump (callgrind writes each as `<out>.<part>`)."""
        newest = max(self.out.parent.glob(f"{self.out.name}.*"), key=lambda p: int(p.suffix[1:]))
        totals = re.search(r"^totals: (\d+)", newest.read_text(), re.MULTILINE)
        if totals is None:
            raise SystemExit(f"no total in callgrind's dump {newest}")
        newest.unlink()
        return int(totals.group(1))


def measure(cmd: list[str], cwd: Path, env: dict[str, str], requests: int, streams: int) -> dict[str, int]:
    """One target's counts: its idle rate, a 1-chunk request, a chunk of a 200-chunk stream."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp, \
            process(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", *cmd, "--port", str(port)],
                    port, what=f"{cmd} under valgrind", cwd=cwd, env={"FOUNDRY_DATA_DIR": tmp, **env},  # a new records database
                    start_seconds=600) as proc:
        counted = Counted(proc, Path(tmp) / "cg.out", port)
        counted.serve("bench/chunks-1", WARM_UP)
        if streams:
            counted.serve(f"bench/chunks-{CHUNKS}", WARM_UP)
        rate = idle_rate(counted)
        request = per_stream(counted, "bench/chunks-1", requests, rate)
        found = {"idle_instructions_per_second": round(rate), "instructions_per_request": round(request)}
        if streams:
            stream = per_stream(counted, f"bench/chunks-{CHUNKS}", streams, rate)
            found |= {"instructions_per_chunk": round(stream / CHUNKS),
                      "instructions_per_chunk_past_the_first": round((stream - request) / (CHUNKS - 1))}
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=600)
    return found


def idle_rate(counted: Counted, most: int = 20) -> float:
    """Instructions a second of the process serving nothing, once two windows in a row agree."""
    last = None
    for window in _windows_until_idle(counted, most):
        rate = window.instructions / window.seconds
        if last is not None and rate <= QUIET * last and last <= QUIET * rate:
            return min(rate, last)
        last = rate
    raise AssertionError("unreachable")


def per_stream(counted: Counted, model: str, streams: int, rate: float, most: int = 20) -> float:
    """Instructions one of `streams` streams of `model` costs: their window and the windows after it
    until one is idle again (what the load left to do, its records to write, belongs to it), less
    what the timers ran meanwhile (`rate` a second)."""
    run = counted.window(model, streams)
    for after in _windows_until_idle(counted, most):
        run = Window(run.instructions + after.instructions, run.seconds + after.seconds)
        if after.instructions <= QUIET * rate * after.seconds:
            return (run.instructions - rate * run.seconds) / streams
    raise AssertionError("unreachable")


def _windows_until_idle(counted: Counted, most: int) -> Iterator[Window]:
    """Windows of the process serving nothing, for the caller to judge; after `most` of them the
    process is still busy, and the benchmark ends with that reason rather than running on."""
    window = None
    for _ in range(most):
        window = counted.window()
        yield window
    rate = f"{window.instructions / window.seconds:.0f}" if window else "no"
    raise SystemExit(f"the process did not go idle: {rate} instructions a second after {most} windows")


Target = tuple[list[str], Path, dict[str, str]]


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
    parser.add_argument("--requests", type=int, default=200, help="1-chunk streams counted per target")
    parser.add_argument("--streams", type=int, default=20, help="200-chunk streams counted per target; 0: per request only")
    parser.add_argument("--jobs", type=int, default=2, help="targets counted at once (counts do not depend on load)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    checkouts = [c.resolve() for c in args.checkouts] or [ROOT]
    up_port = free_port()
    results: dict = {"chunks_per_stream": CHUNKS, "requests": args.requests, "streams": args.streams}
    with server("bench.upstream:app", up_port):
        found = targets(checkouts, f"http://127.0.0.1:{up_port}/v1")

        def one(name: str) -> tuple[str, dict[str, int]]:
            counts = measure(*found[name], args.requests, args.streams)
            print(name, counts, file=sys.stderr, flush=True)
            return name, counts

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results |= dict(pool.map(one, found))
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
