"""The upstream client alone: one streamed POST to the fake upstream on loopback (1-chunk chat
completion stream), its body read to the end, in a loop on uvloop; round trip median and CPU of
this process per request. The ways in, taking turns in each round:

- `httpx2_default`: `httpx2.AsyncClient` on its own transport (httpcore2 + h11), as the SDKs ship;
- `httpx2_on_h1`: the gateway's client (`upstream_http_client`: httpx2 on `H1Transport`, through
  `client.send`), what injected-less Gemini and the SDKs' own `post` use;
- `prepared`: the gateway's prepared request (`DirectPost` on the same client: straight to the
  transport), what a gateway-built OpenAI/Anthropic client opens its streams with;
- `aiohttp` (only when aiohttp is installed; it is not a dependency): aiohttp's own client with
  its URL, headers and timeout built once, the bar `H1Transport` had to clear.

Usage: `python bench/transport_bench.py [--requests 1000] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx2
import openai
import orjson
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.providers.direct import openai_direct  # noqa: E402
from app.providers.transport import upstream_http_client  # noqa: E402
from bench.run import emit, free_port, server  # noqa: E402


async def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000, help="requests per way in, per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    url = f"{base}/chat/completions"
    body = {"model": "chunks-1", "messages": [{"role": "user", "content": "bench"}], "stream": True}
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}
    with server("bench.upstream:app", port):
        ours = upstream_http_client(connect_timeout=5, read_timeout=60)
        default = httpx2.AsyncClient(timeout=60)
        sdk = openai.AsyncOpenAI(api_key="bench", base_url=base, http_client=ours, max_retries=0)
        prepared = openai_direct(sdk, ours, "/chat/completions")

        async def through(client: httpx2.AsyncClient) -> None:
            async with client.stream("POST", url, content=orjson.dumps(body), headers=headers) as response:
                async for _ in response.aiter_raw():
                    pass

        async def on_the_wire() -> None:
            response = await prepared(body)
            async for _ in response.aiter_raw():
                pass
            await response.aclose()

        ways: dict[str, Callable[[], Awaitable[None]]] = {
            "httpx2_default": lambda: through(default),
            "httpx2_on_h1": lambda: through(ours),
            "prepared": on_the_wire,
        }
        closers = [ours.aclose, default.aclose]
        try:
            import aiohttp
            import yarl
        except ImportError:
            pass
        else:
            session = aiohttp.ClientSession()
            target, timeout = yarl.URL(url), aiohttp.ClientTimeout(total=None, sock_read=60)

            async def aiohttp_alone() -> None:
                async with session.post(target, data=orjson.dumps(body), headers=headers, timeout=timeout,
                                        compress=False, allow_redirects=False) as response:
                    async for _ in response.content.iter_any():
                        pass

            ways["aiohttp"] = aiohttp_alone
            closers.append(session.close)

        times: dict[str, list[float]] = {name: [] for name in ways}
        cpu: dict[str, float] = dict.fromkeys(ways, 0.0)
        for way in ways.values():  # warm connections and code paths
            for _ in range(50):
                await way()
        for _ in range(args.rounds):
            for name, way in ways.items():
                c0 = time.process_time()
                for _ in range(args.requests):
                    t0 = time.perf_counter()
                    await way()
                    times[name].append(time.perf_counter() - t0)
                cpu[name] += time.process_time() - c0
        for close in closers:
            await close()
    total = args.requests * args.rounds
    results = {name: {"round_trip_median_us": round(statistics.median(times[name]) * 1e6, 1),
                      "cpu_us_per_request": round(cpu[name] / total * 1e6, 1)} for name in ways}
    emit({"requests": total, "ways": results}, args.json)
    return results


if __name__ == "__main__":
    uvloop.run(main())

