"""Claude on Bedrock through `InvokeModelWithResponseStream`: Anthropic's own events in AWS frames.

https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages.html:
the body is a Messages request without `model` and `stream`, with `anthropic_version:
bedrock-2023-05-31`; the answer is an event stream whose `chunk` frames carry `{"bytes": base64}`,
each an Anthropic Messages event. `InvokeStreamDecoder` turns the frames into those events as
`SSEEvent`s, so the Anthropic normalizer reads them unchanged and a Messages facade relays them
as the SSE frames its clients expect (`encode`). An exception frame becomes the Anthropic `error`
event of the same class (throttling a `rate_limit_error`, 429; unavailable an `overloaded_error`),
so it ends the stream as Anthropic's own would.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import orjson

from app.core import safejson
from app.providers.config import DEFAULT_LIMITS, ReadLimits
from app.providers.eventstream import EventFrame, EventStreamDecoder, EventStreamError
from app.providers.passthrough import relay_frame
from app.providers.sse import SSEEvent

__all__ = ["BEDROCK_ANTHROPIC_VERSION", "InvokeStreamDecoder", "invoke_body"]

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"

_ANTHROPIC_KINDS = {
    "throttlingException": "rate_limit_error",
    "serviceQuotaExceededException": "rate_limit_error",
    "validationException": "invalid_request_error",
    "serviceUnavailableException": "overloaded_error",
    "modelNotReadyException": "overloaded_error",
    "modelTimeoutException": "timeout_error",
    "internalServerException": "api_error",
    "modelStreamErrorException": "api_error",
}


def invoke_body(body: Mapping[str, Any], version: str = BEDROCK_ANTHROPIC_VERSION) -> dict[str, Any]:
    """A Messages body as Bedrock (or Vertex AI) takes it: the model in the URL, no `stream` field,
    the platform's `anthropic_version` unless the body names one."""
    out = {key: value for key, value in body.items() if key not in ("model", "stream")}
    out.setdefault("anthropic_version", version)
    return out


class InvokeStreamDecoder:
    """Event-stream frames -> the Anthropic events they carry (a FrameDecoder of SSEEvent)."""

    __slots__ = ("_frames",)

    def __init__(self, limits: ReadLimits = DEFAULT_LIMITS) -> None:
        self._frames = EventStreamDecoder.bounded(limits)

    @classmethod
    def bounded(cls, limits: ReadLimits) -> InvokeStreamDecoder:
        return cls(limits)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return [_event(frame) for frame in self._frames.feed(chunk)]

    def flush(self) -> list[SSEEvent]:
        return [_event(frame) for frame in self._frames.flush()]

    def encode(self, event: SSEEvent) -> bytes:
        return relay_frame(event)


def _event(frame: EventFrame) -> SSEEvent:
    if frame.message_type != "event":
        kind = frame.exception_type or frame.error_code or "exception"
        message = frame.error_message or ""
        try:
            data = safejson.loads(frame.payload) if frame.payload else {}
            message = str(data.get("message") or message) if isinstance(data, Mapping) else message
        except orjson.JSONDecodeError:
            pass
        error = {"type": "error", "error": {"type": _ANTHROPIC_KINDS.get(kind, "api_error"),
                                           "message": f"{kind}: {message or 'exception in stream'}"}}
        return SSEEvent("error", orjson.dumps(error).decode())
    try:
        outer = safejson.loads(frame.payload)
        inner = base64.b64decode(outer["bytes"], validate=True).decode()
        kind = safejson.loads(inner)["type"]
    except (orjson.JSONDecodeError, binascii.Error, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise EventStreamError(f"a chunk frame without an Anthropic event ({type(exc).__name__})") from None
    return SSEEvent(str(kind), inner)
