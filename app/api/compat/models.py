"""GET /v1/models: what this gateway serves, in OpenAI's list shape (or Anthropic's, when the
request carries the `anthropic-version` header the anthropic SDK always sends).

Listed: the mock scenarios, the configured aliases whose provider is served, and one
`<provider>/*` entry per other served provider (any model name under it is passed upstream),
with the patterns of the bare names that reach it (`claude-*`, `gpt-*`: the operator's
`model_patterns`), by which clients such as Claude Code and Codex name their models.
For an API key limited to some models (app/auth), only what it may use: the scenarios and
aliases it may use, `<provider>/*` when it may use the whole provider, else the exact
`<provider>/<model>` names it lists (a narrower pattern, `openai/gpt-4*`, cannot be listed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.auth import Principal, model_allowed
from app.pipeline import Gateway
from app.providers.mock import SCENARIOS

__all__ = ["ServedModel", "anthropic_list", "anthropic_model", "openai_list", "openai_model", "served_models"]

_CREATED = 1_735_689_600  # 2025-01-01: a fixed date, so the list is the same on every call


@dataclass(frozen=True, slots=True)
class ServedModel:
    id: str
    owned_by: str


def served_models(gateway: Gateway, principal: Principal | None = None) -> list[ServedModel]:
    """What is served, as much of it as `principal` may use (None: everything)."""
    allowed = _patterns(principal)
    served = {name for name, ready in gateway.registry.readiness().items() if ready}
    out: list[ServedModel] = []
    if "mock" in served:
        out += [ServedModel(m, "mock") for m in (f"mock/{s.replace('<N>', '100')}" for s in SCENARIOS)
                if model_allowed(allowed, m)]
    for alias, target in sorted(gateway.settings.aliases.items()):
        provider = target.partition("/")[0]
        if provider in served and model_allowed(allowed, alias, target):
            out.append(ServedModel(alias, provider))
    registry = gateway.registry
    for name in sorted(served - {"mock"}):
        if model_allowed(allowed, f"{name}/*"):  # `*`, `openai/*`, `open*`: the whole provider
            out.append(ServedModel(f"{name}/*", name))
            out += [ServedModel(pattern, name) for pattern in registry.bare_names(name)]  # `claude-*`, as sent
        elif allowed is not None:
            exact = [m for m in sorted(allowed) if "*" not in m and m.partition("/")[0] == name and m.partition("/")[2]]
            out += [ServedModel(m, name) for m in exact]
            bare = (m.partition("/")[2] for m in exact)
            out += [ServedModel(b, name) for b in bare if registry.qualify(b) == f"{name}/{b}"]
    return out


def find(gateway: Gateway, model_id: str, principal: Principal | None = None) -> ServedModel | None:
    """A listed model, or any `provider/model` under a served provider (that `principal` may use)."""
    for model in served_models(gateway, principal):
        if model.id == model_id:
            return model
    allowed = _patterns(principal)
    qualified = gateway.registry.qualify(model_id)  # a bare name as clients send it
    provider, sep, name = qualified.partition("/")
    if sep and name and provider != "mock" and gateway.registry.readiness().get(provider) \
            and model_allowed(allowed, qualified):
        return ServedModel(model_id, provider)
    return None


def _patterns(principal: Principal | None) -> tuple[str, ...] | None:
    """The model patterns of a key limited to some models; None: every model."""
    return principal.key.models if principal is not None and principal.key is not None else None


def openai_model(model: ServedModel) -> dict[str, Any]:
    return {"id": model.id, "object": "model", "created": _CREATED, "owned_by": model.owned_by}


def openai_list(models: list[ServedModel]) -> dict[str, Any]:
    return {"object": "list", "data": [openai_model(m) for m in models]}


def anthropic_model(model: ServedModel) -> dict[str, Any]:
    created = datetime.fromtimestamp(_CREATED, UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": model.id, "display_name": model.id, "created_at": created}


def anthropic_list(models: list[ServedModel]) -> dict[str, Any]:
    data = [anthropic_model(m) for m in models]
    return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}
