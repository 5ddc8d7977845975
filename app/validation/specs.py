"""Validator specs `{name, config}` (request and operator policy) and their checking at the edge.

Unknown names, bad configs and unknown chunkers are the caller's mistake: 422 before anything
runs, with the field path (`validators.1.config.patterns.0`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.errors import RequestError
from app.validation.chunking import CHUNKERS
from app.validation.validators import VALIDATORS
from app.validation.validators.base import Validator, ValidatorConfig

__all__ = ["MAX_VALIDATORS", "Registry", "ValidatorSpec", "called_models", "check_specs", "invalid_validator",
           "parse_spec"]

MAX_VALIDATORS = 32
Registry = Mapping[str, type[Validator]]


class ValidatorSpec(BaseModel):
    """One item of `validators`: a built-in validator's name and its config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    config: dict[str, Any] = Field(default_factory=dict)


def invalid_validator(message: str, field: str) -> RequestError:
    return RequestError(f"{field}: {message}", status=422, code="invalid_validator", field=field)


def parse_spec(index: int, spec: ValidatorSpec, registry: Registry | None = None) -> tuple[type[Validator], ValidatorConfig]:
    """The validator class and its parsed config; RequestError (422) naming the field."""
    registry = VALIDATORS if registry is None else registry
    cls = registry.get(spec.name)
    if cls is None:
        known = ", ".join(sorted(registry))
        raise invalid_validator(f"unknown validator {spec.name!r} (known: {known})", f"validators.{index}.name")
    try:
        config = cls.Config.model_validate(spec.config)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in error["loc"])
        field = f"validators.{index}.config" + (f".{loc}" if loc else "")
        raise invalid_validator(error["msg"], field) from None
    return cls, config


def check_specs(specs: Sequence[ValidatorSpec], chunking: str | None, *, registry: Registry | None = None) -> None:
    """Refuse (422) unknown validator names, bad configs and unknown chunkers."""
    if chunking is not None and chunking not in CHUNKERS:
        raise invalid_validator(f"unknown chunking {chunking!r} (known: {', '.join(CHUNKERS)})", "chunking")
    if len(specs) > MAX_VALIDATORS:
        raise invalid_validator(f"at most {MAX_VALIDATORS} validators", "validators")
    for index, spec in enumerate(specs):
        parse_spec(index, spec, registry)


def called_models(specs: Sequence[ValidatorSpec], *, registry: Registry | None = None) -> list[tuple[str, str]]:
    """(field, model) of every model the request's validators call (`validators.0.config.model`),
    for the key's model allow-list at the edge. The specs were checked (`check_specs`)."""
    out: list[tuple[str, str]] = []
    for index, spec in enumerate(specs):
        cls, config = parse_spec(index, spec, registry)
        out.extend((f"validators.{index}.config.model", model) for model in cls.models(config))
    return out
