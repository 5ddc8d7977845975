"""Fakes and drivers shared by the provider tests (Responses, Gemini, Anthropic, routing) and the
facade tests.

- `drain()` runs an adapter's stream into canonical events.
- `FakeUpstream`: a scripted provider server for end-to-end tests, served on loopback with
  `support.serve`. Every POST to its path answers the next scripted reply: SSE bytes (sent in
  small uneven reads) or `(status, json_body, headers)`. Requests are recorded. With `hold`, the
  response stays open after its body until the client goes away; `closed` is set when the body
  generator ends, which is how a test sees the gateway let go. `gateway()` serves the app
  configured against it; `first_token_then_leave()` is a client that disconnects early.
  `paced()` is its body (a recording in small reads, then held open on request), also the
  facade tests' recorded upstream's (tests/compat_support.py).
- `Scripted`: a loopback provider on every path whose each request is recorded and answered by
  a function of it (`sse()` for an event stream in small reads, `answer()` for a JSON answer,
  `cut()` for a body cut short, `silent()` for no head at all); `http_adapter()` builds a provider's adapter on the gateway's own
  client pointed at it: the one adapter-test setup (a session of its own, or an injected one).
- `FaultServer`: an OpenAI-compatible server on loopback whose every request follows a scripted
  `Fault` (ok, HTTP status with Retry-After, reset after headers, stall before the first chunk,
  slow first token, stall mid-stream) and records when the gateway let go of it (routing tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.accumulator import Accumulator
from app.core.events import StreamEvent
from app.main import create_app
from app.providers.base import ProviderAdapter, ProviderRequest, drive
from app.settings import Settings
from tests.support import read_asgi_request, serve, until_disconnect

__all__ = ["FakeUpstream", "Fault", "FaultServer", "Recorded", "Scripted", "Served", "answer", "chat_stream",
           "closed_port_url", "cut", "drain", "first_token_then_leave", "gateway", "http_adapter", "paced", "silent", "sse"]


async def drain(adapter: ProviderAdapter, request: ProviderRequest) -> list[StreamEvent]:
    """Open the adapter's stream and run it to its final event, as the pipeline does (`drive`)."""
    stream = await adapter.open_stream(request)
    events: list[StreamEvent] = []
    await drive(stream, Accumulator(model=request.model, provider=adapter.name), events)
    return events


