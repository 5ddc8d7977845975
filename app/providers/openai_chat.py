"""OpenAI Chat Completions (and every compatible server): request mapping, errors, adapter.

The pure converters (reference/foundry-adapters.md) live in `openai_chat_convert.py` and the
stream normalizer in `openai_chat_stream.py`; this module maps a `ProviderRequest` to the wire,
and holds the registry builder: `openai` and every compatible server on the gateway's own client
(app/providers/upstream.py; the request on the wire: app/providers/openai_wire.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.messages import AdapterError
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.config import ProviderConfig
from app.providers.openai_chat_convert import (
    json_schema_format,
    messages_to_openai,
    normalize_tool_calls,
    openai_to_messages,
    tool_choice_to_openai,
    tool_specs_to_openai,
)
from app.providers.openai_wire import OPENAI_BASE_URL, OpenAITarget, chat_request

__all__ = [
    "build_openai",
    "messages_to_openai",
    "normalize_tool_calls",
    "openai_to_messages",
    "stream_params",
    "tool_choice_to_openai",
    "tool_specs_to_openai",
]

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


# -- configuration ------------------------------------------------------------------------


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
