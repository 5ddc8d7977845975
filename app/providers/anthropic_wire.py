"""Anthropic Messages on the gateway's own client (app/providers/upstream.py): the request bytes
from the gateway's converters (app/providers/anthropic_convert.py), an error answer mapped
through app/providers/errors.py, and `count_tokens` on the same session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.core import safejson
from app.core.errors import RequestError, UpstreamError
from app.core.messages import AdapterError
from app.providers.anthropic import counted_fields, read_count
from app.providers.anthropic_convert import build_anthropic_request
from app.providers.base import ProviderRequest, mid_stream_errors
from app.providers.config import ProviderConfig
from app.providers.descriptor import UpstreamRequest
from app.providers.errors import status_error
from app.providers.openai_wire import with_passthrough
from app.providers.passthrough import passthrough_for
from app.providers.upstream import HttpAdapter, bounded_read

__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION", "AnthropicHttpAdapter", "error_answer", "upstream_request"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2026-10-21"
"""The API version the pinned SDK sends (`anthropic._constants`' public value); a same-wire client's own
`anthropic-version` header wins."""


def _headers(config: ProviderConfig) -> dict[str, str]:
    return {"content-type": "application/json", "accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION,
            "authorization": f"Bearer {config.secret('anthropic_api_key') or ''}"}


def _url(config: ProviderConfig, path: str) -> str:
    return f"{(config.secret('anthropic_base_url') or ANTHROPIC_BASE_URL).rstrip('/')}{path}"


def upstream_request(request: ProviderRequest, config: ProviderConfig) -> UpstreamRequest:
    """A streamed Messages request: the client's own on a same-wire route, else the canonical one."""
    passthrough = passthrough_for(request.passthrough, "anthropic-messages")
    if passthrough is not None:
        body = passthrough.wire_body(request.model, request.options)
    else:
        body = build_anthropic_request(request, provider="anthropic")
        body["stream"] = True
    headers = _headers(config)
    url = with_passthrough(_url(config, "/v1/messages"), headers, passthrough)
    return UpstreamRequest(url=url, body=orjson.dumps(body), headers=headers)


def error_answer(status: int, headers: Mapping[str, str], body: bytes, provider: str) -> UpstreamError:
    """`{"type": "error", "error": {"type", "message"}}` with its `request-id` header."""
    error: Any = None
    try:
        data = safejson.loads(body)
        error = data.get("error") if isinstance(data, dict) else None
    except ValueError:
        pass
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = body[:500].decode("utf-8", "replace") or f"HTTP {status}"
    kind = error.get("type") if isinstance(error, dict) else None
    return status_error(status, message, provider=provider, retry_after=headers.get("retry-after"),
                        upstream_type=kind if isinstance(kind, str) else None, request_id=headers.get("request-id"))


class AnthropicHttpAdapter(HttpAdapter):
    """Messages on the gateway's client, and `count_tokens` (`POST /v1/messages/count_tokens`)."""

    wire = "anthropic-messages"

    async def count_tokens(self, request: ProviderRequest) -> int:
        try:
            body = counted_fields(build_anthropic_request(request, provider=self.name))
        except AdapterError as exc:
            raise RequestError(f"{self.name}: {exc}", provider=self.name) from None
        headers = _headers(self._config)
        headers["accept"] = "application/json"
        sent = UpstreamRequest(url=_url(self._config, "/v1/messages/count_tokens"), body=orjson.dumps(body),
                               headers=headers)
        response = await self.send(sent)
        with mid_stream_errors(self.name):
            content = await bounded_read(response, self._limits.max_body_bytes)
        if response.status >= 300:
            raise error_answer(response.status, response.headers, content, self.name)
        return read_count(self.name, response.headers.get("content-type", ""), content)
