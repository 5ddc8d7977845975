"""OpenTelemetry traces in process (app/tracing.py), through the HTTP API, with the SDK's in-memory
exporter: the run span and its GenAI attributes, attempt spans as siblings on a fallback (each one's
context received upstream as `traceparent`), the caller's `traceparent` as the run's parent,
`execute_tool` and judge spans, the trace id in the response header and the log lines, content only
when opted in (scrubbed), and nothing of the SDK when tracing is off."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from app.main import create_app
from app.settings import CompatibleProvider, Settings
from app.tracing import Tracing, tracing_configured
from tests.support import REPO, parse_sse, serve
from tests.tracing_support import HeaderRecorder
from tests.upstream_fakes import Fault, FaultServer

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
SECRET = "sk-trace-0123456789abcdefghijklmnop"


def _tracing(exporter: InMemorySpanExporter, **kw: Any) -> Tracing:
    return Tracing(exporter=exporter, batch=False, **kw)


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _runs(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [s for s in spans if s.kind == SpanKind.SERVER]


def _children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


async def test_a_tool_run_has_a_run_span_with_genai_attributes_and_an_execute_tool_child(exporter, capsys):
    app = create_app(Settings(), tracing=_tracing(exporter))
    body = {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}],
            "temperature": 0.3, "max_tokens": 64}
    async with _client(app) as c:
        response = await c.post("/v1/stream", json=body, headers={"X-Request-ID": "rid-trace"})
    assert response.status_code == 200
    events = parse_sse(response.content)
    start, final = events[0][2], events[-1][2]
    assert final["status"] == "ok" and final["steps"] == 2
    spans = exporter.get_finished_spans()
    [run] = _runs(spans)
    trace_id = _hex(run.context.trace_id, 32)
    assert response.headers["x-trace-id"] == trace_id
    assert run.name == "chat mock/tool_call" and run.parent is None
    attributes = dict(run.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "mock"
    assert attributes["gen_ai.request.model"] == "mock/tool_call"
    assert attributes["gen_ai.response.model"] == final["model"]
    assert attributes["gen_ai.response.finish_reasons"] == (final["stop_reason"],)
    assert attributes["gen_ai.usage.input_tokens"] == final["usage"]["input_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == final["usage"]["output_tokens"]
    assert attributes["gen_ai.request.temperature"] == 0.3 and attributes["gen_ai.request.max_tokens"] == 64
    assert attributes["foundry.stream_id"] == start["stream_id"]
    assert attributes["foundry.status"] == "ok" and attributes["foundry.request_id"] == "rid-trace"
    assert "gen_ai.input.messages" not in attributes and "gen_ai.output.messages" not in attributes  # off by default
    events = [e.name for e in run.events]
    assert events[0] == "gen_ai.first_token" and events[-1] == "foundry.final"
    children = _children(spans, run)
    tools = [s for s in children if s.name == "execute_tool calculator"]
    attempts = [s for s in children if s.kind == SpanKind.CLIENT]
    assert len(tools) == 1 and len(attempts) == 2  # one attempt per step, the tool between them
    tool = dict(tools[0].attributes or {})
    assert tool["gen_ai.operation.name"] == "execute_tool" and tool["gen_ai.tool.name"] == "calculator"
    assert tool["gen_ai.tool.call.id"] and tool["foundry.tool.outcome"] == "ok"
    assert all(s.context.trace_id == run.context.trace_id for s in spans)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    [request_line] = [line for line in lines if line.get("event") == "request"]
    assert request_line["trace_id"] == trace_id


async def test_a_fallback_shows_its_attempts_as_siblings_and_each_sends_its_traceparent(exporter):
    server = FaultServer({"primary": [Fault("status", status=500)], "backup": [Fault("ok", text="Hello from backup")]})
    upstream = HeaderRecorder(server)
    async with serve(upstream) as url:
        settings = Settings(openai_api_key=None, upstream_max_retries=0,
                            providers=[CompatibleProvider(name="up", base_url=f"{url}/v1")],
                            routes={"smart": {"targets": ["up/primary", "up/backup"]}})
        app = create_app(settings, tracing=_tracing(exporter))
        async with serve(app) as gateway, httpx.AsyncClient(base_url=gateway, timeout=15.0) as c:
            response = await c.post("/v1/stream", json={"model": "smart", "messages": [{"role": "user", "content": "Hi"}]})
    final = parse_sse(response.content)[-1][2]
    assert final["status"] == "ok" and [a["outcome"] for a in final["attempts"]] == ["error", "ok"]
    spans = exporter.get_finished_spans()
    [run] = _runs(spans)
    attempts = sorted((s for s in spans if s.kind == SpanKind.CLIENT), key=lambda s: s.start_time or 0)
    assert [s.name for s in attempts] == ["chat primary", "chat backup"]
    assert {s.parent.span_id for s in attempts if s.parent} == {run.context.span_id} and all(s.parent for s in attempts)
    failed, served = (dict(s.attributes or {}) for s in attempts)
    assert failed["foundry.attempt.outcome"] == "error" and failed["http.response.status_code"] == 500
    assert failed["error.type"] == "upstream_error" and attempts[0].status.status_code == StatusCode.ERROR
    assert served["foundry.attempt.outcome"] == "ok" and attempts[1].status.status_code != StatusCode.ERROR
    assert failed["server.address"] == "127.0.0.1" and failed["gen_ai.provider.name"] == "up"
    run_attributes = dict(run.attributes or {})
    assert run_attributes["foundry.route"] == "smart" and run_attributes["foundry.route.target"] == "up/backup"
    assert run_attributes["gen_ai.response.model"] == "m"  # as the provider reported it (tests/upstream_fakes.py)
    # what the upstream received: each attempt's own context
    expected = [f"00-{_hex(s.context.trace_id, 32)}-{_hex(s.context.span_id, 16)}-{_hex(s.context.trace_flags, 2)}"
                for s in attempts]
    assert upstream.traceparents == expected


async def test_the_callers_traceparent_is_the_run_spans_parent(exporter):
    app = create_app(Settings(), tracing=_tracing(exporter))
    parent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    async with _client(app) as c:
        response = await c.post("/v1/stream", json={"model": "mock/simple", "messages": [{"role": "user", "content": "Hi"}]},
                                headers={"traceparent": parent})
    assert response.headers["x-trace-id"] == CALLER_TRACE
    [run] = _runs(exporter.get_finished_spans())
    assert _hex(run.context.trace_id, 32) == CALLER_TRACE
    assert run.parent is not None and _hex(run.parent.span_id, 16) == CALLER_SPAN and run.parent.is_remote


async def test_a_judge_call_has_its_span_and_a_block_is_an_event(exporter):
    app = create_app(Settings(), tracing=_tracing(exporter))
    judge = {"name": "llm_judge", "config": {"model": "mock/echo", "policy": "No secrets."}}
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "All good.\nFAIL this line."}],
            "validators": [judge], "chunking": "paragraph"}
    async with _client(app) as c:
        response = await c.post("/v1/stream", json=body)
    final = parse_sse(response.content)[-1][2]
    assert final["status"] == "blocked"
    spans = exporter.get_finished_spans()
    [run] = _runs(spans)
    judges = [s for s in spans if s.name == "judge mock/echo"]
    assert judges and all(s.parent is not None and s.parent.span_id == run.context.span_id for s in judges)
    assert all(_children(spans, j) and _children(spans, j)[0].kind == SpanKind.CLIENT for j in judges)
    block = [e for e in run.events if e.name == "foundry.validator.block"]
    assert len(block) == 1 and dict(block[0].attributes or {})["foundry.validator"] == "llm_judge"


async def test_content_goes_on_spans_only_when_opted_in_and_scrubbed(exporter):
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": f"my words {SECRET}"}]}
    app = create_app(Settings(openai_api_key=SECRET, trace_content=True), tracing=_tracing(exporter, content=True))
    async with _client(app) as c:
        await c.post("/v1/stream", json=body)
    [run] = _runs(exporter.get_finished_spans())
    attributes = dict(run.attributes or {})
    inputs, outputs = json.loads(str(attributes["gen_ai.input.messages"])), str(attributes["gen_ai.output.messages"])
    assert inputs[0]["role"] == "user" and "my words" in inputs[0]["parts"][0]["content"]
    assert "my words" in outputs
    assert SECRET not in json.dumps(attributes)


def test_tracing_is_on_only_with_an_otlp_endpoint() -> None:
    assert not tracing_configured({})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert not tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})


def test_off_no_sdk_is_imported_and_a_run_has_no_trace_header() -> None:
    """Zero cost off: the gateway serves a run (with a caller's traceparent) and the OpenTelemetry SDK
    and exporter were never imported."""
    code = """
import asyncio, os, sys
import httpx
from app.main import create_app
from app.settings import Settings
for name in [n for n in os.environ if n.startswith("OTEL_")]:
    del os.environ[name]
async def main():
    app = create_app(Settings())
    assert app.state.gateway.tracing is None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        r = await c.post("/v1/stream", json={"model": "mock/simple", "messages": [{"role": "user", "content": "Hi"}]},
                         headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
    assert r.status_code == 200 and "x-trace-id" not in r.headers, r.headers
    # FastAPI itself imports the OpenTelemetry API (its no-op tracer); the SDK is ours to load, and off it is not
    loaded = sorted(n for n in sys.modules if n.startswith(("opentelemetry.sdk", "opentelemetry.exporter")))
    assert not loaded, loaded
asyncio.run(main())
"""
    env = {"PATH": "/usr/bin:/bin", "FOUNDRY_RECORDS": "off"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


async def _routed(exporter: InMemorySpanExporter, scripts: dict[str, list[Fault]],
                  route: dict[str, Any]) -> tuple[httpx.Response, tuple[ReadableSpan, ...]]:
    async with serve(FaultServer(scripts)) as url:
        settings = Settings(openai_api_key=None, upstream_max_retries=0, first_token_timeout=5.0,
                            providers=[CompatibleProvider(name="up", base_url=f"{url}/v1")], routes={"smart": route})
        app = create_app(settings, tracing=_tracing(exporter))
        async with serve(app) as gateway, httpx.AsyncClient(base_url=gateway, timeout=15.0) as c:
            response = await c.post("/v1/stream", json={"model": "smart", "messages": [{"role": "user", "content": "Hi"}]})
    return response, exporter.get_finished_spans()


async def test_hedged_attempts_are_siblings_each_with_its_own_outcome(exporter):
    response, spans = await _routed(exporter, {"primary": [Fault("stall")], "backup": [Fault("ok", text="Hedged")]},
                                    {"targets": ["up/primary", "up/backup"], "hedge_after_ms": 50})
    final = parse_sse(response.content)[-1][2]
    assert [(a["target"], a["outcome"]) for a in final["attempts"]] == [("up/primary", "cancelled"), ("up/backup", "ok")]
    [run] = _runs(spans)
    attempts = {s.name: dict(s.attributes or {}) for s in spans if s.kind == SpanKind.CLIENT}
    assert attempts["chat primary"]["foundry.attempt.outcome"] == "cancelled"
    assert attempts["chat backup"]["foundry.attempt.outcome"] == "ok"
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id
               for s in spans if s.kind == SpanKind.CLIENT)


async def test_a_run_no_target_served_ends_its_span_with_the_error(exporter):
    response, spans = await _routed(exporter, {"primary": [Fault("status", status=500)],
                                               "backup": [Fault("status", status=503)]},
                                    {"targets": ["up/primary", "up/backup"]})
    assert response.status_code == 502 and "x-trace-id" in response.headers
    [run] = _runs(spans)
    assert run.status.status_code == StatusCode.ERROR and dict(run.attributes or {})["foundry.status"] == "error"
    assert dict(run.attributes or {})["error.type"] == response.json()["error"]["code"]
    assert len(_children(spans, run)) == 2


def test_the_startup_line_names_the_exporter_without_credentials(monkeypatch) -> None:
    from app.startup import traces_label

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert traces_label(Settings())["exporter"].startswith("off")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://user:hunter2@collector.example:4318/otlp?token=abc")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gw-test")
    label = traces_label(Settings())
    assert label == {"exporter": "otlp/http", "endpoint": "https://collector.example:4318/otlp", "service": "gw-test",
                     "sampler": "parentbased_always_on", "content": False}


async def test_sampling_is_the_sdks_own_otel_traces_sampler(exporter, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    app = create_app(Settings(), tracing=_tracing(exporter))
    async with _client(app) as c:
        response = await c.post("/v1/stream", json={"model": "mock/tool_call", "messages": [{"role": "user", "content": "2+2?"}]})
    assert parse_sse(response.content)[-1][2]["status"] == "ok"
    assert exporter.get_finished_spans() == ()  # sampled out: nothing recorded, the run unchanged
    assert len(response.headers["x-trace-id"]) == 32  # the trace still has its id, for the logs and the caller
