"""CPU of opening a run per request, in process (`Gateway.start` until `RunHandle.opened()`, then
the run cancelled): admission, the run's task, model resolution, gate, the provider request on
the gateway's own aiohttp client (app/providers/upstream.py), the stream log and transcript.
The upstream is an aiohttp server on loopback in the same process answering a one-chunk stream
at once, so its socket work is counted too (the same for every adapter).

For the OpenAI Chat, Responses and Anthropic adapters the gateway builds from keys.

Usage: `python bench/open_bench.py [--requests 2000]`. Prints microseconds of CPU per open
(median of 5 rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.messages import Message  # noqa: E402
from app.main import create_app  # noqa: E402
from app.pipeline import RunSpec  # noqa: E402
from app.providers.base import ProviderRequest  # noqa: E402
from app.settings import Settings  # noqa: E402

_SSE = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
# `Gateway.open` reads each stream up to its first content (app/routing): each wire format's own
_RESPONSES_SSE = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"m1",'
                  b'"output_index":0,"content_index":0,"delta":"hi"}\n\n')
_ANTHROPIC_SSE = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
                  b'"role":"assistant","model":"claude","content":[],"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
                  b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                  b'"delta":{"type":"text_delta","text":"hi"}}\n\n')


async def _answer(request: web.Request) -> web.StreamResponse:
    await request.read()
    path = request.path
    body = _RESPONSES_SSE if path.endswith("/responses") else _ANTHROPIC_SSE if path.endswith("/messages") else _SSE
    return web.Response(body=body, headers={"content-type": "text/event-stream"})


async def open_once(gateway, spec: RunSpec) -> None:
    handle = gateway.start(spec)
    await handle.opened()
    handle.cancel("client_gone")
    await handle.task


async def per_open(gateway, model: str, requests: int) -> float:
    spec = RunSpec(request=ProviderRequest(model=model, messages=(Message(role="user", content="hello there"),)))
    for _ in range(50):  # warm-up
        await open_once(gateway, spec)
    rounds = []
    for _ in range(5):
        c0 = time.process_time()
        for _ in range(requests // 5):
            await open_once(gateway, spec)
        rounds.append((time.process_time() - c0) / (requests // 5) * 1e6)
    return statistics.median(rounds)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    models = ("openai/gpt-4o-mini", "openai-responses/gpt-4o-mini", "anthropic/claude")
    out: dict[str, dict[str, float]] = {}

    app = web.Application()
    app.router.add_post("/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    settings = Settings(log_level="warning", max_streams=1_000_000, max_loop_lag_seconds=0, openai_api_key="k",
                        openai_base_url=f"http://127.0.0.1:{port}/v1", anthropic_api_key="k",
                        anthropic_base_url=f"http://127.0.0.1:{port}")
    gateway = create_app(settings).state.gateway
    out["gateway_built"] = {m: round(await per_open(gateway, m, args.requests), 1) for m in models}
    await gateway.aclose()
    await runner.cleanup()
    print(json.dumps({"gateway_open_cpu_us": out}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
