"""The response cache (docs/caching.md): a miss then a hit on every entry point and facade, the
same events and bytes; scope, opt-outs, TTL, collapse of identical requests in flight, a corrupt
entry. Fake upstreams are injected adapters (each call counted); the app runs in process."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import httpx
import pytest

from app.cache.config import CacheRule
from app.main import create_app
from app.settings import Settings
from tests.fakes import FakeAdapter, ok_script
from tests.support import parse_sse

ASK = {"model": "fake/m", "messages": [{"role": "user", "content": "Say hi"}]}


def cached_app(adapter: FakeAdapter, *rules: CacheRule, **settings: Any) -> Any:
    rules = rules or (CacheRule(models="fake/*", ttl_seconds=60),)
    return create_app(Settings(cache=list(rules), **settings), adapters={"fake": adapter})


async def client_of(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


def content(events: list[tuple[int, str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The events less what differs between runs by design (the stream id, the cache marker, the
    upstream attempts)."""
    out = []
    for _, kind, data in events:
        if kind == "start":
            data = {**data, "stream_id": "-"}
        if kind == "final":
            data = {k: v for k, v in data.items() if k not in ("cache", "attempts")}  # a hit made no attempt
        out.append((kind, data))
    return out


async def test_a_miss_then_a_hit_on_v1_stream_gives_the_same_events_without_an_upstream_call() -> None:
    adapter = FakeAdapter(ok_script("Hello", " there."))
    async with await client_of(cached_app(adapter)) as client:
        first = await client.post("/v1/stream", json=ASK)
        second = await client.post("/v1/stream", json=ASK)
    assert first.headers["x-foundry-cache"] == "miss"
    assert second.headers["x-foundry-cache"] == "hit"
    assert len(adapter.requests) == 1
    one, two = parse_sse(first.text), parse_sse(second.text)
    assert content(one) == content(two)
    assert one[0][2]["stream_id"] != two[0][2]["stream_id"]
    final = two[-1][2]
    assert final["cache"]["hit"] is True and final["cache"]["age_s"] >= 0
    assert "cache" not in one[-1][2]
    assert final["message"]["content"] == "Hello there."


async def test_generate_json_hits_and_reports_the_original_usage() -> None:
    adapter = FakeAdapter(ok_script("Hi."))
    async with await client_of(cached_app(adapter)) as client:
        first = await client.post("/v1/generate", json=ASK)
        second = await client.post("/v1/generate", json=ASK)
    assert (first.headers["x-foundry-cache"], second.headers["x-foundry-cache"]) == ("miss", "hit")
    assert len(adapter.requests) == 1
    assert second.json()["usage"] == first.json()["usage"]
    assert second.json()["message"] == first.json()["message"]


async def test_no_rule_no_cache_and_no_header() -> None:
    adapter = FakeAdapter(ok_script("Hi."))
    app = create_app(Settings(), adapters={"fake": adapter})
    async with await client_of(app) as client:
        for _ in range(2):
            r = await client.post("/v1/stream", json=ASK)
            assert "x-foundry-cache" not in r.headers
    assert len(adapter.requests) == 2


async def test_another_request_misses() -> None:
    adapter = FakeAdapter(ok_script("Hi."))
    async with await client_of(cached_app(adapter)) as client:
        await client.post("/v1/stream", json=ASK)
        for change in ({"temperature": 0.5}, {"max_tokens": 7},
                       {"messages": [{"role": "user", "content": "Say hello"}]},
                       {"validators": [{"name": "regex_deny", "config": {"patterns": ["x"]}}]}):
            r = await client.post("/v1/stream", json={**ASK, **change})
            assert r.headers["x-foundry-cache"] == "miss", change
    assert len(adapter.requests) == 5


