"""A provider server that misbehaves on purpose, on loopback, written on raw sockets so every byte
of its answer is the test's: redirects to another port, error bodies of any size or encoding, an
SSE line that never ends, `Retry-After` values no server should send.

`HostileUpstream(answer)` serves every request with the coroutine `answer(seen, writer)`; `seen`
records the request (method, path, headers, body) and, as the answer is written, how many body
bytes went out and whether the client went away. `provider_settings(name, url)` configures the
gateway to call it as `openai`, `openai-responses`, `anthropic` or `gemini`; `ask(name)` is a
request for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.settings import Settings

__all__ = ["KEY", "MODELS", "PROVIDERS", "HostileUpstream", "Seen", "ask", "endless_line", "gzip_bomb", "json_answer",
           "provider_settings", "raw_answer", "redirect"]

KEY = "hostile-test-key-0123456789abcdef"
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")
MODELS = {"openai": "openai/gpt-x", "openai-responses": "openai-responses/gpt-x",
          "anthropic": "anthropic/claude-x", "gemini": "gemini/gemini-x"}
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    sent: int = 0
    """Body bytes written so far."""
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    """The client closed the connection before the answer was over."""

    def credentials(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k in CREDENTIAL_HEADERS}


Answer = Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]


class HostileUpstream:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[Seen] = []
        self.arrived = asyncio.Event()
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> HostileUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                seen = Seen(method, path, headers, body)
                self.seen.append(seen)
                self.arrived.set()
                try:
                    await self.answer(seen, writer)
                except (ConnectionError, BrokenPipeError):
                    seen.gone.set()
                    return
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send(seen: Seen, writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    seen.sent += len(data)
    await writer.drain()


def raw_answer(status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> Answer:
    async def answer(seen: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(_head(status, [*(headers or []), ("content-length", str(len(body)))]))
        await _send(seen, writer, body)
    return answer


def json_answer(status: int, value: Any, headers: list[tuple[str, str]] | None = None) -> Answer:
    body = json.dumps(value, ensure_ascii=False).encode()
    return raw_answer(status, body, [("content-type", "application/json"), *(headers or [])])


def redirect(status: int, location: str | None) -> Answer:
    headers = [] if location is None else [("location", location)]
    return raw_answer(status, b"", headers)


def gzip_bomb(inflated_mib: int, *, prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    """`prefix`, then `inflated_mib` MiB of one repeated byte, then `suffix`, as one gzip stream
    (about 1 KB on the wire per MiB inflated); compressed in pieces, never held whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = b"A" * (1 << 20)
    parts = [compressor.compress(prefix)] + [compressor.compress(piece) for _ in range(inflated_mib)]
    return b"".join([*parts, compressor.compress(suffix), compressor.flush()])


def endless_line(total: int, *, step: int = 1 << 16, content_type: str = "text/event-stream",
                 encoding: str | None = None, released: asyncio.Event | None = None) -> Answer:
    """A 200 whose body is one `data:` line that never ends: `total` bytes in reads of `step`,
    until the client goes away (the body is delimited by the connection's close). With
    `released`, the body then waits for it before closing (so a test can look while it is open)."""
    async def answer(seen: Seen, writer: asyncio.StreamWriter) -> None:
        headers = [("content-type", content_type), ("connection", "close")]
        if encoding is not None:
            headers.append(("content-encoding", encoding))
        writer.write(_head(200, headers))
        chunk = b"x" * step
        await _send(seen, writer, b"data: ")
        while seen.sent < total:
            await _send(seen, writer, chunk)
        if released is not None:
            await released.wait()
        writer.close()
    return answer


def provider_settings(provider: str, url: str, **extra: Any) -> Settings:
    """The gateway calling `url` as `provider` with the key `KEY`, no retries."""
    base: dict[str, Any] = {"upstream_max_retries": 0, **extra}
    if provider in ("openai", "openai-responses"):
        return Settings(openai_api_key=KEY, openai_base_url=url + "/v1", **base)
    if provider == "anthropic":
        return Settings(anthropic_api_key=KEY, anthropic_base_url=url, **base)
    assert provider == "gemini", provider
    return Settings(gemini_api_key=KEY, gemini_base_url=url + "/v1beta", **base)


def ask(provider: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODELS[provider], "messages": [{"role": "user", "content": "hi"}], **extra}
