"""The upstream client alone: one streamed POST to the fake upstream on loopback (1-chunk chat
completion stream), its body read to the end, in a loop on uvloop; round trip median and CPU of
this process per request. The ways in, taking turns in each round:

- `gateway_own`: the gateway's own send path (app/providers/upstream.py: `send()` on
  `client_session()` with the proxy environment read once, the body bytes built per request as
  `HttpAdapter` does): what the gateway runs;
- `aiohttp`: aiohttp's own client with its URL, headers and timeout built once: the floor;
- for comparison, the official SDK's ways in (the SDKs are in the dev install, not the gateway's):
  `httpx2_default`, `httpx2.AsyncClient` on its own transport (httpcore2 + h11), as the SDKs ship;
  `sdk_aiohttp`, the OpenAI SDK's `DefaultAioHttpClient` (httpx2 on aiohttp, its `aiohttp` extra),
  through `client.stream`; `gateway_on_httpx2_default` / `gateway_on_sdk_aiohttp`, a streamed call
  through the SDK's `client.post` with its raw-response marker (the request unread, no typed
  parsing), on each of the two clients: the path the gateway would take on an SDK.

Usage: `python bench/transport_bench.py [--requests 1000] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx2
import openai
import orjson
import uvloop
import yarl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.providers.config import ProviderConfig  # noqa: E402
from app.providers.descriptor import UpstreamRequest  # noqa: E402
from app.providers.upstream import client_session, send  # noqa: E402
from bench.run import emit, free_port, server  # noqa: E402

RAW_STREAM = {"headers": {"X-Stainless-Raw-Response": "stream"}, "max_retries": 0}
"""`options=` of the SDK's documented `client.post(path, cast_to=httpx2.Response, ...)`: its own
marker for "hand me the response unread"."""


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
        default = httpx2.AsyncClient(timeout=60, follow_redirects=False)
        on_aiohttp = openai.DefaultAioHttpClient(timeout=60, follow_redirects=False)
        sdks = {name: openai.AsyncOpenAI(api_key="bench", base_url=base, http_client=http, max_retries=0)
                for name, http in (("httpx2_default", default), ("sdk_aiohttp", on_aiohttp))}
        session = aiohttp.ClientSession()
        target, timeout = yarl.URL(url), aiohttp.ClientTimeout(total=None, sock_read=60)

        async def through(client: httpx2.AsyncClient) -> None:
            async with client.stream("POST", url, content=orjson.dumps(body), headers=headers) as response:
                async for _ in response.aiter_bytes():
                    pass

        async def gateway(sdk: openai.AsyncOpenAI) -> None:
            response = await sdk.post("/chat/completions", body=body, cast_to=httpx2.Response, options=RAW_STREAM)
            try:
                async for _ in response.aiter_bytes():
                    pass
            finally:
                await response.aclose()

        async def aiohttp_alone() -> None:
            async with session.post(target, data=orjson.dumps(body), headers=headers, timeout=timeout,
                                    compress=False, allow_redirects=False) as response:
                async for _ in response.content.iter_any():
                    pass

        own = client_session(ProviderConfig(connect_timeout=5, read_timeout=60))

        async def gateway_own() -> None:
            response = await send(own, UpstreamRequest(url=url, body=orjson.dumps(body), headers=dict(headers)), "bench")
            try:
                async for _ in response.content.iter_any():
                    pass
            finally:
                response.release()

        ways: dict[str, Callable[[], Awaitable[None]]] = {
            "httpx2_default": lambda: through(default),
            "sdk_aiohttp": lambda: through(on_aiohttp),
            "gateway_on_httpx2_default": lambda: gateway(sdks["httpx2_default"]),
            "gateway_on_sdk_aiohttp": lambda: gateway(sdks["sdk_aiohttp"]),
            "gateway_own": gateway_own,
            "aiohttp": aiohttp_alone,
        }
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
        for close in (default.aclose, on_aiohttp.aclose, session.close, own.close):
            await close()
    total = args.requests * args.rounds
    results = {name: {"round_trip_median_us": round(statistics.median(times[name]) * 1e6, 1),
                      "cpu_us_per_request": round(cpu[name] / total * 1e6, 1)} for name in ways}
    floor = results["aiohttp"]["cpu_us_per_request"] or None
    ratios = {name: round(way["cpu_us_per_request"] / floor, 2) if floor else None for name, way in results.items()}
    emit({"requests": total, "ways": results, "cpu_over_aiohttp": ratios}, args.json)
    return results


if __name__ == "__main__":
    uvloop.run(main())
