"""Resuming a stream that ended before any content (GET /v1/stream/{id}) on the memory store.

A run that fails or is cancelled before its upstream's first content never has a stream (the
caller gets an HTTP error, no id). One that opened and then ended before any content was released
(a validator still held it) has a stream, `start` then `final`: while the store has it, a resume
replays it like any ended stream; once the store lost it within the TTL (evicted here, a Redis
restarted empty elsewhere) its run record should make it 410 `stream_expired` like any other.
"""

from __future__ import annotations

import tempfile
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.support import parse_sse, serve

HELD = {"messages": [{"role": "user", "content": "hi"}], "chunking": "paragraph",
        "validators": [{"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]}
"""A paragraph chunker holds the answer's text until the answer ends: nothing is released before."""


async def _ended_before_content(client: httpx.AsyncClient, kind: str) -> str:
    """The id of a stream of this kind, ended: ok, or opened and ended before any released content."""
    if kind == "ok":
        response = await client.post("/v1/stream", json={**HELD, "model": "mock/simple"})
        assert {event for _, event, _ in parse_sse(response.content)} == {"start", "token", "final"}
        return response.headers["x-stream-id"]
    if kind == "error":  # the upstream breaks after "Hello", which the chunker still holds
        response = await client.post("/v1/stream", json={**HELD, "model": "mock/simple",
                                                         "provider_options": {"fail_after": 2}})
        assert [(event, data.get("status")) for _, event, data in parse_sse(response.content)] == [
            ("start", None), ("final", "error")]
        return response.headers["x-stream-id"]
    accepted = await client.post("/v1/generate", json={**HELD, "model": "mock/lorem-100", "stream": True,
                                                        "provider_options": {"delay_ms": 100}})
    stream_id: str = accepted.json()["stream_id"]
    assert (await client.post(f"/v1/stream/{stream_id}/cancel")).json()["status"] == "cancelled"
    return stream_id


KINDS = ["ok", "error", "cancelled"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_the_store_holds_replays_with_its_final(kind: str) -> None:
    app = create_app(Settings(data_dir=tempfile.mkdtemp(prefix="foundry-resume-")))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        stream_id = await _ended_before_content(client, kind)
        replay = await client.get(f"/v1/stream/{stream_id}")
        events: list[tuple[int, str, Any]] = parse_sse(replay.content)
        assert replay.status_code == 200 and events[0][1] == "start" and events[-1][1] == "final"
        assert events[-1][2]["status"] == ("ok" if kind == "ok" else kind)
        done = await client.get(f"/v1/stream/{stream_id}", headers={"Last-Event-ID": str(events[-1][0])})
        assert done.status_code == 204


@pytest.mark.parametrize("kind", ["ok", "error", "cancelled"])
async def test_a_stream_the_store_lost_within_its_ttl_is_410_by_its_record(kind: str) -> None:
    app = create_app(Settings(data_dir=tempfile.mkdtemp(prefix="foundry-resume-"), max_streams=1))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        stream_id = await _ended_before_content(client, kind)
        await _ended_before_content(client, "ok")  # one stream at most: the first one is evicted
        await app.state.records.flush()
        assert app.state.gateway.store.get(stream_id) is None
        gone = await client.get(f"/v1/stream/{stream_id}")
        assert gone.status_code == 410, gone.text
        assert gone.json()["error"]["code"] == "stream_expired"


async def test_a_run_that_never_opened_has_no_stream_to_resume() -> None:
    """Its record lists it under an id no caller was given: no stream ever had it (404), before or after."""
    app = create_app(Settings(data_dir=tempfile.mkdtemp(prefix="foundry-resume-")))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        failed = await client.post("/v1/stream", json={**HELD, "model": "mock/simple", "provider_options": {"fail_after": 0}})
        assert failed.status_code == 502 and "x-stream-id" not in failed.headers
        await app.state.records.flush()
        runs = (await client.get("/v1/runs")).json()["data"]
        assert [run["status"] for run in runs] == ["error"]
        missing = await client.get(f"/v1/stream/{runs[0]['id']}")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "stream_not_found"