@dataclass(frozen=True)
class Recorded:
    url: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeUpstream:
    path: str
    replies: list[Any]
    requests: list[Recorded] = field(default_factory=list)
    hold: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        self.requests.append(Recorded(url, dict(request.headers), await request.json()))
        reply = self.replies.pop(0)
        if isinstance(reply, tuple):
            status, body, headers = reply
            return JSONResponse(body, status_code=status, headers=headers)
        return StreamingResponse(paced(reply, step=173, hold=self.hold, closed=self.closed),
                                 media_type="text/event-stream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route(self.path, self.handle, methods=["POST"])])


async def paced(body: bytes, *, step: int, hold: bool, closed: asyncio.Event) -> AsyncIterator[bytes]:
    """A recorded body in small, uneven network reads of `step` bytes; with `hold` the response then
    stays open until the client goes away. `closed` is set when the body ends, however it ends:
    how a test sees the gateway let go of the upstream."""
    try:
        for i in range(0, len(body), step):
            yield body[i:i + step]
        if hold:
            await asyncio.Event().wait()
    finally:
        closed.set()


@contextlib.asynccontextmanager
async def gateway(fake: FakeUpstream, settings: Callable[[str], Settings]) -> AsyncIterator[httpx.AsyncClient]:
    """The fake upstream and the gateway (configured by `settings(upstream_url)`) on loopback."""
    async with serve(fake.app()) as upstream:
        async with serve(create_app(settings(upstream))) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


async def first_token_then_leave(client: httpx.AsyncClient, ask: dict[str, Any]) -> None:
    """Stream a request and go away right after the first token event."""
    async with client.stream("POST", "/v1/stream", json=ask) as response:
        async for line in response.aiter_lines():
            if line.startswith("event: token"):
                break


# -- a scripted provider on loopback, and adapters on the gateway's own client -------------------

Answer = Callable[[Recorded], Response]


class Scripted:
    """A provider on loopback: every request (any path) is recorded and answered by `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[Recorded] = []

    async def handle(self, request: Request) -> Response:
        url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raw = await request.body()
        recorded = Recorded(url, dict(request.headers), json.loads(raw) if raw else {})
        self.requests.append(recorded)
        return self.answer(recorded)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self.handle, methods=["POST"])])


def sse(body: bytes, *, step: int = 211, hold: bool = False, closed: asyncio.Event | None = None) -> Response:
    """An event stream of `body` in small reads, then with `hold` held open until the client goes
    (`closed` set when its body ends, however it ends)."""
    return StreamingResponse(paced(body, step=step, hold=hold, closed=closed or asyncio.Event()),
                             media_type="text/event-stream")


def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer (or `bytes` as they are, with their own content type in `headers`)."""
    if isinstance(body, bytes):
        return Response(body, status_code=status, headers=headers)
    return JSONResponse(body, status_code=status, headers=headers)


class _Silent(Response):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await until_disconnect(receive)


def silent() -> Response:
    """No answer at all, not even a head, until the client goes away."""
    return _Silent()


def read_timeout_for(code: str) -> float:
    """An adapter's read timeout in a test of the errors before a body: short where the upstream's
    silence is the case (`upstream_timeout`), so the test is quick; long where the upstream answers
    at once, so a loaded host is not read as a silent upstream (a 403 once came back 504 in CI, 0.2 s
    being all a reply had)."""
    return 0.2 if code == "upstream_timeout" else 30.0


def cut(body: bytes, *, closed: asyncio.Event | None = None) -> Response:
    """An event stream whose connection is cut after `body` (the server resets it mid-body)."""

    async def pieces() -> AsyncIterator[bytes]:
        try:
            yield body
            raise ConnectionResetError("scripted reset")  # uvicorn drops the connection mid-body
        finally:
            if closed is not None:
                closed.set()

    return StreamingResponse(pieces(), media_type="text/event-stream")


_SETTINGS: dict[str, Callable[[str], dict[str, str]]] = {
    "openai": lambda url: {"openai_api_key": "sk-test", "openai_base_url": f"{url}/v1"},
    "openai-responses": lambda url: {"openai_api_key": "sk-test", "openai_base_url": f"{url}/v1"},
    "anthropic": lambda url: {"anthropic_api_key": "test-key", "anthropic_base_url": url},
    "gemini": lambda url: {"gemini_api_key": "gm-test-key", "gemini_base_url": url},
}


def http_adapter(provider: str, url: str, *, session: Any = None, **config: Any) -> ProviderAdapter:
    """`provider`'s adapter as the gateway builds it from its keys, pointed at `url` (`config`:
    more `ProviderConfig` fields, e.g. `read_timeout`); `session` an injected `aiohttp.ClientSession`."""
    from app.providers.config import ProviderConfig
    from app.providers.registry import build_registry

    values = {**_SETTINGS[provider](url), **config.pop("values", {})}
    registry = build_registry(ProviderConfig(values=values, max_retries=0, **config),
                              {provider: session} if session is not None else {})
    adapter = registry.get(provider)
    assert adapter is not None, provider
    return adapter


# -- scripted faults (routing and resilience, issue 16) -------------------------------------------


@dataclass(frozen=True)
class Fault:
    """What one upstream request gets. `kind`:
    - `ok`: a whole OpenAI chat stream of `text`;
    - `status`: HTTP `status` with a JSON error (and `retry_after`, if set);
    - `reset`: headers and `text` (may be empty), then the connection is cut;
    - `stall`: headers, then nothing until the client goes away;
    - `slow_first`: headers and an opening chunk without content, then nothing until the client goes;
    - `stall_mid`: headers and `text`, then nothing until the client goes;
    - `held`: headers and `text`, then the rest of the stream once the test sets `release`.
    Refused connections need no fake: `closed_port_url()`.
    """

    kind: str
    text: str = ""
    status: int = 200
    retry_after: str | None = None


def chat_chunk(content: str | None = None, *, finish: str | None = None) -> bytes:
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if content is None and finish is None else {}
    if content is not None:
        delta["content"] = content
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chat_stream(text: str) -> bytes:
    words = text.split(" ")
    parts = [chat_chunk()] + [chat_chunk(w if i == 0 else " " + w) for i, w in enumerate(words)]
    return b"".join(parts) + chat_chunk(finish="stop") + b"data: [DONE]\n\n"


@dataclass
class Served:
    """One request as the fault server saw it; `done` is set when its response is over (completed,
    cut, or the client went away), `gone` when the client closed it first."""

    model: str
    fault: Fault
    body: dict[str, Any] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    gone: bool = False


class FaultServer:
    """A raw ASGI OpenAI-compatible server (POST .../chat/completions). The request's `model`
    picks a script: each request takes the next `Fault` of that model's list (the last one
    repeats)."""

    def __init__(self, scripts: dict[str, list[Fault]]) -> None:
        self.scripts = {model: list(faults) for model, faults in scripts.items()}
        self.served: list[Served] = []
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    def of(self, model: str) -> list[Served]:
        return [s for s in self.served if s.model == model]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_asgi_request(scope, receive, send)
        if body is None:
            return
        request = json.loads(body)
        model = request["model"]
        script = self.scripts[model]
        fault = script.pop(0) if len(script) > 1 else script[0]
        served = Served(model, fault, request)
        self.served.append(served)
        self.arrived.set()
        try:
            await self._answer(fault, served, receive, send)
        finally:
            served.done.set()

    async def _answer(self, fault: Fault, served: Served, receive: Any, send: Any) -> None:
        if fault.kind == "status":
            headers = [(b"content-type", b"application/json")]
            if fault.retry_after is not None:
                headers.append((b"retry-after", fault.retry_after.encode()))
            error = {"error": {"message": f"upstream says {fault.status}", "type": "server_error"}}
            await send({"type": "http.response.start", "status": fault.status, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        if fault.kind == "ok":
            await send({"type": "http.response.body", "body": chat_stream(fault.text)})
            return
        opening = {"stall": b"", "slow_first": chat_chunk(), "stall_mid": chat_chunk() + chat_chunk(fault.text),
                   "held": chat_chunk() + chat_chunk(fault.text), "reset": chat_chunk(fault.text or None)}
        await send({"type": "http.response.body", "body": opening[fault.kind], "more_body": True})
        if fault.kind == "reset":
            raise ConnectionResetError("scripted reset")  # uvicorn drops the connection mid-body
        if fault.kind == "held":
            gone = asyncio.ensure_future(until_disconnect(receive))
            released = asyncio.ensure_future(self.release.wait())
            await asyncio.wait([gone, released], return_when=asyncio.FIRST_COMPLETED)
            released.cancel()
            if not gone.done():
                gone.cancel()
                await send({"type": "http.response.body", "body": chat_chunk(" and done.", finish="stop")
                            + b"data: [DONE]\n\n"})
                return
        else:
            await until_disconnect(receive)
        served.gone = True


def closed_port_url() -> str:
    """A loopback URL where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
