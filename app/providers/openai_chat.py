"""OpenAI Chat Completions (and every compatible server): request mapping, errors, adapter.

The pure converters (reference/foundry-adapters.md) live in `openai_chat_convert.py` and the
stream normalizer in `openai_chat_stream.py`; this module maps a `ProviderRequest` to the wire,
maps SDK and transport errors to the gateway's hierarchy (once, in `map_upstream_error`), and
holds the adapter and the registry builder. The SDK client is injected; the body is read as raw
bytes through the SDK's `client.post` (see `RAW_STREAM`) and parsed once by `SSEPatchStream`
(DESIGN.md section 4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx2
import openai
from pydantic import ValidationError

from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamError,
)
from app.core.messages import AdapterError, Message, ToolSpec
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, ToolChoice, raw_stream, sse_body
from app.providers.config import DEFAULT_LIMITS, ProviderConfig, ReadLimits
from app.providers.errors import CONNECTION_ERRORS, status_error, transport_error
from app.providers.http import openai_http_client, upstream_timeout
from app.providers.openai_chat_convert import (
    json_schema_format,
    messages_to_openai,
    normalize_tool_calls,
    openai_to_messages,
    plain,
    tool_choice_to_openai,
    tool_specs_to_openai,
)
from app.providers.openai_chat_stream import ChatChunkNormalizer
from app.providers.openai_wire import OPENAI_BASE_URL, OpenAITarget, chat_request
from app.providers.passthrough import Wire, passthrough_for

__all__ = [
    "OpenAIAdapter",
    "build_openai",
    "make_client",
    "map_upstream_error",
    "messages_to_openai",
    "normalize_tool_calls",
    "openai_to_messages",
    "stream_params",
    "tool_choice_to_openai",
    "tool_specs_to_openai",
    "upstream_errors",
]

_NO_KEY = "unused"
"""Sent to compatible servers that need no key: the SDK insists on one, they ignore it."""

_RESERVED_OPTIONS = frozenset({"messages", "model", "stream", "stream_options", "tools"})
"""Wire fields the gateway owns; `provider_options` may not set them."""


# -- request mapping ------------------------------------------------------------------------


def stream_params(
    request: ProviderRequest, *, include_usage: bool = True, max_tokens_field: str = "max_completion_tokens"
) -> dict[str, Any]:
    """`ProviderRequest` -> the JSON body of a streamed chat completion.

    `request.options` (provider_options) go into the body as given, after the gateway's own
    fields: they may replace `temperature`, `tool_choice` or the token limit (a None value drops
    the field, e.g. `{"temperature": null}` for models that refuse one), never the reserved ones.
    """
    params: dict[str, Any] = {
        "model": request.model,
        "messages": messages_to_openai(request.messages),
        "stream": True,
    }
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if include_usage:
        params["stream_options"] = {"include_usage": True}
    if request.tools:
        params["tools"] = tool_specs_to_openai(request.tools)
    choice = tool_choice_to_openai(request.tool_choice, request.tools)
    if choice is not None:
        params["tool_choice"] = choice
    if request.max_tokens is not None:
        params[max_tokens_field] = request.max_tokens
    if request.stop:
        params["stop"] = list(request.stop)
    if request.output_schema is not None:
        params["response_format"] = {"type": "json_schema", "json_schema": json_schema_format(request.output_schema)}
    if request.parallel_tool_calls is not None and request.tools:  # OpenAI refuses it without tools
        params["parallel_tool_calls"] = request.parallel_tool_calls
    for key, value in request.options.items():
        if key in _RESERVED_OPTIONS:
            raise AdapterError(f"provider_options may not set {key!r}; it is the gateway's")
        params.pop(key, None)
        if value is not None:
            params[key] = value
    return params


def first_assistant_message(response: Any) -> Message:
    """A non-streaming chat completion -> its first assistant message, tool calls normalized.

    A refusal (`message.refusal`) becomes the content, as in the stream (openai_chat_stream.py,
    decision 2).
    """
    data = plain(response)
    if not isinstance(data, Mapping):
        raise AdapterError("malformed response: not an object")
    choices = data.get("choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise AdapterError("malformed response: no choices")
    for choice in choices:
        choice = plain(choice)
        message = plain(choice.get("message")) if isinstance(choice, Mapping) else None
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            break
    else:
        raise AdapterError("malformed response: no assistant message")
    content = message.get("content")
    if content is None:
        content = message.get("refusal") or ""
    if not isinstance(content, str):
        raise AdapterError("malformed response: message content is not a string")
    tool_calls = normalize_tool_calls(message.get("tool_calls"))
    try:
        return Message(role="assistant", content=content, tool_calls=tool_calls)
    except ValidationError as exc:
        raise AdapterError(f"malformed response: {exc.errors()[0]['msg']}") from None


# -- errors -------------------------------------------------------------------------------


def map_upstream_error(exc: Exception, provider: str) -> GatewayError:
    """SDK or transport failure before the body -> the gateway's error (DESIGN.md section 1)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        code = exc.code if isinstance(exc.code, (str, int)) else None
        return status_error(exc.status_code, _upstream_message(exc), provider=provider, upstream_code=code,
                            retry_after=exc.response.headers.get("retry-after"))
    if isinstance(exc, CONNECTION_ERRORS):
        return transport_error(exc, provider)
    return UpstreamError(f"{provider}: {type(exc).__name__}: {exc}", provider=provider)


