"""What traces cost: the gateway with tracing off, with it on (every run sampled, exported over
OTLP/HTTP to a loopback sink, bench/otlp_sink.py), and optionally a checkout from before tracing
existed, side by side with the relay floor, in interleaved rounds on the same machine:

1. added time to first token at concurrency 1 (median over direct, per target);
2. CPU per request (1-chunk streams, c=1);
3. CPU per relayed chunk (200-chunk streams, c=20).

Off must cost nothing measurable against the checkout before (the SDK is not even imported); on
costs one run span, one attempt span and their export per request, never per chunk.
`python bench/tracing_bench.py [--before CHECKOUT] [--rounds 300] [--requests 600] [--json out.json]`
(`git archive <commit> | tar -x -C DIR` makes CHECKOUT; it runs with its own `.venv` when it has one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.compare import serving  # noqa: E402
from bench.run import NO_ADMISSION_BY_LAG, body, cpu_rounds, emit, free_port, interleaved_ttft, sending  # noqa: E402


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="a checkout from before tracing (its gateway as the baseline)")
    parser.add_argument("--rounds", type=int, default=300, help="interleaved TTFT rounds")
    parser.add_argument("--requests", type=int, default=600, help="1-chunk requests per target (CPU)")
    parser.add_argument("--streams", type=int, default=150, help="200-chunk streams per target (CPU per chunk)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    up, sink = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{up}/v1"
    providers = json.dumps([{"name": "bench", "base_url": upstream_url, "api_key_env": None}])
    env = {"FOUNDRY_PROVIDERS": providers, "FOUNDRY_LOG_LEVEL": "warning", **NO_ADMISSION_BY_LAG, "FOUNDRY_MAX_STREAMS": "100000",
           "FOUNDRY_RECORDS": "off", "OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_TRACES_SAMPLER": "always_on"}
    traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink}", "OTEL_SERVICE_NAME": "bench",
              "OTEL_BSP_SCHEDULE_DELAY": "1000"}  # ms: batches every second (the SDK's default is 5)
    gateways = {"tracing_off": (ROOT, env), "tracing_on": (ROOT, traced)}
    if args.before is not None:
        gateways = {"before": (args.before.resolve(), env), **gateways}
    out: dict = {"requests": args.requests, "ttft_rounds": args.rounds, "streams_200_chunks": args.streams}
    with ExitStack() as stack:
        stack.enter_context(serving("bench.upstream:app", up, ROOT))
        stack.enter_context(serving("bench.otlp_sink:app", sink, ROOT))
        targets: dict[str, tuple[int, str]] = {}
        for name, (checkout, variables) in gateways.items():
            port = free_port()
            proc = stack.enter_context(serving("app.main:app", port, checkout, variables))
            targets[name] = (proc.pid, f"http://127.0.0.1:{port}/v1/stream")
        port = free_port()
        relay = stack.enter_context(serving("bench.relay:app", port, ROOT, {"RELAY_UPSTREAM": upstream_url}))
        targets["relay"] = (relay.pid, f"http://127.0.0.1:{port}/v1/stream")

        ttft = {"direct": (f"{upstream_url}/chat/completions", {"model": "chunks-5", "messages": [], "stream": True},
                           b"tok0")}
        ttft.update({name: (url, body("bench/chunks-5"), b"event: token") for name, (_, url) in targets.items()})
        samples = await interleaved_ttft(ttft, args.rounds)
        direct = statistics.median(samples["direct"])
        per_request = await cpu_rounds(sending(targets, "bench/chunks-1"), args.requests, 1, 3)
        per_stream = await cpu_rounds(sending(targets, "bench/chunks-200"), args.streams, 20, 3)
        for name in targets:
            out[name] = {"added_ttft_median_ms": round((statistics.median(samples[name]) - direct) * 1e3, 3),
                         "cpu_ms_per_request": round(per_request[name] * 1e3, 3),
                         "cpu_us_per_chunk": round(per_stream[name] / 200 * 1e6, 2)}
        base = out.get("before", out["tracing_off"])
        for name in ("tracing_off", "tracing_on"):
            out[name]["cpu_ms_per_request_over_baseline"] = round(out[name]["cpu_ms_per_request"]
                                                                  - base["cpu_ms_per_request"], 3)
            out[name]["paired_ttft_ms_over_baseline"] = round(statistics.median(
                a - b for a, b in zip(samples[name], samples["before" if "before" in out else "tracing_off"],
                                      strict=True)) * 1e3, 3)
        async with httpx.AsyncClient(timeout=10) as client:  # the last batch leaves within OTEL_BSP_SCHEDULE_DELAY
            for _ in range(100):
                received = (await client.get(f"http://127.0.0.1:{sink}/count")).json()
                if received["exports"]:
                    break
                await asyncio.sleep(0.1)
            out["tracing_on"]["sink_received"] = received
    emit(out, args.json)
    return out


if __name__ == "__main__":
    asyncio.run(main())
