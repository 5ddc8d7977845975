"""Where the gateway's CPU goes under load: py-spy samples, self time summed by layer.

Starts the fake upstream and the gateway as bench/run.py does, loads the gateway with 200-chunk
streams (20 at a time) for `--seconds`, samples the gateway process with py-spy, and prints the
share of self time (the innermost Python frame of each sample) per layer: upstream transport,
SDK, SSE parsing, normalizer + accumulator, encoding + stream log, gateway logic, the HTTP
server, the framework, the event loop.

py-spy is not a dependency: `pip install py-spy` into the venv first (root or ptrace rights).
Usage: `python bench/profile.py [--seconds 15] [--validators]`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import NO_ADMISSION_BY_LAG, body, free_port, run_streams, server  # noqa: E402

# First match wins: (layer, pattern on the innermost frame's file, as py-spy prints it:
# `function (package/module.py:line)`).
LAYERS = [
    ("upstream transport (httpx2/aiohttp/httpcore2/h11)", r"\((httpx2|httpx_aiohttp|aiohttp|httpcore2|h11)/"),
    ("SDK (openai/anthropic)", r"\((openai|anthropic)/"),
    ("SSE parsing", r"\(app/providers/(sse|base)\.py"),
    ("normalizer + accumulator", r"\(app/providers/\w+_stream\.py|\(app/core/(accumulator|patches)\.py"),
    ("encoding + stream log", r"\(app/streams/|\(app/core/events\.py"),
    ("validation", r"\(app/validation/"),
    ("provider request building", r"\(app/providers/|\(app/core/messages\.py"),
    ("gateway logic (run, api, middleware, transcript, metrics, logs)",
     r"\(app/|\((prometheus_client|structlog)/"),
    ("HTTP server (uvicorn)", r"\((uvicorn|httptools)/"),
    ("framework (starlette/fastapi/pydantic)", r"\((starlette|fastapi|pydantic|pydantic_core|annotated_types)/"),
    ("event loop (asyncio/anyio)", r"\((asyncio|uvloop|anyio)/|selectors\.py"),
]


def layer_of(frame: str) -> str:
    for name, pattern in LAYERS:
        if re.search(pattern, frame):
            return name
    return "other"


def summarize(raw: str) -> dict[str, float]:
    """py-spy `--format raw` (collapsed stacks `f1;f2;... count`) -> self-time share per layer."""
    totals: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        totals[layer_of(leaf)] += int(count)
    samples = sum(totals.values()) or 1
    return {name: round(100 * n / samples, 1) for name, n in totals.most_common()}


def find_spy() -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy (a profiling tool, not a dependency)")
    return spy


def start_spy(spy: str, pid: int, seconds: float, out: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "250",
                             "--format", "raw", "--output", out, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def read_text(path: str) -> str:
    return Path(path).read_text()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--validators", action="store_true", help="sentence chunking + two regex validators")
    parser.add_argument("--chunks", type=int, default=200, help="chunks per stream (1: the per-request path)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args()
    spy = find_spy()
    up_port, gw_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    env = {"FOUNDRY_PROVIDERS": json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}]),
           "FOUNDRY_LOG_LEVEL": "warning", **NO_ADMISSION_BY_LAG, "FOUNDRY_MAX_STREAMS": "100000"}
    extra = {}
    if args.validators:
        extra = {"chunking": "sentence", "validators": [
            {"name": "regex_deny", "config": {"patterns": [r"(?i)\bpassword\b"]}},
            {"name": "regex_deny", "config": {"patterns": [r"\d{16}"]}}]}
    payload = body(f"bench/chunks-{args.chunks}", **extra)
    with server("bench.upstream:app", up_port), server("app.main:app", gw_port, env) as gw, \
            tempfile.NamedTemporaryFile(suffix=".txt") as out:
        raw_path = str(args.raw) if args.raw else out.name
        url = f"http://127.0.0.1:{gw_port}/v1/stream"
        await run_streams(url, payload, 20, 20)  # warm-up
        proc = start_spy(spy, gw.pid, args.seconds, raw_path)
        while proc.poll() is None:
            await run_streams(url, payload, 40, 20)
        if proc.returncode:
            raise SystemExit(f"py-spy failed: {proc.stderr.read().decode()[-500:]}")
        shares = summarize(read_text(raw_path))
    print(json.dumps({"self_time_percent_by_layer": shares}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(shares, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
