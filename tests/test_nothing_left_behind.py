"""A finished request leaves nothing behind for the garbage collector or the event loop: its whole
graph (the ASGI scope, the server's request cycle, the run, its route, its upstream response) is
freed by reference counting when the request ends, and every async generator of the gateway's is
closed by its reader, none by the loop's finalizer (which closes it later, in a task of its own).

A cycle anywhere in that graph keeps all of it alive until a collection finds it. Measured at 20
short requests at a time (docs/performance.md, "No reference cycle a request"): two such cycles
left about 86 objects of garbage a request, and the collector's time was about 55 us of a
request's CPU; without them, about 11 us.

Each test serves the gateway under uvicorn on loopback, against a loopback upstream replaying a
recording, and asks the collector, with `gc.DEBUG_SAVEALL`, what it would have freed, and the
loop's async generator finalizer what it was given.
"""

from __future__ import annotations

import gc
import json
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from app.main import create_app
from tests.compat_support import RecordedUpstream, settings_for
from tests.support import REPO, serving, until

CHAT = "openai/text-include-usage"
MESSAGES = "anthropic/text"
ASK = [{"role": "user", "content": "Hi"}]


SERVER_CYCLE = "uvicorn.protocols.http.httptools_impl.RequestResponseCycle"
REQUEST_GRAPH = {SERVER_CYCLE, "uvicorn.protocols.http.h11_impl.RequestResponseCycle", "aiohttp.client_reqrep.ClientResponse"}


def _ours(obj: Any) -> str | None:
    """The name of a garbage object's type when it is part of a request's graph: the gateway's own
    objects, the server's request cycle, the upstream's response."""
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}"
    return name if name.startswith("app.") or name in REQUEST_GRAPH else None


@contextmanager
def _left_behind() -> Iterator[Counter[str]]:
    """What the block leaves behind: what the collector finds unreachable from its start to its end,
    by type (of `_ours`), and the gateway's async generators first iterated in it that the loop's
    finalizer was given (`finalized: <name>`). The collector and the hooks as they were afterwards."""
    found: Counter[str] = Counter()
    flags, hooks = gc.get_debug(), sys.get_asyncgen_hooks()
    ours = str(REPO / "app")

    def finalizer(agen: Any) -> None:
        if agen.ag_code.co_filename.startswith(ours):
            found[f"finalized: {agen.ag_code.co_qualname}"] += 1
        assert hooks.finalizer is not None
        hooks.finalizer(agen)

    gc.collect()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        yield found
        gc.collect()
        found.update(name for name in map(_ours, gc.garbage) if name is not None)
    finally:
        sys.set_asyncgen_hooks(*hooks)
        gc.set_debug(flags)
        gc.garbage.clear()


async def _served(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], rounds: int = 3, *,
                  status: int = 200, hold: bool = False) -> Counter[str]:
    upstream = RecordedUpstream(hold=hold)
    async with serving() as servers:
        up = await servers.add(upstream.app())
        settings = settings_for(up, data_dir=str(tmp_path))
        app = create_app(settings)
        gateway = await servers.add(app)
        async with httpx.AsyncClient(base_url=gateway, timeout=15.0) as client:

            async def each() -> None:
                for path, body in calls:
                    if hold:  # the client reads the first bytes and leaves: the run is cancelled
                        async with client.stream("POST", path, json=body) as response:
                            assert response.status_code == status
                            await anext(response.aiter_bytes())
                        await until(lambda: not app.state.gateway.runs.handles, "the run's end")
                        continue
                    response = await client.post(path, json=body)
                    assert response.status_code == status, (path, response.text)

            await each()  # the first request's lazy set-up (a connection, a statement) is not garbage
            with _left_behind() as found:
                for _ in range(rounds):
                    await each()
    return found


async def test_a_stream_and_a_json_answer_leave_nothing_behind(tmp_path: Path):
    found = await _served(tmp_path, [("/v1/stream", {"model": CHAT, "messages": ASK}),
                                     ("/v1/generate", {"model": CHAT, "messages": ASK})])
    assert not found, json.dumps(found.most_common(12), indent=1)


async def test_the_drop_in_endpoints_leave_nothing_behind(tmp_path: Path):
    """A same-wire relay (chat to an OpenAI-compatible upstream, Messages to Anthropic) and the
    translating facades (Messages and Responses to an OpenAI-compatible upstream), streamed and not."""
    found = await _served(tmp_path, [
        ("/v1/chat/completions", {"model": CHAT, "messages": ASK, "stream": True}),
        ("/v1/chat/completions", {"model": CHAT, "messages": ASK}),
        ("/v1/messages", {"model": MESSAGES, "messages": ASK, "max_tokens": 64, "stream": True}),
        ("/v1/messages", {"model": CHAT, "messages": ASK, "max_tokens": 64, "stream": True}),
        ("/v1/messages", {"model": CHAT, "messages": ASK, "max_tokens": 64}),
        ("/v1/responses", {"model": CHAT, "input": "Hi", "stream": True}),
    ])
    assert not found, json.dumps(found.most_common(12), indent=1)


async def test_a_refused_request_leaves_nothing_behind(tmp_path: Path):
    """An upstream's refusal (a 500, then a 429 passed on as such) ends the request with the
    error that the route's strategy raised, and the client's 4xx/5xx; the gateway's own refusals
    (a field out of range, an unknown model) with theirs."""
    for body, status in (({"model": "openai/status-500"}, 502), ({"model": "openai/status-429"}, 429),
                         ({"model": CHAT, "temperature": 9}, 422), ({"model": "nobody/nothing"}, 404)):
        found = await _served(tmp_path, [("/v1/stream", {**body, "messages": ASK})], status=status)
        assert not found, (body, json.dumps(found.most_common(12), indent=1))


async def test_a_run_cancelled_by_its_client_leaving_leaves_nothing_behind(tmp_path: Path):
    """The client's connection closes with it: Python 3.11's asyncio socket transport holds a bound
    method of its own (`_read_ready_cb`), a cycle per connection that holds the server's protocol and
    its last request cycle. That one is asyncio's and the connection's; nothing of the gateway's may be."""
    found = await _served(tmp_path, [("/v1/stream", {"model": CHAT, "messages": ASK})], hold=True)
    del found[SERVER_CYCLE]
    assert not found, json.dumps(found.most_common(12), indent=1)
