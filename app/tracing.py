"""OpenTelemetry traces of runs, named by the GenAI semantic conventions; off unless configured.

On when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and
`OTEL_SDK_DISABLED` is not `true`: the SDK is imported then and only then, and reads its own
variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and its argument,
`OTEL_PROPAGATORS`, the exporter's headers and timeout). Off, the gateway holds `None` where a
`Tracing` would be, and every call site is one `is None` test per request: no SDK object exists.

The spans (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/):
- one `chat {model}` span per run (kind SERVER), the child of the caller's `traceparent` when it
  sent one; its attributes and events are written from the run's `RunReport` when it ended;
- one `chat {upstream model}` span per upstream attempt (kind CLIENT), from the request to the
  attempt's first content or failure: retries, fallbacks and hedges are siblings under the run; its
  context is what the provider receives as `traceparent`;
- one `execute_tool {name}` span per gateway tool execution and one `judge {model}` span per
  `llm_judge` call (whose own attempts are its children).
Message content goes on spans only with FOUNDRY_TRACE_CONTENT=true, scrubbed of secrets.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import orjson

from app.core.messages import Message, ToolCall
from app.core.report import RunReport
from app.core.secrets import scrub

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

__all__ = ["RunTrace", "Tracing", "build_tracing", "tracing_configured"]

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_ATTEMPT_OK = frozenset({"ok"})


def tracing_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """The standard variables ask for traces: an OTLP endpoint, and the SDK not disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in _ENDPOINT_VARIABLES)


def build_tracing(*, content: bool, server_addresses: Mapping[str, str],
                  environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """The process's tracing when the environment asks for it (OTLP over HTTP/protobuf), else None."""
    if not tracing_configured(environ):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return Tracing(exporter=OTLPSpanExporter(), content=content, server_addresses=server_addresses)


class Tracing:
    """One tracer provider of the app's own (not the global one: two apps in a process, tests,
    never mix), its batch exporter, and the spans of runs, attempts, tools and judge calls."""

    def __init__(self, *, exporter: SpanExporter, content: bool = False,
                 server_addresses: Mapping[str, str] | None = None, batch: bool = True) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        from app import VERSION

        # the OpenTelemetry API modules, imported when tracing is on
        self.api, self.propagation, self.context = trace, propagate, context
        # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; TracerProvider the sampler
        # (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG)
        attributes = {"service.version": VERSION}
        if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
            attributes["service.name"] = "foundry-gateway"  # the attributes given here win over the variables
        resource = Resource.create(attributes)
        self.provider: TracerProvider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("foundry-gateway", VERSION)
        self.content = content
        self.server_addresses = dict(server_addresses or {})
        self._fields = frozenset(propagate.get_global_textmap().fields)

    # -- context in and out -------------------------------------------------------------------

    def extract(self, headers: Iterable[tuple[bytes, bytes]]) -> Context | None:
        """The caller's trace context (W3C `traceparent`/`tracestate` by default) from ASGI headers."""
        fields = self._fields
        carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers
                   if name.decode("latin-1") in fields}
        return self.propagation.extract(carrier) if carrier else None

    def attach(self, headers: Iterable[tuple[bytes, bytes]]) -> object | None:
        """Make the caller's trace context current for this request (a run started in it is its
        child); the token for `detach`, or None when the caller sent none."""
        parent = self.extract(headers)
        return self.context.attach(parent) if parent is not None else None

    def detach(self, token: object) -> None:
        self.context.detach(token)  # type: ignore[arg-type]

    def headers(self, span: Span) -> dict[str, str]:
        """The headers that carry `span`'s context to an upstream (`traceparent`, ...)."""
        carrier: dict[str, str] = {}
        self.propagation.inject(carrier, context=self.api.set_span_in_context(span))
        return carrier

    # -- spans ------------------------------------------------------------------------------

    def start_run(self, *, model: str, messages: tuple[Message, ...], temperature: float | None,
                  max_tokens: int | None, parent: Context | None) -> RunTrace:
        """The run's span, started now (the request's time): its parent is the caller's context."""
        span = self.tracer.start_span(f"chat {model}", context=parent, kind=self.api.SpanKind.SERVER,
                                      attributes=_request_attributes(model, temperature, max_tokens))
        if self.content:
            span.set_attribute("gen_ai.input.messages", _messages_json(messages))
        return RunTrace(self, span)

    @contextmanager
    def attempt(self, *, provider: str, model: str, target: str, step: int) -> Iterator[Span]:
        """One upstream attempt (CLIENT), current while it opens: its context goes upstream."""
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                                      "gen_ai.request.model": model, "foundry.attempt.target": target,
                                      "foundry.attempt.step": step}
        address = self.server_addresses.get(provider)
        if address:
            attributes["server.address"] = address
        with self.tracer.start_as_current_span(f"chat {model}", kind=self.api.SpanKind.CLIENT,
                                               attributes=attributes, record_exception=False,
                                               set_status_on_exception=False) as span:
            yield span

    def end_attempt(self, span: Span, *, outcome: str, code: str | None, status: int | None) -> None:
        span.set_attribute("foundry.attempt.outcome", outcome)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if outcome not in _ATTEMPT_OK:
            span.set_attribute("error.type", code or outcome)
            span.set_status(self.api.StatusCode.ERROR, code or outcome)

    @contextmanager
    def tool(self, call: ToolCall) -> Iterator[Span]:
        """One gateway tool execution (`execute_tool`), current while the tool runs."""
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                      "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function"}
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = scrub(orjson.dumps(call.arguments).decode())
        with self.tracer.start_as_current_span(f"execute_tool {call.name}", attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield span

    def end_tool(self, span: Span, *, outcome: str, content: str) -> None:
        span.set_attribute("foundry.tool.outcome", outcome)
        if outcome != "ok":
            span.set_attribute("error.type", outcome)
            span.set_status(self.api.StatusCode.ERROR, outcome)
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", scrub(content))

    @contextmanager
    def judge(self, model: str) -> Iterator[Span]:
        """One `llm_judge` call; its upstream attempts are its children."""
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                      "gen_ai.provider.name": model.partition("/")[0], "foundry.validator": "llm_judge"}
        with self.tracer.start_as_current_span(f"judge {model}", attributes=attributes) as span:
            yield span

    def use(self, span: Span) -> Any:
        """`span` current in a `with` block (the run's task: attempts and tools become its children)."""
        return self.api.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def shutdown(self) -> None:
        """Export what is buffered, then stop (the app's shutdown)."""
        self.provider.shutdown()


