"""A key's policy (models, limits, budget, validators), who is calling (`Principal`), and prices.

`KeyFields` is the pydantic shape shared by the configuration (`[[keys]]`) and the admin API
(`POST /v1/admin/keys`); `KeyPolicy` is the plain, typed form the hot path reads.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.core.errors import RequestError
from app.core.events import Usage
from app.validation.specs import ValidatorSpec, check_specs

__all__ = ["MODEL_PATTERN_RE", "ConfiguredKey", "KeyFields", "KeyPolicy", "Price", "Principal", "model_allowed", "tool_allowed"]

MODEL_PATTERN_RE = r"^[A-Za-z0-9_.:@/*-]{1,256}$"
"""Model patterns: `provider/model`, `provider/*`, `*`, an alias or route name. Only `*` is a wildcard."""

TOOL_PATTERN_RE = r"^[A-Za-z0-9_*-]{1,128}$"
"""MCP tool patterns: `server__tool`, `server__*`, `*`. Only `*` is a wildcard."""

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9 _.:@/-]{0,63}$"


class KeyFields(BaseModel):
    """A key's name and policy. Absent limits mean unlimited; absent `models` means every model."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_RE, description="Who holds the key (team, app); shown in logs and metrics.")
    models: list[str] | None = Field(
        default=None, max_length=256,
        description="Allowed models: `provider/model`, patterns such as `openai/*` or `mock/*`, aliases. "
                    "Absent: every model.")
    rpm: int | None = Field(default=None, ge=1, le=10_000_000, description="Requests per minute.")
    tpm: int | None = Field(default=None, ge=1, le=10_000_000_000, description="Tokens per minute (total_tokens).")
    max_concurrent: int | None = Field(default=None, ge=1, le=100_000, description="Runs in progress at once.")
    budget_usd: float | None = Field(
        default=None, ge=0, le=1e9, description="Spend per calendar month (UTC), priced with FOUNDRY_PRICES.")
    expires_at: datetime | None = Field(default=None, description="After this instant the key is refused (401).")
    validators: list[ValidatorSpec] = Field(
        default_factory=list, description="Validators that always apply to this key's requests, on top of "
                                          "the operator's FOUNDRY_VALIDATORS.")
    mcp_tools: list[str] | None = Field(
        default=None, max_length=256,
        description="MCP tools the key may use, in runs and through /mcp: `server__tool`, patterns such as "
                    "`github__*`, or `*`. Absent: every configured MCP tool; empty: none.")

    @field_validator("models")
    @classmethod
    def _patterns(cls, models: list[str] | None) -> list[str] | None:
        for pattern in models or ():
            if not re.match(MODEL_PATTERN_RE, pattern):
                raise ValueError(f"{pattern!r} is not a model pattern (letters, digits, _.:@/- and * only)")
        return models

    @field_validator("validators")
    @classmethod
    def _validators_known(cls, validators: list[ValidatorSpec]) -> list[ValidatorSpec]:
        return known_validators(validators)

    @field_validator("mcp_tools")
    @classmethod
    def _tool_patterns(cls, patterns: list[str] | None) -> list[str] | None:
        for pattern in patterns or ():
            if not re.match(TOOL_PATTERN_RE, pattern):
                raise ValueError(f"{pattern!r} is not a tool pattern (letters, digits, _ - and * only)")
        return patterns

    @field_validator("expires_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def known_validators(validators: list[ValidatorSpec]) -> list[ValidatorSpec]:
    """For pydantic validators: unknown names and bad configs are a ValueError naming the item."""
    try:
        check_specs(validators, None)
    except RequestError as exc:
        raise ValueError(exc.message) from None
    return validators


class ConfiguredKey(KeyFields):
    """An operator key in configuration (`[[keys]]` in the FOUNDRY_CONFIG file, or FOUNDRY_KEYS JSON):
    its SHA-256 (`sha256sum` of the key, hex), never the key itself."""

    hash: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the key, lower-case hex.")
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,32}$",
                           description="Stable id (runs and streams are owned by it); default: cfg_ + hash[:12].")

    def key_id(self) -> str:
        return self.id or "cfg_" + self.hash[:12]


@dataclass(slots=True, kw_only=True, frozen=True)
class KeyPolicy:
    id: str
    name: str
    models: tuple[str, ...] | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    budget_usd: float | None = None
    expires_at: datetime | None = None
    validators: tuple[Any, ...] = ()
    mcp_tools: tuple[str, ...] | None = None
    source: Literal["config", "database"] = "database"

    @classmethod
    def of(cls, key_id: str, fields: KeyFields, source: Literal["config", "database"]) -> KeyPolicy:
        return cls(id=key_id, name=fields.name, models=tuple(fields.models) if fields.models is not None else None,
                   rpm=fields.rpm, tpm=fields.tpm, max_concurrent=fields.max_concurrent,
                   budget_usd=fields.budget_usd, expires_at=fields.expires_at,
                   validators=tuple(fields.validators), source=source,
                   mcp_tools=tuple(fields.mcp_tools) if fields.mcp_tools is not None else None)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def model_allowed(patterns: tuple[str, ...] | None, *names: str) -> bool:
    """True when any of `names` (the model as requested, the alias's target) matches a pattern."""
    if patterns is None:
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns for name in names if name)


def tool_allowed(patterns: tuple[str, ...] | None, name: str) -> bool:
    """True when the MCP tool `server__tool` matches a pattern (None: every tool)."""
    return patterns is None or any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(slots=True, kw_only=True, frozen=True)
class Principal:
    """Who is calling: the admin key, a gateway key, or anyone (open mode: no keys configured)."""

    kind: Literal["admin", "key", "open"]
    key: KeyPolicy | None = None

    @property
    def owner(self) -> str | None:
        """What runs and streams are stamped with: the key's id (None for admin and open mode)."""
        return self.key.id if self.key is not None else None

    @property
    def sees_everything(self) -> bool:
        return self.kind != "key"

    def may_see(self, owner: str | None) -> bool:
        return self.sees_everything or (owner is not None and owner == self.owner)

    @property
    def label(self) -> str:
        return self.key.name if self.key is not None else self.kind


class Price(BaseModel):
    """USD per million tokens of each kind (a model's price in FOUNDRY_PRICES)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)

    def cost(self, usage: Usage) -> float:
        # input_tokens is charged as reported; cache reads and writes at their own rates.
        total = (usage.input_tokens or 0) * self.input + (usage.output_tokens or 0) * self.output \
            + (usage.cache_read_tokens or 0) * self.cache_read + (usage.cache_write_tokens or 0) * self.cache_write
        return round(total / 1_000_000, 10)


def price_for(prices: dict[str, Price], *names: str) -> Price | None:
    """The price of the first name with an exact entry, else the first pattern (`mock/*`) that matches."""
    for name in names:
        if name and name in prices:
            return prices[name]
    for name in names:
        for pattern, price in prices.items():
            if name and "*" in pattern and fnmatch.fnmatchcase(name, pattern):
                return price
    return None


