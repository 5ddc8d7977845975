"""The cache key: a digest of everything that decides a run's answer, scoped to whose it is.

What goes in: the resolved targets (a route's, in order), the canonical messages (parts
included), the caller's tools, every model option (tool choice, temperature, max tokens,
options, stop, parallel calls, output schema, prompt-cache hints), the validators (the
request's, the key's and the operator's), the chunking, and a facade's own request as a
same-wire provider would be sent it (less how it is streamed). A change to any of
them is another key; the scope (the caller's key id, or the operator's shared scope name) comes
first, so that no answer crosses keys unless the operator says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from pydantic import BaseModel

from app.providers.base import ProviderRequest
from app.validation import ValidatorSpec

__all__ = ["cache_key"]

VERSION = "1"
"""Bumped when what a key covers changes: old entries then simply miss."""


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(type(value).__name__)


_STREAMING = frozenset({"stream", "stream_options"})
"""How a facade's answer is delivered, not what it says: not in the key."""


def _passthrough(request: ProviderRequest) -> dict[str, Any] | None:
    """A facade's own request, which a same-wire provider is sent as written (fields the canonical
    request does not carry can change the answer)."""
    passthrough = request.passthrough
    if passthrough is None:
        return None
    return {"wire": passthrough.wire, "body": {k: v for k, v in passthrough.body.items() if k not in _STREAMING},
            "headers": dict(passthrough.headers), "query": dict(passthrough.query)}


def cache_key(*, scope: str, targets: Iterable[str], request: ProviderRequest,
              validators: Sequence[ValidatorSpec], chunking: str) -> str:
    """The hex digest that names a cached answer (scope first: another scope never meets it)."""
    document = {
        "v": VERSION, "targets": list(targets),
        "messages": list(request.messages), "tools": list(request.tools), "tool_choice": request.tool_choice,
        "temperature": request.temperature, "max_tokens": request.max_tokens, "options": request.options,
        "stop": list(request.stop), "parallel_tool_calls": request.parallel_tool_calls,
        "output_schema": request.output_schema, "cache_control": request.cache_control,
        "validators": list(validators), "chunking": chunking, "passthrough": _passthrough(request),
    }
    body = orjson.dumps(document, default=_json, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(scope.encode() + b"\0" + body).hexdigest()
