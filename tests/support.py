"""Shared test helpers: the recorded fixtures and a patch-stream driver."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import random
import shutil
import socket
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.core.accumulator import Accumulator
from app.core.events import FinalEvent, StreamEvent
from app.providers.base import StreamNormalizer, drive
from app.providers.framing import FramePatchStream

HANG_GUARD = 30.0
"""Seconds before a test that awaits an event gives up: a guard against hangs, not a timed assertion."""
KEEP_ALIVE_SECONDS = 300.0
"""How long `serve` keeps an idle connection open: longer than any client here pools one (the
gateway's upstream pool 30 s, httpx's and the SDKs' 5 s: tests/test_loopback_fakes.py). A server that closes an idle
connection first races the client's reuse of it: the request is written as the server closes,
the server's kernel answers with a reset, and the client reads `ClientOSError` (uvicorn's default
of 5 s gave the facade tests 502s whenever two upstream calls on one connection were ~5 s apart)."""
REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"
NODE_DIR = Path(__file__).resolve().parent / "node"
"""The Node clients (pinned in tests/node/package-lock.json, installed by `.ci/run` with `npm ci`)."""


@dataclass(frozen=True)
class Recording:
    provider: str
    name: str
    body: bytes
    expected: dict[str, Any]

    def __repr__(self) -> str:  # readable pytest ids
        return f"{self.provider}/{self.name}"


def recordings(provider: str) -> list[Recording]:
    """Every `<name>.sse` (or `<name>.bin`, a binary framing) of one provider folder with the
    `.expected.json` beside it: the shared fixtures, else the repository's tests/fixtures."""
    folder = FIXTURES / provider
    if not folder.is_dir():
        folder = Path(__file__).resolve().parent / "fixtures" / provider
    out = []
    for sse in sorted([*folder.glob("*.sse"), *folder.glob("*.bin")]):
        expected = json.loads(sse.with_suffix(".expected.json").read_text())
        out.append(Recording(provider, sse.stem, sse.read_bytes(), expected))
    if not out:
        raise RuntimeError(f"no recordings under {folder}: is ../shared beside the checkout?")
    return out


def run_bytes(
    chunks: Iterable[bytes], normalizer: StreamNormalizer, *, model: str = "m", provider: str = "p",
    decoder: Any = None,
) -> tuple[list[StreamEvent], Accumulator]:
    """Drive bytes through the production path: FramePatchStream (the decoder, SSE unless given ->
    normalizer) ->
    `drive()` (the accumulator). Ends with the FinalEvent: ok if the provider completed, else
    error with what ended it. Synchronous: nothing in the path waits on I/O."""
    acc = Accumulator(model=model, provider=provider)
    events: list[StreamEvent] = []

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def nothing() -> None:
        return None

    stream = FramePatchStream(body(), normalizer, close=nothing, provider=provider, decoder=decoder)
    run_sync(drive(stream, acc, events))
    return events, acc


def run_sync(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never waits on I/O without an event loop. A bare yield to the loop
    (`asyncio.sleep(0)`, which the decoder does after reads that end no event) is resumed at once;
    a wait on a future (real I/O) is refused."""
    while True:
        try:
            waited = coroutine.send(None)
        except StopIteration as done:
            return done.value
        if waited is not None:
            coroutine.close()
            raise RuntimeError("the coroutine suspended: it needs an event loop")


def split_at(body: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(body)})
    out, prev = [], 0
    for p in points:
        out.append(body[prev:p])
        prev = p
    out.append(body[prev:])
    return out


def final_of(events: list[StreamEvent]) -> FinalEvent:
    finals = [e for e in events if isinstance(e, FinalEvent)]
    assert len(finals) == 1 and events[-1] is finals[0], "exactly one final, last"
    return finals[0]


class Servers:
    """ASGI apps under uvicorn on 127.0.0.1 (free ports) in this event loop, shut down together.

    Each listening socket is bound before its server starts, so clients may connect at once (the
    kernel queues them). uvicorn's shutdown waits in steps of 0.1 s (its loop tick, then a pause
    for connections to close) whatever is left to do, about 0.2 s a server: a test with an
    upstream fake and a gateway paid that twice in turn; together it is paid once."""

    def __init__(self) -> None:
        self._running: list[tuple[Any, asyncio.Task[None], socket.socket]] = []

    async def add(self, app: Any) -> str:
        """Serve `app`; its base URL."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                timeout_keep_alive=int(KEEP_ALIVE_SECONDS))
        server = uvicorn.Server(config)
        self._running.append((server, asyncio.create_task(server.serve(sockets=[sock])), sock))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        for server, _, _ in self._running:
            server.should_exit = True
        try:
            await asyncio.gather(*(task for _, task, _ in self._running))
        finally:
            for _, _, sock in self._running:
                sock.close()


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Servers]:
    """`Servers` for the block: `url = await servers.add(app)`; all shut down at its end."""
    servers = Servers()
    try:
        yield servers
    finally:
        await servers.close()


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app under uvicorn on 127.0.0.1 (a free port) in this event loop: its base URL."""
    async with serving() as servers:
        yield await servers.add(app)


@contextlib.asynccontextmanager
async def in_process(app: Any) -> AsyncIterator[Any]:
    """An httpx client of an ASGI app in this event loop, with the app's lifespan around it, as a
    server runs it: its shutdown closes what the app opened (the records engine a lookup of a
    missing stream opens), which would otherwise be collected unclosed after the test's loop."""
    import httpx

    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client