@pytest.mark.parametrize(("header", "body", "second", "third_calls"), [
    ({"Cache-Control": "no-cache"}, {}, "miss", 2),  # skips the lookup; its answer is stored
    ({"Cache-Control": "no-store"}, {}, "miss", 2),  # looks up (nothing yet), stores nothing
    ({}, {"cache": False}, None, 2),
])
async def test_the_caller_can_refuse_the_cache(header: dict[str, str], body: dict[str, Any], second: str | None,
                                                 third_calls: int) -> None:
    adapter = FakeAdapter(ok_script("Hi."))
    async with await client_of(cached_app(adapter)) as client:
        r = await client.post("/v1/stream", json={**ASK, **body}, headers=header)
        assert r.headers.get("x-foundry-cache") == second
        assert len(adapter.requests) == 1
        third = await client.post("/v1/stream", json=ASK)
    stored = header.get("Cache-Control") == "no-cache"
    assert third.headers["x-foundry-cache"] == ("hit" if stored else "miss")
    assert len(adapter.requests) == (1 if stored else 2)


async def test_a_failed_run_is_not_cached() -> None:
    adapter = FakeAdapter([RuntimeError("boom")])
    async with await client_of(cached_app(adapter)) as client:
        for _ in range(2):
            r = await client.post("/v1/stream", json=ASK)
            assert r.headers["x-foundry-cache"] == "miss"
            assert parse_sse(r.text)[-1][2]["status"] == "error"
    assert len(adapter.requests) == 2


async def test_ten_identical_concurrent_requests_make_one_upstream_call() -> None:
    gate = asyncio.Event()

    class Slow(FakeAdapter):
        async def open_stream(self, request):  # type: ignore[no-untyped-def]
            stream = await super().open_stream(request)
            await gate.wait()
            return stream

    adapter = Slow(ok_script("One", " answer."))
    async with await client_of(cached_app(adapter)) as client:
        requests = [asyncio.ensure_future(client.post("/v1/stream", json=ASK)) for _ in range(10)]
        await anyio.wait_all_tasks_blocked()  # the first waits upstream, the nine on it
        gate.set()
        answers = await asyncio.gather(*requests)
        metrics = (await client.get("/metrics")).text
    assert len(adapter.requests) == 1
    assert 'foundry_cache_hits_total{source="in_flight"} 9.0' in metrics
    texts = {parse_sse(a.text)[-1][2]["message"]["content"] for a in answers}
    assert texts == {"One answer."}
    assert sorted(a.headers["x-foundry-cache"] for a in answers) == ["hit"] * 9 + ["miss"]


FACADES = [
    ("/v1/chat/completions", {"model": "fake/m", "messages": [{"role": "user", "content": "Say hi"}]}),
    ("/v1/messages", {"model": "fake/m", "max_tokens": 64, "messages": [{"role": "user", "content": "Say hi"}]}),
    ("/v1/responses", {"model": "fake/m", "input": "Say hi"}),
]


def _without_ids(text: str) -> str:
    """A facade's answer less what each run names afresh (ids, creation times)."""
    import re

    return re.sub(r'"(id|created|created_at|stream_id|item_id|response_id)":\s*("[^"]*"|\d+(\.\d+)?)', r'"\1":-', text)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("path", "body"), FACADES, ids=[p for p, _ in FACADES])
async def test_each_facade_misses_then_hits_with_the_same_answer(path: str, body: dict[str, Any], stream: bool) -> None:
    adapter = FakeAdapter(ok_script("Hello", " there."))
    async with await client_of(cached_app(adapter)) as client:
        first = await client.post(path, json={**body, "stream": stream})
        second = await client.post(path, json={**body, "stream": stream})
    assert first.status_code == second.status_code == 200, first.text
    assert (first.headers["x-foundry-cache"], second.headers["x-foundry-cache"]) == ("miss", "hit")
    assert len(adapter.requests) == 1
    assert _without_ids(second.text) == _without_ids(first.text)
    # the answer itself: whole in a JSON body, its two tokens (JSON strings) in the frames of a stream
    assert all(piece in second.text for piece in (['"Hello"', '" there."'] if stream else ["Hello there."]))


async def test_the_native_subscription_replays_a_hit_like_any_stream() -> None:
    adapter = FakeAdapter(ok_script("Hi."))
    async with await client_of(cached_app(adapter)) as client:
        await client.post("/v1/stream", json=ASK)
        started = await client.post("/v1/generate", json={**ASK, "stream": True})
        assert started.status_code == 202
        sub = await client.get(started.json()["stream_url"])
    events = parse_sse(sub.text)
    assert [kind for _, kind, _ in events] == ["start", "token", "final"]
    assert events[-1][2]["cache"]["hit"] is True


