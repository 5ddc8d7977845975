"""Breakers and labels only for what the operator configured or what actually served: a caller
fault (404 unknown model, 400, 422) and a 429 never open a breaker, and any number of model
names a caller makes up leaves /readyz and /metrics bounded (entries counted)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.observability import MAX_MODEL_LABELS
from app.routing.breaker import Breakers
from app.settings import CompatibleProvider, Settings
from tests.support import REPO, read_asgi_request, serve

HELLO = [{"role": "user", "content": "Hello"}]


class AnyModel:
    """An OpenAI-compatible upstream answering every model the same: `status` with an error body,
    or (200) a short chat stream."""

    def __init__(self, status: int, *, retry_after: str | None = None) -> None:
        self.status = status
        self.retry_after = retry_after
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if await read_asgi_request(scope, receive, send) is None:
            return
        self.calls += 1
        if self.status != 200:
            headers = [(b"content-type", b"application/json")]
            if self.retry_after is not None:
                headers.append((b"retry-after", self.retry_after.encode()))
            code = "model_not_found" if self.status == 404 else "upstream"
            body = {"error": {"message": f"upstream says {self.status}", "type": "invalid_request_error", "code": code}}
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
        body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def gateway(upstream: AnyModel, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(upstream) as url:
        settings = Settings(openai_api_key=None, providers=[CompatibleProvider(name="up", base_url=f"{url}/v1")],
                            upstream_max_retries=0, retry_backoff_seconds=0.01, retry_backoff_max_seconds=0.02,
                            breaker_failures=2, breaker_cooldown_seconds=3600, **kw)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=15) as client:
            yield client


async def stream(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post("/v1/stream", json={"model": model, "messages": HELLO})


def target_labels(metrics: str) -> set[str]:
    """Every `target` label value of the per-target series."""
    return set(re.findall(r'^foundry_(?:circuit_state|route_attempts_total)\{[^}]*target="([^"]*)"', metrics, re.M))


@pytest.mark.parametrize(("status", "retry_after", "code"), [
    (404, None, "model_not_found"),  # the model does not exist upstream
    (429, "30", "rate_limited"),  # the provider says slow down (30 s: past retry_after_max, not waited)
])
async def test_a_missing_model_or_a_429_never_opens_the_breaker(status: int, retry_after: str | None,
                                                                  code: str) -> None:
    upstream = AnyModel(status, retry_after=retry_after)
    async with gateway(upstream) as client:
        answers = [await stream(client, "up/no-such-model") for _ in range(6)]
        ready = (await client.get("/readyz")).json()
    assert [a.status_code for a in answers] == [status] * 6  # never 503 circuit_open
    assert {a.json()["error"]["code"] for a in answers} == {code}
    assert upstream.calls == 6 and ready["circuits"] == {}


async def test_five_requests_for_a_mock_model_that_does_not_exist_leave_the_next_one_a_404() -> None:
    async with gateway(AnyModel(200)) as client:
        answers = [await stream(client, "mock/does-not-exist") for _ in range(6)]
        served = await stream(client, "mock/simple")
    assert [a.status_code for a in answers] == [404] * 6
    assert {a.json()["error"]["code"] for a in answers} == {"model_not_found"}
    assert served.status_code == 200


async def test_a_target_failing_as_a_target_still_opens_its_breaker() -> None:
    async with gateway(AnyModel(500)) as client:
        answers = [await stream(client, "up/broken") for _ in range(3)]
        ready = (await client.get("/readyz")).json()
    assert [a.status_code for a in answers] == [502, 502, 503]
    assert answers[2].json()["error"]["code"] == "circuit_open" and ready["circuits"] == {"up/broken": "open"}


async def _names(client: httpx.AsyncClient, prefix: str, n: int) -> list[int]:
    return [(await stream(client, f"{prefix}{i}")).status_code for i in range(n)]


async def test_made_up_model_names_leave_readyz_and_metrics_bounded() -> None:
    """The bound reaches the breakers and the labels through the settings; the LRU map itself is
    tested alone below (test_the_lru_map_keeps_configured_targets_and_forgets_the_oldest_others)."""
    bound = 2
    async with gateway(AnyModel(500), max_unconfigured_targets=bound,
                       routes={"smart": {"targets": ["up/configured"]}}) as client:
        assert set(await _names(client, "mock/nope-", 3)) == {404}  # no breaker, no label at all
        assert set(await _names(client, "up/failing-", bound + 3)) == {502}  # breakers: the `bound` most recent
        ready = (await client.get("/readyz")).json()
        metrics = (await client.get("/metrics")).text
    assert sorted(ready["circuits"]) == ["up/failing-3", "up/failing-4"]
    labels = target_labels(metrics)
    assert not any(label.startswith("mock/nope-") for label in labels)
    # never served: their attempts count under `other`; the circuits gauge follows the bounded map
    assert 'foundry_route_attempts_total{outcome="error",target="other"} 8.0' in metrics
    assert len(labels) <= bound + 1


async def test_served_unconfigured_targets_get_labels_up_to_the_bound_then_other() -> None:
    async with gateway(AnyModel(200), max_unconfigured_targets=8) as client:
        assert set(await _names(client, "up/served-", 20)) == {200}
        metrics = (await client.get("/metrics")).text
    attempts = re.findall(r'^foundry_route_attempts_total\{outcome="ok",target="([^"]*)"\} (\S+)', metrics, re.M)
    assert len(attempts) == 9 and dict(attempts)["other"] == "12.0"


def test_the_lru_map_keeps_configured_targets_and_forgets_the_oldest_others() -> None:
    breakers = Breakers(failures=1, cooldown=60, configured={"a/configured"}, max_others=3)
    breakers["a/configured"].failure()
    for i in range(10):
        breakers[f"b/{i}"].failure()
    assert breakers.get("b/7") is not None and breakers.get("b/6") is None
    breakers.get("b/7")  # used: the most recent now
    breakers["b/10"].failure()
    assert sorted(breakers.states()) == ["a/configured", "b/10", "b/7", "b/9"]


async def test_made_up_model_names_past_every_bound_add_no_series() -> None:
    """Past every bound, more names add no state: /metrics after twice the names is as long as after
    once (counter values aside), and /readyz has no circuit. The bound of other targets is the
    setting's (a small one here: the same code as the default's 256, see below); model labels are
    taken only by runs that opened (a 404 opens none; their own bound: tests/test_run_metrics.py)."""
    bound = 4
    async with gateway(AnyModel(404), max_unconfigured_targets=bound) as client:
        assert set(await _names(client, "mock/a" + "x" * 200, 2 * bound)) == {404}
        assert set(await _names(client, "up/a" + "x" * 200, 2 * bound)) == {404}  # the upstream says 404 too
        await client.get("/readyz")
        await client.get("/metrics")  # these two requests' own series exist from here on
        middle = (await client.get("/metrics")).text
        assert set(await _names(client, "mock/b" + "x" * 200, 2 * bound)) == {404}
        assert set(await _names(client, "up/b" + "x" * 200, 2 * bound)) == {404}
        ready = (await client.get("/readyz")).json()
        metrics = (await client.get("/metrics")).text
    assert ready["circuits"] == {} and not [t for t in target_labels(metrics) if t != "other"]
    assert len(metrics.splitlines()) == len(middle.splitlines())  # the same series, only their values grew


def test_the_default_bounds_are_the_documented_ones() -> None:
    """The bounds the tests above set small are, by default, what the operator docs promise."""
    docs = REPO / "docs"
    assert Settings().max_unconfigured_targets == 256 == Breakers(failures=1, cooldown=1).max_others
    assert "`FOUNDRY_MAX_UNCONFIGURED_TARGETS` (256)" in (docs / "observability.md").read_text()
    assert "`FOUNDRY_MAX_UNCONFIGURED_TARGETS` (256)" in (docs / "security.md").read_text()
    assert MAX_MODEL_LABELS == 50 and "the first 50 other models" in (docs / "observability.md").read_text()
