"""What each drop-in facade does with each request field, per target provider, derived from the
code that decides: the facades' request models and their forwarded and refused lists, the default
option allow-lists (app/providers/options.py) and the same-wire rule (app/api/compat/relay.py).
The docs' tables are rendered from here (scripts/gen_dropin_tables.py; a test fails on drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from app.api.compat import anthropic_request, openai_schema, responses_schema
from app.api.compat.common import GatewayExtras
from app.providers.options import DEFAULT_ALLOWED
from app.providers.passthrough import Wire

__all__ = ["FACADES", "TARGETS", "Facade", "fate"]


@dataclass(frozen=True, slots=True)
class Facade:
    path: str
    model: type[BaseModel]
    wire: Wire
    forwarded: Mapping[str, str]
    """Request field -> the provider option it is carried as, on a translated route."""
    refused: frozenset[str]
    """Fields refused (400 naming them) on a translated route unless left at their default."""


FACADES = (
    Facade("/v1/chat/completions", openai_schema.ChatCompletionRequest, "openai-chat",
           {name: name for name in openai_schema.FORWARDED}, frozenset({*openai_schema.REFUSED, "n", "modalities"})),
    Facade("/v1/messages", anthropic_request.MessagesRequest, "anthropic-messages",
           {name: name for name in anthropic_request.FORWARDED}, frozenset()),
    Facade("/v1/responses", responses_schema.ResponsesRequest, "openai-responses",
           responses_schema.FORWARDED, frozenset(responses_schema.REFUSED)),
)
TARGETS: dict[str, Wire | None] = {"openai": "openai-chat", "anthropic": "anthropic-messages",
                                   "openai-responses": "openai-responses", "gemini": None}
"""Providers by the wire they speak (every OpenAI-compatible server speaks `openai-chat`)."""


def fate(facade: Facade, field: str | None, target: str) -> str:
    """`passthrough`, `translated`, `carried`, `refused` or `gateway` for one field (None: a
    field the facade does not know) sent to one target provider."""
    if field in GatewayExtras.model_fields:
        return "gateway"
    if TARGETS[target] == facade.wire:
        return "passthrough"
    if field is None or field in facade.refused:
        return "refused"
    option = facade.forwarded.get(field)
    if option is not None:
        return "carried" if option in DEFAULT_ALLOWED[target] else "refused"
    return "translated"