async def test_a_corrupt_entry_is_a_counted_miss_and_is_replaced() -> None:
    adapter = FakeAdapter(ok_script("Hi."))
    app = cached_app(adapter)
    store = app.state.gateway.cache.store
    async with await client_of(app) as client:
        await client.post("/v1/stream", json=ASK)
        key, = store.keys()
        value = await store.get(key)
        await store.put(key, value[: len(value) // 2], 60)  # truncated
        r = await client.post("/v1/stream", json=ASK)
        assert r.headers["x-foundry-cache"] == "miss"
        assert parse_sse(r.text)[-1][2]["status"] == "ok"
        again = await client.post("/v1/stream", json=ASK)
        metrics = (await client.get("/metrics")).text
    assert again.headers["x-foundry-cache"] == "hit"
    assert len(adapter.requests) == 2
    assert 'foundry_cache_misses_total{reason="corrupt"} 1.0' in metrics
    assert 'foundry_cache_hits_total{source="stored"} 1.0' in metrics


async def test_the_run_record_of_a_hit_says_so(tmp_path: Any) -> None:
    from tests.support import serve

    adapter = FakeAdapter(ok_script("Hi."))
    app = cached_app(adapter, data_dir=str(tmp_path))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        ids = [(await client.post("/v1/stream", json=ASK)).headers["x-stream-id"] for _ in range(2)]
        await app.state.records.flush()
        runs = [(await client.get(f"/v1/runs/{i}")).json() for i in ids]
    assert [r["cache_hit"] for r in runs] == [False, True]
    assert runs[1]["usage"] == runs[0]["usage"]


async def test_a_paced_rule_replays_the_same_stream_event_by_event() -> None:
    adapter = FakeAdapter(ok_script("One.", " Two.", " Three."))
    rule = CacheRule(models="fake/*", replay="paced")
    async with await client_of(cached_app(adapter, rule)) as client:
        first = await client.post("/v1/stream", json=ASK)
        second = await client.post("/v1/stream", json=ASK)
    assert second.headers["x-foundry-cache"] == "hit"
    assert content(parse_sse(first.text)) == content(parse_sse(second.text))


async def test_a_bad_rule_is_a_configuration_error_naming_it() -> None:
    from app.config_file import ConfigError
    from app.config_load import load_settings

    with pytest.raises(ConfigError, match="cache"):
        load_settings(cache=[{"models": "openai/*", "route": "r"}])


def test_the_toml_file_turns_caching_on_per_model_or_route(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config_load import load_settings

    path = tmp_path / "gateway.toml"
    path.write_text('[[cache]]\nmodels = "openai/*"\nttl_seconds = 3600\n\n'
                    '[[cache]]\nroute = "fast"\nttl_seconds = 60\nreplay = "paced"\n\n[streams]\ncache_max_entries = 50\n')
    monkeypatch.setenv("FOUNDRY_CONFIG", str(path))
    settings = load_settings()
    assert [(r.models, r.route, r.ttl_seconds, r.replay) for r in settings.cache] == [
        ("openai/*", None, 3600, "fast"), (None, "fast", 60, "paced")]
    assert settings.cache_max_entries == 50


async def test_a_hit_goes_through_the_requests_validators_as_configured() -> None:
    adapter = FakeAdapter(ok_script("Fine words.", " More fine words."))
    ask = {**ASK, "validators": [{"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]}
    async with await client_of(cached_app(adapter)) as client:
        first = await client.post("/v1/stream", json=ask)
        second = await client.post("/v1/stream", json=ask)
    assert second.headers["x-foundry-cache"] == "hit"
    one, two = parse_sse(first.text)[-1][2], parse_sse(second.text)[-1][2]
    verdicts = ("pass", "fail", "unknown", "error")  # this run's gate gave the same verdicts (its times are its own)
    assert {k: two["validation"]["validators"]["regex_deny"][k] for k in verdicts} == \
        {k: one["validation"]["validators"]["regex_deny"][k] for k in verdicts}
    assert two["validation"]["chunks"] == one["validation"]["chunks"]
    assert content(parse_sse(first.text))[:-1] == content(parse_sse(second.text))[:-1]
