"""Traces end to end: a real gateway process (`python -m app serve`, uvicorn) with the standard OTLP
variables pointed at a loopback receiver that decodes the protobuf export (opentelemetry-proto).
Three runs: `mock/tool_call` (the run span, its attempts and its `execute_tool` span), a route whose
first target answers 500 and whose second serves (attempt spans as siblings, each one's
`traceparent` received by the loopback upstream), and a run with a caller's `traceparent` (the run
span its child). The trace id is in the response header and in the run's log lines. The spans
are read after SIGTERM: the shutdown exports what the batch processor still held."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support import REPO, parse_sse, serve
from tests.support import free_port as _free_port
from tests.tracing_support import HeaderRecorder, OtlpReceiver, ReceivedSpan
from tests.upstream_fakes import Fault, FaultServer

pytestmark = pytest.mark.slow  # starts a process

GUARD = 30.0
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
SERVER, CLIENT, INTERNAL = 2, 3, 1  # the protobuf's SpanKind values




@contextlib.asynccontextmanager
async def gateway_process(upstream: str, collector: str, data_dir: str) -> AsyncIterator[tuple[Any, str, list[str]]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith(("FOUNDRY_", "OTEL_"))}
    env.update(FOUNDRY_PROVIDERS=json.dumps([{"name": "up", "base_url": f"{upstream}/v1"}]),
               FOUNDRY_ROUTES=json.dumps({"smart": {"targets": ["up/primary", "up/backup"]}}),
               FOUNDRY_UPSTREAM_MAX_RETRIES="0", FOUNDRY_DATA_DIR=data_dir, FOUNDRY_LOG_JSON="true",
               OTEL_EXPORTER_OTLP_ENDPOINT=collector, OTEL_SERVICE_NAME="foundry-e2e")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port), cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(GUARD):  # wait for uvicorn to say it listens (a log line on stdout)
            while b"Uvicorn running on" not in (line := await proc.stdout.readline()):
                assert line, "the gateway process exited before it listened"
                lines.append(line.decode())
        yield proc, f"http://127.0.0.1:{port}", lines
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _stream(client: httpx.AsyncClient, model: str, **headers: str) -> httpx.Response:
    response = await client.post("/v1/stream", json={"model": model, "messages": [{"role": "user", "content": "Hi"}]},
                                 headers=headers)
    assert response.status_code == 200, response.text
    events = parse_sse(response.content)
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][2]["status"] == "ok", events[-1]
    return response


def _run_span(spans: list[ReceivedSpan], trace_id: str) -> ReceivedSpan:
    [run] = [s for s in spans if s.kind == SERVER and s.trace_id == trace_id]
    return run


def _children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id]


async def test_a_gateway_process_exports_genai_spans_over_otlp_http(tmp_path) -> None:
    receiver = OtlpReceiver()
    upstream = HeaderRecorder(FaultServer({"primary": [Fault("status", status=500)],
                                           "backup": [Fault("ok", text="Hello from backup")]}))
    async with serve(receiver) as collector, serve(upstream) as upstream_url, \
            gateway_process(upstream_url, collector, str(tmp_path)) as (proc, url, lines):
        async with httpx.AsyncClient(base_url=url, timeout=GUARD) as client:
            tool = await _stream(client, "mock/tool_call")
            routed = await _stream(client, "smart")
            child = await _stream(client, "mock/simple", traceparent=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
        proc.send_signal(signal.SIGTERM)  # the shutdown exports what is still batched
        assert proc.stdout is not None
        async with asyncio.timeout(GUARD):
            lines.extend((await proc.stdout.read()).decode().splitlines())
            assert await proc.wait() in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it stopped
    spans = receiver.spans
    assert receiver.content_types == {"application/x-protobuf"}
    assert {s.service for s in spans} == {"foundry-e2e"}

    # mock/tool_call: the run span, one attempt per step, the gateway's calculator between them
    tool_trace = tool.headers["x-trace-id"]
    run = _run_span(spans, tool_trace)
    assert run.name == "chat mock/tool_call" and run.parent_span_id == ""
    assert run.attributes["gen_ai.operation.name"] == "chat" and run.attributes["gen_ai.provider.name"] == "mock"
    assert run.attributes["gen_ai.request.model"] == "mock/tool_call"
    assert run.attributes["gen_ai.usage.output_tokens"] > 0 and run.attributes["foundry.status"] == "ok"
    assert run.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert run.events[0] == "gen_ai.first_token" and run.events[-1] == "foundry.final"
    kids = _children(spans, run)
    assert sorted(s.name for s in kids) == ["chat tool_call", "chat tool_call", "execute_tool calculator"]
    [execution] = [s for s in kids if s.name == "execute_tool calculator"]
    assert execution.attributes["gen_ai.operation.name"] == "execute_tool"
    assert execution.attributes["gen_ai.tool.name"] == "calculator" and execution.attributes["gen_ai.tool.call.id"]

    # the route: the failed attempt and the fallback are siblings under the run, each sent upstream
    routed_trace = routed.headers["x-trace-id"]
    run = _run_span(spans, routed_trace)
    attempts = [s for s in _children(spans, run) if s.kind == CLIENT]
    assert [(s.name, s.attributes["foundry.attempt.outcome"]) for s in attempts] == [
        ("chat primary", "error"), ("chat backup", "ok")]
    assert attempts[0].attributes["http.response.status_code"] == 500 and attempts[0].status_code == 2  # ERROR
    assert run.attributes["foundry.route"] == "smart" and run.attributes["foundry.route.target"] == "up/backup"
    received = [tp.split("-")[1:3] for tp in upstream.traceparents if tp is not None]
    assert received == [[routed_trace, s.span_id] for s in attempts]

    # the caller's traceparent: the run span is its child, in its trace
    assert child.headers["x-trace-id"] == CALLER_TRACE
    run = _run_span(spans, CALLER_TRACE)
    assert run.parent_span_id == CALLER_SPAN

    # the trace id in every log line of each run, and in the request's line
    records = [json.loads(line) for line in lines if line.startswith("{")]
    requests = [r for r in records if r.get("event") == "request" and r.get("path") == "/v1/stream"]
    assert [r.get("trace_id") for r in requests] == [tool_trace, routed_trace, CALLER_TRACE]


@pytest.mark.bench
def test_tracing_bench_runs_off_and_on_and_the_sink_receives_the_spans(tmp_path) -> None:
    out = tmp_path / "tracing.json"
    subprocess.run([sys.executable, "bench/tracing_bench.py", "--rounds", "2", "--requests", "6", "--streams", "3",
                    "--json", str(out)], cwd=REPO, check=True, timeout=300, capture_output=True)
    results = json.loads(out.read_text())
    assert {"tracing_off", "tracing_on", "relay"} <= set(results)
    assert {"added_ttft_median_ms", "cpu_ms_per_request", "cpu_us_per_chunk"} <= set(results["tracing_on"])
    assert results["tracing_on"]["sink_received"]["exports"] > 0  # on really exported