def _upstream_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str) and body["message"]:
        return body["message"]
    if isinstance(body, str) and body:
        return body[:500]
    return f"HTTP {exc.status_code}"


_UPSTREAM_ERRORS: tuple[type[Exception], ...] = (openai.OpenAIError, *CONNECTION_ERRORS)


@contextlib.contextmanager
def upstream_errors(provider: str) -> Iterator[None]:
    """Raise every SDK/transport failure of the enclosed call as a GatewayError."""
    try:
        yield
    except _UPSTREAM_ERRORS as exc:
        raise map_upstream_error(exc, provider) from exc


# -- the adapter --------------------------------------------------------------------------


class OpenAIAdapter(ProviderAdapter):
    """Chat Completions through an injected `AsyncOpenAI` client.

    `generate()` keeps the protocol's signature but not the base's streaming body: the reference
    adapter (../shared/reference/foundry-adapters.md) is a non-streaming `chat.completions.create`
    that works with a fake client exposing only that, and reports a malformed response as
    `AdapterError`. Every other adapter answers `generate()` through its stream (base.py).
    """

    wire: Wire = "openai-chat"
    """The drop-in facade of this wire passes its clients' requests through (DESIGN.md section 10)."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        name: str = "openai",
        include_usage: bool = True,
        max_tokens_field: str = "max_completion_tokens",
        owns_client: bool = False,
        limits: ReadLimits = DEFAULT_LIMITS,
    ) -> None:
        self.name = name
        self._client = client
        self._include_usage = include_usage
        self._max_tokens_field = max_tokens_field
        self._owns_client = owns_client
        self._limits = limits

    def ready(self) -> bool:
        return True  # built only when credentials are configured (build_openai)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def generate(
        self,
        messages: Sequence[Message],
        /,
        *,
        model: str,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        **options: Any,
    ) -> Message:
        """One non-streaming completion -> the first assistant message (the reference adapter)."""
        if "messages" in options:
            raise AdapterError("generate() takes the messages as its first argument; they cannot be overridden")
        if "stream" in options:
            raise AdapterError("generate() does not stream (stream is not the caller's); use open_stream()")
        if not model:
            raise AdapterError("model is required")
        params: dict[str, Any] = {**options, "model": model, "temperature": temperature,
                                  "messages": messages_to_openai(messages)}
        if tools:
            params["tools"] = tool_specs_to_openai(tools)
        if tool_choice is not None:
            choice = tool_choice_to_openai(tool_choice, tools)
            if choice is not None:
                params["tool_choice"] = choice
        if max_tokens is not None:
            params[self._max_tokens_field] = max_tokens
        with upstream_errors(self.name):
            response = await self._client.chat.completions.create(**params)
        return first_assistant_message(response)

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        """Send the request; raise GatewayError for anything known before the body starts."""
        passthrough = passthrough_for(request.passthrough, "openai-chat")
        if passthrough is not None:  # the client's own chat request (DESIGN.md section 10)
            params = passthrough.wire_body(request.model, request.options)
            if self._include_usage:  # the gateway counts usage whatever the client asked
                params["stream_options"] = {**(params.get("stream_options") or {}), "include_usage": True}
        else:
            try:
                params = stream_params(request, include_usage=self._include_usage,
                                       max_tokens_field=self._max_tokens_field)
            except AdapterError as exc:
                raise RequestError(f"{self.name}: {exc}", provider=self.name, field=exc.field) from None
        # Through the SDK's documented `client.post(..., cast_to=httpx2.Response)` with the
        # raw-stream header rather than `chat.completions.with_streaming_response`: the same
        # request without the typed-params transform (its CPU per request: docs/performance.md).
        with upstream_errors(self.name):
            http = await self._client.post("/chat/completions", body=params, cast_to=httpx2.Response,
                                           options=raw_stream(request.trace_headers, passthrough))
        return await sse_body(http, ChatChunkNormalizer(provider=self.name), provider=self.name,
                              limits=self._limits, relay=passthrough is not None and passthrough.relay)


# -- configuration ------------------------------------------------------------------------


def make_client(*, api_key: str, base_url: str, config: ProviderConfig) -> openai.AsyncOpenAI:
    """An SDK client on the SDK's aiohttp client (app/providers/http.py) with the gateway's
    timeouts and retry budget (retries happen only before the response starts, so they never
    duplicate output)."""
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        max_retries=config.max_retries,
        timeout=upstream_timeout(connect=config.connect_timeout, read=config.read_timeout),
        http_client=openai_http_client(connect_timeout=config.connect_timeout, read_timeout=config.read_timeout,
                                       max_body_bytes=config.limits.max_body_bytes),
    )


def build_openai(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`openai` and every compatible server (`Settings.providers`) on the gateway's own client
    (app/providers/upstream.py; an injected `aiohttp.ClientSession` in `clients[name]` is used,
    never closed by the adapter).

    A provider whose key is not configured is not served; a compatible provider declared without
    `api_key_env` needs none. Keys and base URLs are always explicit: OPENAI_API_KEY never goes
    to a third-party server.
    """
    adapters: dict[str, ProviderAdapter] = {}
    client = clients.get("openai")
    key = config.secret("openai_api_key")
    if key:
        target = OpenAITarget(name="openai", base_url=config.secret("openai_base_url") or OPENAI_BASE_URL, key=key)
        adapters["openai"] = _http_adapter(target, config, client)
    for provider in config.compatible:
        # Compatible servers know max_tokens; max_completion_tokens is OpenAI's newer name.
        client = clients.get(provider.name)
        key = provider.api_key() or None
        if provider.api_key_env and not key:
            continue
        target = OpenAITarget(name=provider.name, base_url=provider.base_url, key=key,
                              include_usage=provider.include_usage, max_tokens_field="max_tokens")
        adapters[provider.name] = _http_adapter(target, config, client)
    return adapters


def _http_adapter(target: OpenAITarget, config: ProviderConfig, session: Any) -> ProviderAdapter:
    from app.providers.openai_spec import OPENAI
    from app.providers.upstream import HttpAdapter

    return HttpAdapter(OPENAI, config, name=target.name, session=session,
                       build=lambda request: chat_request(request, target))
