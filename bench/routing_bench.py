"""Cost of the routing layer per request when nothing fails, in process (no HTTP).

The same in-memory upstream (a provider stream of `--chunks` patch batches, no I/O) is opened and
read to its end `--requests` times two ways, interleaved in rounds so both see the same machine:

- direct: `adapter.open_stream(request)` and read every batch (what the pipeline did before);
- routed: `router.session(model)` + `session.open_stream(request)` (retry/fallback bookkeeping,
  the breaker check, the read up to the first content, deadlines armed) and read every batch
  through the `RoutedStream` (its idle/total watchdog).

Reported: CPU microseconds per request for each, the difference (the routing layer's cost per
request), and that difference spread over the chunks. Usage:
`python bench/routing_bench.py [--requests 5000] [--chunks 50] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.messages import Message
from app.core.patches import MessageDelta, MessageEnd, MessageStart, Patch, TextDelta
from app.providers.base import ProviderRequest
from app.providers.registry import ProviderRegistry
from app.routing.config import RouteConfig
from app.routing.router import Router
from app.routing.targets import Policy


class _Stream:
    __slots__ = ("_batches",)

    def __init__(self, batches: list[list[Patch]]) -> None:
        self._batches = batches

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        for batch in self._batches:
            yield batch

    async def aclose(self) -> None:
        pass


class _Adapter:
    name = "memory"

    def __init__(self, chunks: int) -> None:
        self.batches = ([[MessageStart(id="m")]] + [[TextDelta(text=f"w{i} ")] for i in range(chunks)]
                        + [[MessageDelta(stop_reason="stop"), MessageEnd()]])

    async def open_stream(self, request: ProviderRequest) -> _Stream:
        return _Stream(self.batches)

    def ready(self) -> bool:
        return True


async def _direct(adapter: _Adapter, request: ProviderRequest, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        stream = await adapter.open_stream(request)
        async for _batch in stream:
            pass
    return time.process_time() - start


async def _routed(router: Router, model: str, request: ProviderRequest, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        session = router.session(model)
        stream = await session.open_stream(request)
        async for _batch in stream:
            pass
    return time.process_time() - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    adapter = _Adapter(args.chunks)
    routes = {"pair": RouteConfig.model_validate({"targets": ["memory/a", "memory/b"]})}
    router = Router(registry=ProviderRegistry({"memory": adapter}), routes=routes, policy=Policy())
    request = ProviderRequest(model="a", messages=(Message(role="user", content="hi"),))
    per_round = max(1, args.requests // args.rounds)
    direct = routed = route_pair = 0.0
    for _ in range(args.rounds):  # interleaved: drift on a shared machine hits all alike
        direct += await _direct(adapter, request, per_round)
        routed += await _routed(router, "memory/a", request, per_round)
        route_pair += await _routed(router, "pair", request, per_round)
    n = per_round * args.rounds
    us = {"direct": direct / n * 1e6, "routed_model": routed / n * 1e6, "routed_route": route_pair / n * 1e6}
    results = {
        "requests": n, "chunks_per_request": args.chunks,
        "cpu_us_per_request": {k: round(v, 2) for k, v in us.items()},
        "routing_cost_us_per_request": round(us["routed_route"] - us["direct"], 2),
        "routing_cost_us_per_chunk": round((us["routed_route"] - us["direct"]) / (args.chunks + 2), 3),
        "ratio_routed_to_direct": round(us["routed_route"] / us["direct"], 3) if us["direct"] else None,
    }
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
