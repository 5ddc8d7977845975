"""Floods of nothing from a hostile upstream: a gzip of empty lines (or of comments) and a flood
of `100 Continue` interim heads. Each is bounded: the run ends with `upstream_protocol_error` (or
the interim heads are skipped by the HTTP client within its own bounds), and the gateway answers
`/healthz` meanwhile."""

from __future__ import annotations

import zlib

import httpx
import pytest

from app.main import create_app
from tests.hostile_upstream import PROVIDERS, HostileUpstream, ask, provider_settings, raw_answer
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
