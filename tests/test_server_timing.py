"""Every answer says where its time to the first byte went: a `Server-Timing` header with the
gateway's own share (`gateway;dur=`) and, when a run reached a provider, the provider's
(`upstream;dur=`); the same split is in the metrics (`foundry_first_byte_seconds`)."""

from __future__ import annotations

import re

import httpx
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.settings import Settings
from tests.support import parse_sse

ASK = {"model": "mock/simple", "messages": [{"role": "user", "content": "Hi"}]}
_PART = re.compile(r"^(gateway|upstream);dur=(\d+\.\d{3})$")


def _client(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0)  # type: ignore[arg-type]


def _timing(response: httpx.Response) -> dict[str, float]:
    parts = {}
    for item in response.headers["server-timing"].split(", "):
        match = _PART.match(item)
        assert match, item
        parts[match[1]] = float(match[2])
    return parts


async def test_a_stream_says_the_gateways_and_the_upstreams_share_of_its_first_byte():
    async with _client(create_app(Settings())) as c:
        r = await c.post("/v1/stream", json=ASK)
    assert r.status_code == 200
    timing = _timing(r)
    assert set(timing) == {"gateway", "upstream"}
    final = parse_sse(r.text)[-1][2]
    # the upstream's share is its attempt's time to the first content, as the final lists it
    assert abs(timing["upstream"] - final["attempts"][0]["duration_ms"]) < 0.5


async def test_a_whole_answer_and_an_answer_without_a_run_carry_the_header_too():
    async with _client(create_app(Settings())) as c:
        whole = await c.post("/v1/generate", json=ASK)
        health = await c.get("/healthz")
        refused = await c.post("/v1/stream", json={**ASK, "model": "nosuch/model"})
        invalid = await c.post("/v1/stream", json={"model": "mock/simple"})
    assert set(_timing(whole)) == {"gateway", "upstream"}
    for answer in (health, refused, invalid):
        assert set(_timing(answer)) == {"gateway"}, answer.status_code
    assert refused.status_code == 404 and invalid.status_code == 422


async def test_the_split_is_in_the_metrics_by_route_and_part():
    async with _client(create_app(Settings())) as c:
        await c.post("/v1/stream", json=ASK)
        await c.post("/v1/stream", json=ASK)
        text = (await c.get("/metrics")).text
    counts = {(s.labels["route"], s.labels["part"]): s.value for f in text_string_to_metric_families(text)
              for s in f.samples if s.name == "foundry_first_byte_seconds_count"}
    assert counts[("/v1/stream", "gateway")] == 2 and counts[("/v1/stream", "upstream")] == 2


def test_under_uvloop_the_upstreams_share_is_measured_finer_than_the_loops_millisecond_clock():
    """`foundry-gateway serve` runs on uvloop, whose `loop.time()` is libuv's clock: whole
    milliseconds, read once per loop turn. An attempt timed on it read 0.000 for an upstream that
    answers within a millisecond (every loopback one), in the header, the final and the metrics."""

    async def ask_twenty() -> list[tuple[float, float]]:
        seen = []
        async with _client(create_app(Settings())) as c:
            for _ in range(20):
                r = await c.post("/v1/stream", json=ASK)
                attempt = parse_sse(r.text)[-1][2]["attempts"][0]["duration_ms"]
                seen.append((_timing(r)["upstream"], attempt))
        return seen

    seen = uvloop.run(ask_twenty())
    assert any(upstream != int(upstream) for upstream, _ in seen), seen  # not all whole milliseconds
    assert any(attempt != int(attempt) for _, attempt in seen), seen
    assert all(upstream > 0 and attempt > 0 for upstream, attempt in seen), seen
