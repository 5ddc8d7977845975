"""Floods of nothing from a hostile upstream: a gzip of empty lines (or of comments) and a flood
of `100 Continue` interim heads. Each is bounded: the run ends with `upstream_protocol_error` (or
the interim heads are skipped by the HTTP client within its own bounds), and the gateway answers
`/healthz` meanwhile."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.hostile_upstream import PROVIDERS, HostileUpstream, Seen, ask, provider_settings, raw_answer
from tests.support import serve

GUARD = 60


def _gzip_of(line: bytes, mib: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = line * ((1 << 20) // len(line))
    return b"".join([*(compressor.compress(piece) for _ in range(mib)), compressor.flush()])


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("line", [b"\n", b": keep-alive\n"], ids=["blank", "comment"])
async def test_a_gzip_of_empty_lines_ends_the_run_at_the_cap(provider: str, line: bytes) -> None:
    """100 MiB of empty lines (about 100 KB on the wire): past FOUNDRY_UPSTREAM_MAX_IDLE_LINES the
    run ends `upstream_protocol_error`, without reading (or churning through) the rest."""
    body = _gzip_of(line, 100)
    answer = raw_answer(200, body, [("content-type", "text/event-stream"), ("content-encoding", "gzip")])
    async with HostileUpstream(answer) as upstream:
        settings = provider_settings(provider, upstream.url, upstream_max_idle_lines=1000)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            response = await client.post("/v1/generate", json=ask(provider))
            assert (await client.get("/healthz")).status_code == 200
    assert response.status_code == 502, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "upstream_protocol_error" and "blank or comment lines" in error["message"], error


def _endless_continues(released: asyncio.Event) -> Any:
    """`100 Continue` heads, 2000 per write, until the client goes away (or `released`)."""
    async def answer(seen: Seen, writer: asyncio.StreamWriter) -> None:
        block = b"HTTP/1.1 100 Continue\r\n\r\n" * 2000
        while not released.is_set():
            writer.write(block)
            seen.sent += len(block)
            await writer.drain()
    return answer


async def test_a_flood_of_interim_heads_ends_at_the_first_token_deadline() -> None:
    """aiohttp's client skips `1xx` heads one after another with no count of its own (measured in
    docs/security.md), so the bound is the run's first-token deadline: the flood never becomes a
    stream, the run ends 504 `timeout` (first_token), the connection is closed, and /healthz
    answers while the heads pour in."""
    released = asyncio.Event()
    async with HostileUpstream(_endless_continues(released)) as upstream:
        settings = provider_settings("openai", upstream.url, first_token_timeout=3)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            run = asyncio.create_task(client.post("/v1/generate", json=ask("openai")))
            await asyncio.wait_for(upstream.arrived.wait(), GUARD)
            answered = 0
            while not run.done():
                assert (await client.get("/healthz")).status_code == 200
                answered += 1
            response = await run
            await asyncio.wait_for(upstream.seen[0].gone.wait(), GUARD)
            released.set()
    assert response.status_code == 504, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "timeout" and error.get("deadline") == "first_token", error
    assert answered >= 1 and upstream.seen[0].sent > 1 << 20