@contextlib.contextmanager
def tasks_started() -> Iterator[list[tuple[str, weakref.ref[asyncio.Task[Any]]]]]:
    """Every task the running loop starts in the block, as (its coroutine's qualified name, a weak
    reference to it): a test can count the tasks of a kind, and see one let go (collected)."""
    loop = asyncio.get_running_loop()
    default = loop.get_task_factory()
    started: list[tuple[str, weakref.ref[asyncio.Task[Any]]]] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = default(loop, coro, **kwargs) if default else asyncio.Task(coro, loop=loop, **kwargs)
        started.append((getattr(coro, "__qualname__", ""), weakref.ref(task)))
        return task  # type: ignore[return-value]

    loop.set_task_factory(factory)
    try:
        yield started
    finally:
        loop.set_task_factory(default)


async def read_asgi_request(scope: dict[str, Any], receive: Any, send: Any) -> bytes | None:
    """For a raw ASGI fake server: answer the lifespan protocol (None), or read an HTTP request's
    whole body."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return None
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def until(condition: Callable[[], bool | Awaitable[bool]], what: str = "the condition",
                guard: float = HANG_GUARD) -> None:
    """Return as soon as `condition` (a function, or a coroutine function) holds, polled every 20 ms:
    for a state no event announces (another process's, Redis's). `guard` seconds bound a hang; it
    is not a timed assertion."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard
    try:
        async with asyncio.timeout(guard):
            while True:
                held = condition()
                if inspect.isawaitable(held):
                    held = await held
                if held:
                    return
                if loop.time() >= deadline:  # the guard's cancel can be lost inside a Redis command
                    raise TimeoutError  # (app/streams/redis/link.py, `stop`): then it ends here
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what} did not hold within {guard} s (a hang guard)") from None


async def get_until(client: Any, url: str, done: Callable[[Any], bool], what: str, guard: float = HANG_GUARD,
                    **kw: Any) -> Any:
    """GET `url` with an httpx client until `done(response)` holds (`until`); the response that
    satisfied it. `done` may assert what every answer before it must be."""
    answer = None

    async def answered() -> bool:
        nonlocal answer
        answer = await client.get(url, **kw)
        return done(answer)

    await until(answered, what, guard)
    return answer


async def until_disconnect(receive: Any) -> None:
    """Wait until the client goes away (a raw ASGI fake server holding its response open)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def parse_sse(body: bytes | str) -> list[tuple[int, str, dict[str, Any]]]:
    """SSE text -> [(id, event, data)], skipping comments (pings)."""
    text = body.decode() if isinstance(body, bytes) else body
    out = []
    for frame in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in frame.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        if "event" in fields:
            out.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return out


def require_node() -> None:
    """Skip a Node client test where node or tests/node/node_modules is missing; with CI=true fail
    instead (CI must run them)."""
    missing = ("node is not on PATH" if shutil.which("node") is None else
               "tests/node/node_modules is missing: run `npm ci` in tests/node"
               if not (NODE_DIR / "node_modules").is_dir() else None)
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Node clients: {missing}")
        pytest.skip(missing)


async def run_node(script: str, *args: str) -> dict[str, Any]:
    """Run `node tests/node/<script> args...`; what it printed last, as JSON (each script prints one
    JSON line of what its client saw)."""
    process = await asyncio.create_subprocess_exec(
        "node", str(NODE_DIR / script), *args, cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)  # a guard: it ends in about a second
    assert process.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def _ephemeral_low() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A free port for a process a test starts, which binds it later. Chosen below the kernel's
    ephemeral range: a server bound to port 0 (every in-process fake and gateway here, in any
    xdist worker) or a client's source port can never take it in between, as one did when this
    asked the kernel for a port and released it (another test's fake answered the process's
    readiness probe). Random and checked free, so that two picks rarely meet."""
    low = min(_ephemeral_low(), 32768)
    for _ in range(200):
        port = random.randrange(10000, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")
