"""Streaming metrics in Prometheus, named by the GenAI metric conventions: time to first token, time
per output token, run duration and token usage by provider and model (model labels bounded),
upstream attempts by provider and outcome, saturation (active runs over the admitted maximum)."""

from __future__ import annotations

import httpx
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.observability import MAX_MODEL_LABELS, BoundedLabels
from app.settings import CompatibleProvider, Settings
from tests.support import serve
from tests.upstream_fakes import Fault, FaultServer


def _client(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0)  # type: ignore[arg-type]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_a_run_is_measured_by_provider_and_model_under_the_genai_names():
    app = create_app(Settings(max_active_runs=7))
    async with _client(app) as c:
        response = await c.post("/v1/stream", json={"model": "mock/lorem-12", "messages": [{"role": "user", "content": "Hi"}]})
        assert response.status_code == 200
        samples = _samples((await c.get("/metrics")).text)
    labels = {"provider": "mock", "model": "mock/lorem-12"}
    assert _value(samples, "gen_ai_server_time_to_first_token_seconds_count", **labels) == 1
    assert _value(samples, "gen_ai_server_time_per_output_token_seconds_count", **labels) == 1
    assert _value(samples, "gen_ai_server_request_duration_seconds_count", **labels, status="ok") == 1
    assert _value(samples, "gen_ai_client_token_usage_sum", **labels, type="output") == 12
    assert _value(samples, "gen_ai_client_token_usage_count", **labels, type="input") == 1
    assert _value(samples, "foundry_runs_finished_total", provider="mock", status="ok") == 1
    assert _value(samples, "foundry_active_runs") == 0 and _value(samples, "foundry_max_active_runs") == 7
    assert _value(samples, "foundry_upstream_attempt_seconds_count", provider="mock", outcome="ok") == 1


async def test_model_labels_are_bounded_past_the_configured_ones():
    app = create_app(Settings(aliases={"fast": "mock/simple"}))
    async with _client(app) as c:
        for n in range(1, MAX_MODEL_LABELS + 3):  # every lorem-N is a model no configuration names
            r = await c.post("/v1/generate", json={"model": f"mock/lorem-{n}", "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 200
        await c.post("/v1/generate", json={"model": "fast", "messages": [{"role": "user", "content": "x"}]})
        samples = _samples((await c.get("/metrics")).text)
    models = {dict(labels)["model"] for name, labels in samples if name == "gen_ai_server_request_duration_seconds_count"}
    assert "other" in models and "fast" in models  # the alias is configured: its own label after the cap
    assert len(models) == MAX_MODEL_LABELS + 2
    assert _value(samples, "gen_ai_server_request_duration_seconds_count", provider="mock", model="other", status="ok") == 2


def test_bounded_labels_keep_the_known_then_the_first_seen_then_other():
    labels = BoundedLabels({"a/known"}, cap=2)
    assert [labels.label(v) for v in ("x/1", "x/2", "x/3", "a/known", "x/1")] == ["x/1", "x/2", "other", "a/known", "x/1"]


async def test_upstream_attempts_are_timed_by_provider_and_outcome():
    server = FaultServer({"primary": [Fault("status", status=500)], "backup": [Fault("ok", text="Hello")]})
    async with serve(server) as url:
        settings = Settings(openai_api_key=None, upstream_max_retries=0,
                            providers=[CompatibleProvider(name="up", base_url=f"{url}/v1")],
                            routes={"smart": {"targets": ["up/primary", "up/backup"]}})
        app = create_app(settings)
        async with serve(app) as gateway, httpx.AsyncClient(base_url=gateway, timeout=15.0) as c:
            r = await c.post("/v1/stream", json={"model": "smart", "messages": [{"role": "user", "content": "Hi"}]})
            assert r.status_code == 200
            samples = _samples((await c.get("/metrics")).text)
    assert _value(samples, "foundry_upstream_attempt_seconds_count", provider="up", outcome="error") == 1
    assert _value(samples, "foundry_upstream_attempt_seconds_count", provider="up", outcome="ok") == 1
    # the route's targets are configured models: their own labels
    assert _value(samples, "gen_ai_server_time_to_first_token_seconds_count", provider="up", model="up/backup") == 1


async def test_a_run_after_the_first_counts_on_kept_children_without_asking_prometheus_for_them(monkeypatch):
    """`Metrics.child` keeps each labelled child: the second identical run reaches no `labels()`
    (2.7 us each, about 13 a short request), and its counts land on the same series."""
    calls: list[tuple] = []
    labels = MetricWrapperBase.labels
    monkeypatch.setattr(MetricWrapperBase, "labels", lambda self, *values, **kw: calls.append(values) or
                        labels(self, *values, **kw))
    app = create_app(Settings())
    body = {"model": "mock/lorem-12", "messages": [{"role": "user", "content": "Hi"}]}
    async with _client(app) as c:
        assert (await c.post("/v1/stream", json=body)).status_code == 200
        first = len(calls)
        assert (await c.post("/v1/stream", json=body)).status_code == 200
        again = calls[first:]
        samples = _samples((await c.get("/metrics")).text)
    assert first >= 10 and again == [], again
    assert _value(samples, "foundry_runs_finished_total", provider="mock", status="ok") == 2
    assert _value(samples, "gen_ai_client_token_usage_sum", provider="mock", model="mock/lorem-12", type="output") == 24
    assert _value(samples, "foundry_events_total", type="token") == 24
    assert _value(samples, "foundry_requests_total", route="/v1/stream", method="POST", status="200") == 2
    assert _value(samples, "foundry_first_byte_seconds_count", route="/v1/stream", part="gateway") == 2


async def test_a_short_run_derives_its_spec_and_request_once_each(monkeypatch):
    """`dataclasses.replace` costs about 5 us on the 2-core machine: the path of a request copies its
    run's spec once (the caller's cache choice, and its key's policy when it has one) and its provider
    request once (the model the target knows it by), not again where nothing changes. (The gateway's
    own tools, offered to a provider, add theirs: none here.)"""
    import dataclasses
    import sys

    calls: list[str] = []
    real = dataclasses.replace

    def spy(obj, /, **changes):
        calls.append(f"{type(obj).__name__}({', '.join(sorted(changes))})")
        return real(obj, **changes)

    app = create_app(Settings(tools=[]))
    for name, module in list(sys.modules.items()):
        if name.startswith("app.") and getattr(module, "replace", None) is real:
            monkeypatch.setattr(module, "replace", spy)
    body = {"model": "mock/lorem-12", "messages": [{"role": "user", "content": "Hi"}]}
    async with _client(app) as c:
        assert (await c.post("/v1/stream", json=body)).status_code == 200
        calls.clear()
        response = await c.post("/v1/stream", json=body)
    assert response.status_code == 200 and response.text.rstrip().endswith("}")
    assert sorted(calls) == ["ProviderRequest(model)", "RunSpec(cache)"], calls
