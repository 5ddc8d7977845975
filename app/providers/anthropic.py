"""Anthropic Messages: the converters' home, `count_tokens`' body and answer, the registry builder.

The pure request/response converters live in `anthropic_convert.py` (re-exported here; their
docstring lists the mapping decisions: system lifting, tool-result turns, the thinking round
trip, the `max_tokens` default, why `temperature` is not sent, `provider_options`), and the stream
normalizer in `anthropic_stream.py`; the request on the gateway's own client (its error answers,
`count_tokens`) in `anthropic_wire.py`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from app.core import safejson
from app.core.errors import (
    UpstreamError,
)
from app.core.patches import token_count
from app.providers.anthropic_convert import (
    DEFAULT_MAX_TOKENS,
    build_anthropic_request,
    messages_to_anthropic,
    tool_choice_to_anthropic,
    tool_specs_to_anthropic,
)
from app.providers.base import ProviderAdapter
from app.providers.config import ProviderConfig

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "build_anthropic",
    "build_anthropic_request",
    "messages_to_anthropic",
    "tool_choice_to_anthropic",
    "tool_specs_to_anthropic",
]

_COUNTED = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
                      "cache_control"})
"""The fields of a Messages body that `count_tokens` takes."""


def counted_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Messages body that `count_tokens` takes."""
    return {key: value for key, value in body.items() if key in _COUNTED}


def read_count(provider: str, content_type: str, content: bytes) -> int:
    """The count from the answer's bytes, checked. An answer that is not a JSON object with a checked count (an event stream,
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
