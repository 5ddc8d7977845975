"""Loopback fakes for the tracing tests: an OTLP/HTTP receiver that decodes the protobuf export with
`opentelemetry-proto`, and a wrapper that records the `traceparent` each upstream request carried."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support import read_asgi_request

__all__ = ["HeaderRecorder", "OtlpReceiver", "ReceivedSpan"]


class HeaderRecorder:
    """An ASGI wrapper that keeps each HTTP request's `traceparent` before the wrapped app answers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.traceparents: list[str | None] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            value = dict(scope["headers"]).get(b"traceparent")
            self.traceparents.append(value.decode() if value is not None else None)
        await self.app(scope, receive, send)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind is not None else None


@dataclass(slots=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    events: list[str]
    status_code: int
    service: str
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpReceiver:
    """POST /v1/traces (OTLP over HTTP, protobuf): every span received, decoded."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.content_types: set[str] = set()
        self.arrived = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_asgi_request(scope, receive, send)
        if body is None:
            return
        self.content_types.add(dict(scope["headers"]).get(b"content-type", b"").decode())
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        events=[e.name for e in span.events], status_code=span.status.code,
                        service=str(resource.get("service.name")), resource=resource))
        self.arrived.set()
        answer = ExportTraceServiceResponse().SerializeToString()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-protobuf"), (b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})
