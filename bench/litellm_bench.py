"""Optional: CPU per relayed event, the gateway vs the LiteLLM proxy, in one run (issue 12).

LiteLLM is not a dependency: `make bench-litellm` installs `litellm[proxy]` into its own
virtualenv (`.venv-litellm`) and passes its `litellm` command here with `--litellm`. Both
proxies stream the same fake OpenAI upstream (bench/upstream.py, 200-chunk streams) on loopback,
each in its own process; they take turns in interleaved rounds, and the CPU of each process tree
is divided by the chunks relayed. Goal: the gateway uses at least 25x less CPU per event.

Usage: `python bench/litellm_bench.py --litellm .venv-litellm/bin/litellm [--streams 60]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import (  # noqa: E402
    NO_ADMISSION_BY_LAG,
    body,
    cpu_seconds,
    dies_with_parent,
    emit,
    free_port,
    run_streams,
    server,
)

GOAL = 25.0


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and all its descendants (LiteLLM may run workers as children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        todo.extend(children.get(current, ()))
    return total


@contextmanager
def litellm_proxy(command: str, port: int, upstream_url: str, model: str, key: str, *, short: str | None = None):
    """LiteLLM's proxy serving `model` of the upstream as `bench` (and `short`, if given, as `bench-short`)."""
    entries = [("bench", model)] + ([("bench-short", short)] if short else [])
    config = ("model_list:\n" + "".join(
        f"  - model_name: {name}\n    litellm_params:\n      model: openai/{upstream}\n"
        f"      api_base: {upstream_url}\n      api_key: unused\n" for name, upstream in entries)
        + "litellm_settings:\n  telemetry: false\n  drop_params: true\n")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
           "DISABLE_SCHEMA_UPDATE": "True", "LITELLM_MASTER_KEY": key}
    log = tempfile.TemporaryFile()  # a file, not a pipe: LiteLLM logs every request, a full pipe would block it
    proc = subprocess.Popen([command, "--config", f.name, "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=dies_with_parent)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                log.seek(0)
                raise RuntimeError(f"litellm did not start: {log.read().decode()[-2000:]}")
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        os.unlink(f.name)


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--litellm", required=True, help="the `litellm` command of a separate venv")
    parser.add_argument("--streams", type=int, default=60)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    up_port, gw_port, ll_port = free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    gw_env = {"FOUNDRY_PROVIDERS": json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}]),
              "FOUNDRY_LOG_LEVEL": "warning", **NO_ADMISSION_BY_LAG, "FOUNDRY_MAX_STREAMS": "100000"}
    model = f"chunks-{args.chunks}"
    with server("bench.upstream:app", up_port), server("app.main:app", gw_port, gw_env) as gw, \
            litellm_proxy(args.litellm, ll_port, upstream_url, model, key := "sk-" + secrets.token_hex(16)) as ll:
        targets = {
            "gateway": (gw.pid, f"http://127.0.0.1:{gw_port}/v1/stream", body(f"bench/{model}"), None),
            "litellm": (ll.pid, f"http://127.0.0.1:{ll_port}/v1/chat/completions",
                        {"model": "bench", "messages": [{"role": "user", "content": "bench"}], "stream": True},
                        {"authorization": f"Bearer {key}"}),
        }
        used = dict.fromkeys(targets, 0.0)
        per_round = max(1, args.streams // args.rounds)
        for _, url, payload, headers in targets.values():  # warm-up
            await run_streams(url, payload, args.concurrency, args.concurrency, headers)
        names = list(targets)
        for i in range(args.rounds):
            for name in names[i % 2:] + names[:i % 2]:
                pid, url, payload, headers = targets[name]
                c0 = tree_cpu_seconds(pid)
                await run_streams(url, payload, per_round, args.concurrency, headers)
                used[name] += tree_cpu_seconds(pid) - c0
    chunks = per_round * args.rounds * args.chunks
    us = {name: round(v / chunks * 1e6, 2) for name, v in used.items()}
    ratio = round(us["litellm"] / us["gateway"], 1) if us["gateway"] else None
    results = {"cpu_us_per_event": us, "litellm_over_gateway": ratio,
               "goal": f"{'met' if ratio and ratio >= GOAL else 'NOT met'}: {ratio}x less CPU (goal >= {GOAL}x)"}
    emit(results, args.json)
    return results


if __name__ == "__main__":
    asyncio.run(main())
