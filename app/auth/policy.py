"""A key's policy (models, limits, budget, validators), who is calling (`Principal`), and prices.

`KeyFields` is the pydantic shape shared by the configuration (`[[keys]]`) and the admin API
(`POST /v1/admin/keys`); `KeyPolicy` is the plain, typed form the hot path reads.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.core.cost import Rate, Rates
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


_PER_MTOK = "USD per million tokens"


class PriceTier(BaseModel):
    """Long-context rates: what a run whose prompt has more than `above` tokens pays for every token."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    above: int = Field(ge=0, le=100_000_000, description="Prompt tokens (input_tokens, cache included) past which it applies.")
    input: float | None = Field(default=None, ge=0, le=1e6, description=f"{_PER_MTOK}; unset: the base rate.")
    output: float | None = Field(default=None, ge=0, le=1e6)
    cache_read: float | None = Field(default=None, ge=0, le=1e6)
    cache_write: float | None = Field(default=None, ge=0, le=1e6)
    cache_write_1h: float | None = Field(default=None, ge=0, le=1e6)


class Price(BaseModel):
    """A model's price in FOUNDRY_PRICES (or the config file's [prices]), USD per million tokens of
    each kind; it overrides the price library's for that model (docs/access-control.md#how-cost-is-computed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, le=1e6, description=f"Uncached prompt tokens, {_PER_MTOK}.")
    output: float = Field(ge=0, le=1e6, description=f"Output tokens (reasoning included), {_PER_MTOK}.")
    cache_read: float | None = Field(default=None, ge=0, le=1e6, description="Cache reads; unset: the input rate.")
    cache_write: float | None = Field(default=None, ge=0, le=1e6, description=(
        "Cache writes (5-minute on Anthropic); unset: the input rate."))
    cache_write_1h: float | None = Field(default=None, ge=0, le=1e6, description=(
        "1-hour cache writes (Anthropic); unset: the cache_write rate."))
    reasoning: float | None = Field(default=None, ge=0, le=1e6, description="Reasoning tokens; unset: the output rate.")
    tiers: tuple[PriceTier, ...] = Field(default=(), max_length=8, description="Long-context rates, by prompt size.")

    def rates(self, source: str = "FOUNDRY_PRICES") -> Rates:
        """These prices as the rates `app.core.cost` computes with (an unset one is the rate it defaults to)."""
        tiers = [(tier.above, _over(tier, self)) for tier in sorted(self.tiers, key=lambda tier: tier.above)]

        def rate(*names: str) -> Rate:
            return Rate(_first(self, names), tuple((above, _first(level, names)) for above, level in tiers))

        return Rates(input=rate("input"), output=rate("output"), cache_read=rate("cache_read", "input"),
                     cache_write=rate("cache_write", "input"), cache_write_1h=rate("cache_write_1h", "cache_write", "input"),
                     reasoning=rate("reasoning", "output"), source=source)

    def cost(self, usage: Usage) -> float:
        return self.rates().of(usage).total_usd


def _first(price: Price, names: tuple[str, ...]) -> Decimal:
    """The first of these rates that is set (`input` and `output` always are)."""
    return Decimal(str(next(v for v in (getattr(price, name) for name in names) if v is not None)))


def _over(tier: PriceTier, base: Price) -> Price:
    """A tier's rates, the base's where the tier sets none."""
    return base.model_copy(update={k: v for k, v in tier.model_dump(exclude={"above"}).items() if v is not None})


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


