"""Anthropic Messages: the adapter, error mapping and the registry builder.

The pure request/response converters live in `anthropic_convert.py` (re-exported here; their
docstring lists the mapping decisions: system lifting, tool-result turns, the thinking round
trip, the `max_tokens` default, why `temperature` is not sent, `provider_options`), and the stream
normalizer in `anthropic_stream.py`. The SDK client is injected; the stream body is read as raw
bytes through the SDK's `client.post` (see `RAW_STREAM`) and parsed once by `SSEPatchStream`
(DESIGN.md section 4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import anthropic
import httpx2

from app.core import safejson
from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamError,
)
from app.core.messages import AdapterError
from app.core.patches import token_count
from app.providers.anthropic_convert import (
    DEFAULT_MAX_TOKENS,
    build_anthropic_request,
    messages_to_anthropic,
    tool_choice_to_anthropic,
    tool_specs_to_anthropic,
)
from app.providers.anthropic_stream import AnthropicNormalizer
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, raw_stream, sse_body
from app.providers.config import DEFAULT_LIMITS, ProviderConfig, ReadLimits
from app.providers.errors import CONNECTION_ERRORS, status_error, transport_error
from app.providers.passthrough import Wire, passthrough_for

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicAdapter",
    "anthropic_errors",
    "build_anthropic",
    "build_anthropic_request",
    "messages_to_anthropic",
    "tool_choice_to_anthropic",
    "tool_specs_to_anthropic",
]


# -- errors: SDK and transport -> GatewayError, in one place ----------------------------------


@contextlib.contextmanager
def anthropic_errors(provider: str = "anthropic") -> Iterator[None]:
    """Map the SDK's errors before the body (DESIGN.md section 1): bad request 400, model 404,
    rate limit 429 with Retry-After, credentials and overload and 5xx 502, timeouts 504."""
    try:
        yield
    except GatewayError:
        raise
    except ValueError as exc:  # the SDK refusing a call, e.g. a non-streaming max_tokens too large
        raise RequestError(f"{provider}: {exc}", code="invalid_request", provider=provider) from exc
    except anthropic.APIStatusError as exc:
        raise _status_error(exc, provider) from exc
    except CONNECTION_ERRORS as exc:  # the SDK's APIConnectionError / APITimeoutError, or the transport's
        raise transport_error(exc, provider) from exc
    except anthropic.AnthropicError as exc:
        raise UpstreamError(f"{provider}: {type(exc).__name__}: {exc}", provider=provider) from exc


def _status_error(exc: anthropic.APIStatusError, provider: str) -> UpstreamError:
    return status_error(exc.status_code, exc.api_message or exc.message, provider=provider,
                        retry_after=exc.response.headers.get("retry-after"), upstream_type=exc.type,
                        request_id=exc.request_id)


_COUNTED = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
                      "cache_control"})
"""The fields of a Messages body that `count_tokens` takes."""


def counted_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Messages body that `count_tokens` takes."""
    return {key: value for key, value in body.items() if key in _COUNTED}


def read_count(provider: str, content_type: str, content: bytes) -> int:
    """The count from the answer's bytes: read here, not by the SDK, whose models take any
    value as it comes. An answer that is not a JSON object with a checked count (an event stream,
    a body cut short, `-1`, `"12"`) is the upstream's fault: `upstream_protocol_error`, a 502."""
    data: Any = None
    if content_type.split(";")[0].strip() == "application/json":
        with contextlib.suppress(ValueError):
            data = safejson.loads(content)
    count = token_count(data.get("input_tokens"), "input_tokens", provider=provider) \
        if isinstance(data, dict) else None
    if count is None:
        raise UpstreamError(f"{provider}: count_tokens answered no count: {content[:200]!r}",
                            code="upstream_protocol_error", provider=provider)
    return count


# -- the adapter ------------------------------------------------------------------------------


class AnthropicAdapter(ProviderAdapter):
    """Messages API through an injected `AsyncAnthropic`; streams are read as raw bytes."""

    wire: Wire = "anthropic-messages"
    """The drop-in facade of this wire passes its clients' requests through (DESIGN.md section 10)."""

    def __init__(self, client: anthropic.AsyncAnthropic, *, name: str = "anthropic", owns_client: bool = False,
                 limits: ReadLimits = DEFAULT_LIMITS) -> None:
        self.name = name
        self._client = client
        self._owns_client = owns_client
        self._limits = limits

    def ready(self) -> bool:
        return True  # built only when a key or a client is configured (build_anthropic)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def count_tokens(self, request: ProviderRequest) -> int:
        """The request's input tokens as Anthropic counts them (`POST /v1/messages/count_tokens`,
        the SDK's `messages.count_tokens`): the same body as a run, less what counting takes not."""
        try:
            body = build_anthropic_request(request, provider=self.name)
        except AdapterError as exc:
            raise RequestError(f"{self.name}: {exc}", provider=self.name) from None
        params = counted_fields(body)
        with anthropic_errors(self.name):
            raw = await self._client.messages.with_raw_response.count_tokens(**params)
            content = raw.http_response.content  # read already, bounded (app/providers/http.py)
        return read_count(self.name, raw.http_response.headers.get("content-type", ""), content)

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        """Send the request; raise GatewayError for anything known before the body starts.

        Through the SDK (auth, base URL, retries before the response, typed errors) by its
        documented `client.post(..., cast_to=httpx2.Response)` with the raw-stream header, as
        openai_chat does: the same request without the typed-params transform, the body unread.
        """
        passthrough = passthrough_for(request.passthrough, "anthropic-messages")
        if passthrough is not None:  # the client's own Messages request (DESIGN.md section 10)
            body = passthrough.wire_body(request.model, request.options)
        else:
            try:
                body = build_anthropic_request(request, provider=self.name)
            except AdapterError as exc:
                raise RequestError(f"{self.name}: {exc}", provider=self.name, field=exc.field) from None
            body["stream"] = True
        with anthropic_errors(self.name):
            http = await self._client.post("/v1/messages", body=body, cast_to=httpx2.Response,
                                           options=raw_stream(request.trace_headers, passthrough))
        return await sse_body(http, AnthropicNormalizer(), provider=self.name, limits=self._limits,
                              relay=passthrough is not None and passthrough.relay)


# -- registry builder -------------------------------------------------------------------------


def build_anthropic(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`anthropic` from ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL on the gateway's own client (an
    injected `aiohttp.ClientSession` in clients["anthropic"] is used, never closed by the adapter)."""
    client = clients.get("anthropic")
    key = config.secret("anthropic_api_key")
    if key is None:
        return {}
    from app.providers.anthropic_spec import ANTHROPIC
    from app.providers.anthropic_wire import AnthropicHttpAdapter

    return {"anthropic": AnthropicHttpAdapter(ANTHROPIC, config, session=client)}