class RunTrace:
    """One run's span: started when the run is admitted, ended once with the run's report (or,
    for a run that never opened and left no report, when its task ended)."""

    __slots__ = ("_ended", "span", "trace_id", "tracing")

    def __init__(self, tracing: Tracing, span: Span) -> None:
        self.tracing = tracing
        self.span = span
        self.trace_id = format(span.get_span_context().trace_id, "032x")
        self._ended = False

    def observe(self, report: RunReport) -> None:
        """The run's observer: its GenAI attributes, its events, its status; the span ends."""
        if self._ended:
            return
        self._ended = True
        span, tracing = self.span, self.tracing
        span.set_attributes(_report_attributes(report, tracing.server_addresses.get(report.provider)))
        start_ns = int(report.started_at * 1e9)
        if report.ttft is not None:
            span.add_event("gen_ai.first_token", {"foundry.ttft_seconds": report.ttft},
                           timestamp=start_ns + int(report.ttft * 1e9))
        blocked = report.validation.get("blocked") if report.validation is not None else None
        if blocked is not None:
            span.add_event("foundry.validator.block", {"foundry.validator": blocked["validator"]})
        if tracing.content:
            message = report.final.message
            span.set_attribute("gen_ai.output.messages", _output_json(message.content, message.tool_calls))
        span.add_event("foundry.final", {"foundry.status": report.status,
                                         "foundry.stop_reason": report.stop_reason or ""})
        if report.status == "error":
            code = report.error_code or "error"
            span.set_attribute("error.type", code)
            span.set_status(tracing.api.StatusCode.ERROR, code)
        span.end(end_time=start_ns + int(report.duration * 1e9))

    def close(self, error: str | None = None) -> None:
        """The run ended without a report: `error`, the code of the HTTP error that answered it
        (no target served), or None (cancelled before its first attempt). The span ends."""
        if self._ended:
            return
        self._ended = True
        span = self.span
        span.set_attribute("foundry.status", "error" if error is not None else "cancelled")
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(self.tracing.api.StatusCode.ERROR, error)
        span.end(end_time=time.time_ns())


def _request_attributes(model: str, temperature: float | None, max_tokens: int | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    if temperature is not None:
        attributes["gen_ai.request.temperature"] = temperature
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    return attributes


def _report_attributes(report: RunReport, address: str | None) -> dict[str, Any]:
    usage = report.usage
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": report.provider,
        "gen_ai.response.model": report.served_model,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "foundry.stream_id": report.stream_id,
        "foundry.status": report.status,
        "foundry.steps": report.steps,
        "foundry.tools_run": report.tools_run,
    }
    if not usage.output_unknown:
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    if report.stop_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (report.stop_reason,)
    if report.response_id:
        attributes["gen_ai.response.id"] = report.response_id
    if address:
        attributes["server.address"] = address
    if report.owner is not None:
        attributes["foundry.key_id"] = report.owner
    if report.request_id is not None:
        attributes["foundry.request_id"] = report.request_id
    final = report.final
    if final.route is not None:
        attributes["foundry.route"] = final.route
    if final.target is not None:
        attributes["foundry.route.target"] = final.target
    return attributes


def _messages_json(messages: tuple[Message, ...]) -> str:
    """The request's messages in the GenAI conventions' shape (role and parts), scrubbed."""
    out = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"type": "text", "content": message.content})
        for call in message.tool_calls:
            parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments})
        if message.role == "tool":
            parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}]
        out.append({"role": message.role, "parts": parts})
    return scrub(orjson.dumps(out).decode())


def _output_json(content: str, tool_calls: tuple[ToolCall, ...]) -> str:
    parts: list[dict[str, Any]] = [{"type": "text", "content": content}] if content else []
    parts.extend({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments} for c in tool_calls)
    return scrub(orjson.dumps([{"role": "assistant", "parts": parts}]).decode())
