"""What each drop-in facade does with each request field, per target provider, derived from the
code that decides: the facades' request models and their forwarded and refused lists, the default
option allow-lists (app/providers/options.py) and the same-wire rule (app/api/compat/relay.py).
The docs' tables are rendered from here (scripts/gen_dropin_tables.py; a test fails on drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from app.api.compat import anthropic_request, openai_schema, responses_schema
from app.api.compat.common import GatewayExtras
from app.core.errors import GatewayError
from app.pipeline import Gateway
from app.providers.options import DEFAULT_ALLOWED
from app.providers.passthrough import Wire
from app.routing.config import flatten_targets

__all__ = ["FACADES", "TARGETS", "Facade", "fate", "takes_option"]


@dataclass(frozen=True, slots=True)
class Facade:
    path: str
    model: type[BaseModel]
    wire: Wire
    forwarded: Mapping[str, str]
    """Request field -> the provider option it is carried as, on a translated route."""
    refused: frozenset[str]
    """Fields refused (400 naming them) on a translated route unless left at their default."""
    translated: frozenset[str] = frozenset()
    """Forwarded fields whose main form is translated for every provider (chat's `response_format`
    json_schema: the canonical structured output; `json_object` stays a provider option)."""
    optional: Mapping[str, str] = field(default_factory=dict)
    """Request field -> the provider option it is carried as where the target's allow-list takes
    it, a no-op elsewhere (Responses' `store`: nothing is stored where the provider keeps nothing)."""


FACADES = (
    Facade("/v1/chat/completions", openai_schema.ChatCompletionRequest, "openai-chat",
           {name: name for name in openai_schema.FORWARDED}, frozenset({*openai_schema.REFUSED, "n", "modalities"}),
           frozenset({"response_format"})),
    Facade("/v1/messages", anthropic_request.MessagesRequest, "anthropic-messages",
           {name: name for name in anthropic_request.FORWARDED}, frozenset()),
    Facade("/v1/responses", responses_schema.ResponsesRequest, "openai-responses",
           responses_schema.FORWARDED, frozenset(responses_schema.REFUSED), optional=responses_schema.OPTIONAL),
)
TARGETS: dict[str, Wire | None] = {"openai": "openai-chat", "anthropic": "anthropic-messages",
                                   "openai-responses": "openai-responses", "gemini": None}
"""Providers by the wire they speak (every OpenAI-compatible server speaks `openai-chat`)."""


def fate(facade: Facade, name: str | None, target: str) -> str:
    """`passthrough`, `translated`, `carried`, `no-op`, `refused` or `gateway` for one field (None:
    a field the facade does not know) sent to one target provider."""
    if name in GatewayExtras.model_fields:
        return "gateway"
    if TARGETS[target] == facade.wire:
        return "passthrough"
    if name is None or name in facade.refused:
        return "refused"
    if name in facade.translated:
        return "translated"
    option = facade.forwarded.get(name)
    if option is not None:
        return "carried" if option in DEFAULT_ALLOWED[target] else "refused"
    option = facade.optional.get(name)
    if option is not None:
        return "carried" if option in DEFAULT_ALLOWED[target] else "no-op"
    return "translated"


def takes_option(gateway: Gateway, model: str, option: str) -> bool:
    """Every provider `model` may go to (a route's targets, or its own) has `option` in its API (the
    default allow-list; an operator's allow-list that leaves it out then refuses it by name, so it is
    never dropped silently); False for a model that does not resolve (answered when the run opens)."""
    routes = gateway.router.routes
    models = [t.model for t in flatten_targets(routes, model)] if model in routes else [model]
    try:
        providers = {gateway.registry.resolve(m)[1] for m in models}
    except GatewayError:
        return False
    return all(option in DEFAULT_ALLOWED.get(p, DEFAULT_ALLOWED["*"]) for p in providers)
