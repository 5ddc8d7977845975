"""The response cache and keys (docs/caching.md): an answer belongs to the key that asked unless a
rule names a shared scope; a key can be denied; a hit is not charged to the key unless its rule
says `charge`; a run whose gateway tools are all declared deterministic is cached whole."""

from __future__ import annotations

import hashlib
import tempfile
from typing import Any

import httpx
import pytest

from app.cache.config import CacheRule
from app.core.patches import MessageDelta, MessageEnd, TextDelta, UsagePatch
from app.main import create_app
from app.settings import Settings
from tests.fakes import FakeAdapter
from tests.support import parse_sse

ASK = {"model": "fake/m", "messages": [{"role": "user", "content": "Say hi"}]}
KEYS = {"alpha": "fgw-" + "a" * 43, "beta": "fgw-" + "b" * 43}
SCRIPT = [[TextDelta(text="Hi.")], [MessageDelta(stop_reason="stop", usage=UsagePatch(
    input_tokens=10, output_tokens=5, total_tokens=15)), MessageEnd()]]


def keyed_app(adapter: FakeAdapter, rule: CacheRule) -> Any:
    keys = [{"hash": hashlib.sha256(k.encode()).hexdigest(), "id": n, "name": n} for n, k in KEYS.items()]
    return create_app(Settings(cache=[rule], keys=keys, auth="required", data_dir=tempfile.mkdtemp(prefix="fg-cache-")),
                      adapters={"fake": adapter})


def as_key(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


async def _cache_of(client: httpx.AsyncClient, key: str) -> str | None:
    r = await client.post("/v1/stream", json=ASK, headers=as_key(key))
    assert r.status_code == 200, r.text
    return r.headers.get("x-foundry-cache")


@pytest.mark.parametrize(("scope", "beta_sees"), [(None, "miss"), ("team", "hit")])
async def test_an_answer_stays_with_its_key_unless_the_rule_shares_it(scope: str | None, beta_sees: str) -> None:
    adapter = FakeAdapter(SCRIPT)
    app = keyed_app(adapter, CacheRule(models="fake/*", scope=scope))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        assert await _cache_of(client, "alpha") == "miss"
        assert await _cache_of(client, "alpha") == "hit"
        assert await _cache_of(client, "beta") == beta_sees


async def test_a_denied_key_is_neither_served_nor_stored() -> None:
    adapter = FakeAdapter(SCRIPT)
    app = keyed_app(adapter, CacheRule(models="fake/*", deny_keys=["beta"]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        assert await _cache_of(client, "beta") is None
        assert await _cache_of(client, "beta") is None
        assert await _cache_of(client, "alpha") == "miss"
    assert len(adapter.requests) == 3


@pytest.mark.parametrize(("charge", "tokens"), [(False, 15.0), (True, 30.0)])
async def test_a_hit_is_charged_by_the_rule(charge: bool, tokens: float) -> None:
    adapter = FakeAdapter(SCRIPT)
    app = keyed_app(adapter, CacheRule(models="fake/*", charge=charge))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        await _cache_of(client, "alpha")
        hit = await client.post("/v1/generate", json=ASK, headers=as_key("alpha"))
        assert hit.json()["usage"]["total_tokens"] == 15  # reported as the original's
        metrics = app.state.gateway.metrics
    assert metrics.registry.get_sample_value("foundry_key_tokens_total", {"key": "alpha"}) == tokens


async def test_a_tool_run_is_cached_whole_only_when_its_tools_are_deterministic() -> None:
    ask = {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}]}
    for deterministic, second in ((False, None), (True, "hit")):
        tools = [{"kind": "builtin", "name": "calculator", "providers": ["mock"], "deterministic": deterministic}]
        app = create_app(Settings(cache=[CacheRule(models="mock/*")], tools=tools))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            first = await client.post("/v1/stream", json=ask)
            again = await client.post("/v1/stream", json=ask)
        assert again.headers.get("x-foundry-cache") == second
        one, two = parse_sse(first.text), parse_sse(again.text)
        assert [k for _, k, _ in one] == [k for _, k, _ in two]
        assert [d for _, k, d in one if k in ("token", "tool_call", "tool_result")] == \
            [d for _, k, d in two if k in ("token", "tool_call", "tool_result")]
        assert two[-1][2]["messages"] == one[-1][2]["messages"]
