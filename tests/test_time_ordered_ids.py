"""A stream's id and a request's own id sort by when they were made (app/core/ids.py), so a run's
record lands at the end of its indexes; they stay 32 random-looking hex digits after `str_`."""

from __future__ import annotations

import asyncio
import re

import httpx

from app.core.ids import time_ordered_hex
from app.main import create_app
from app.settings import Settings

_HEX = re.compile(r"[0-9a-f]{32}")


async def test_streams_and_requests_made_one_after_another_have_ids_in_that_order() -> None:
    app = create_app(Settings(records=False))
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "hi"}]}
    streams, requests = [], []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        for _ in range(12):
            r = await c.post("/v1/stream", json=body)
            assert r.status_code == 200
            streams.append(r.headers["x-stream-id"])
            requests.append(r.headers["x-request-id"])
            await asyncio.sleep(0.002)  # the next millisecond
    assert all(s.startswith("str_") and _HEX.fullmatch(s[4:]) for s in streams), streams
    assert all(_HEX.fullmatch(r) for r in requests), requests
    assert streams == sorted(streams) and len(set(streams)) == len(streams)
    assert requests == sorted(requests) and len(set(requests)) == len(requests)


def test_ids_of_one_millisecond_differ_in_their_random_part() -> None:
    ids = [time_ordered_hex() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert len({i[12:] for i in ids}) == len(ids)  # 80 random bits each
