"""OpenAI's wires (Chat Completions, every compatible server, Responses) on the gateway's own
client (app/providers/upstream.py): the request bytes from the gateway's converters, and an error
answer mapped through app/providers/errors.py. The SDK stays for the reference `generate()`
(app/providers/openai_chat.py) and for injected SDK clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson

from app.core import safejson
from app.core.errors import UpstreamError
from app.core.messages import AdapterError
from app.providers.base import ProviderRequest
from app.providers.descriptor import UpstreamRequest
from app.providers.errors import status_error
from app.providers.passthrough import Passthrough, passthrough_for

__all__ = ["OPENAI_BASE_URL", "OpenAITarget", "chat_request", "error_answer", "responses_upstream", "with_passthrough"]

OPENAI_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAITarget:
    """One OpenAI-wire upstream: `openai`, or a compatible server of FOUNDRY_PROVIDERS."""

    name: str
    base_url: str
    key: str | None
    """None: a server that needs none (no Authorization header is sent)."""
    include_usage: bool = True
    max_tokens_field: str = "max_completion_tokens"

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return headers


def with_passthrough(url: str, headers: dict[str, str], passthrough: Passthrough | None) -> str:
    """A same-wire request's namespace headers and query string added; the URL to send."""
    if passthrough is None:
        return url
    headers.update(passthrough.headers)
    return f"{url}?{urlencode(dict(passthrough.query))}" if passthrough.query else url


def chat_request(request: ProviderRequest, target: OpenAITarget) -> UpstreamRequest:
    """A streamed chat completion: the client's own request on a same-wire route (usage always
    asked for when the target sends it), else the canonical one (`stream_params`)."""
    from app.providers.openai_chat import stream_params

    passthrough = passthrough_for(request.passthrough, "openai-chat")
    if passthrough is not None:
        body = passthrough.wire_body(request.model, request.options)
        if target.include_usage:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    else:
        body = stream_params(request, include_usage=target.include_usage, max_tokens_field=target.max_tokens_field)
    headers = target.headers()
    url = with_passthrough(f"{target.base_url.rstrip('/')}/chat/completions", headers, passthrough)
    return UpstreamRequest(url=url, body=orjson.dumps(body), headers=headers)


def responses_upstream(request: ProviderRequest, target: OpenAITarget) -> UpstreamRequest:
    """A streamed Responses request: the client's own on a same-wire route, else the canonical one."""
    from app.providers.openai_responses import responses_request

    passthrough = passthrough_for(request.passthrough, "openai-responses")
    body = passthrough.wire_body(request.model, request.options) if passthrough is not None \
        else responses_request(request, provider=target.name)
    headers = target.headers()
    url = with_passthrough(f"{target.base_url.rstrip('/')}/responses", headers, passthrough)
    return UpstreamRequest(url=url, body=orjson.dumps(body), headers=headers)


def error_answer(status: int, headers: Mapping[str, str], body: bytes, provider: str) -> UpstreamError:
    """An error answer: `{"error": {"message", "type", "code"}}` (the SDK's reading of it: the
    message, else the body's start, else the status)."""
    error: Any = None
    text = body.decode("utf-8", "replace")
    try:
        data = safejson.loads(body)
        error = data.get("error", data) if isinstance(data, dict) else None
        text = ""  # JSON without a message: the status says it (as the SDK reads it)
    except (orjson.JSONDecodeError, AdapterError, ValueError):
        pass
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = text[:500] or f"HTTP {status}"
    code = error.get("code") if isinstance(error, dict) else None
    return status_error(status, message, provider=provider, retry_after=headers.get("retry-after"),
                        upstream_code=code if isinstance(code, (str, int)) else None)
