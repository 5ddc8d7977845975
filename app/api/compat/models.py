"""GET /v1/models: what this gateway serves, in OpenAI's list shape (or Anthropic's, when the
request carries the `anthropic-version` header the anthropic SDK always sends).

Listed: the mock scenarios, the configured aliases whose provider is served, and one
`<provider>/*` entry per other served provider (any model name under it is passed upstream).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.pipeline import Gateway
from app.providers.mock import SCENARIOS

__all__ = ["ServedModel", "anthropic_list", "anthropic_model", "openai_list", "openai_model", "served_models"]

_CREATED = 1_735_689_600  # 2025-01-01: a fixed date, so the list is the same on every call


@dataclass(frozen=True, slots=True)
class ServedModel:
    id: str
    owned_by: str


def served_models(gateway: Gateway) -> list[ServedModel]:
    served = {name for name, ready in gateway.registry.readiness().items() if ready}
    out: list[ServedModel] = []
    if "mock" in served:
        out += [ServedModel(f"mock/{s.replace('<N>', '100')}", "mock") for s in SCENARIOS]
    for alias, target in sorted(gateway.settings.aliases.items()):
        provider = target.partition("/")[0]
        if provider in served:
            out.append(ServedModel(alias, provider))
    out += [ServedModel(f"{name}/*", name) for name in sorted(served - {"mock"})]
    return out


def find(gateway: Gateway, model_id: str) -> ServedModel | None:
    """A listed model, or any `provider/model` under a served provider."""
    for model in served_models(gateway):
        if model.id == model_id:
            return model
    provider, sep, name = model_id.partition("/")
    if sep and name and provider != "mock" and gateway.registry.readiness().get(provider):
        return ServedModel(model_id, provider)
    return None


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
