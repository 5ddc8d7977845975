"""The operator's cache rules (`[[cache]]` in the TOML file, `FOUNDRY_CACHE` as JSON): off unless
a rule names the model or route of a request."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["CacheChoice", "CacheRule", "rule_for"]

_PATTERN_RE = r"^[A-Za-z0-9_.:@/*-]{1,256}$"


class CacheRule(BaseModel):
    """Runs of the models (or the route) a rule names are cached for `ttl_seconds`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: str | None = Field(default=None, description="A model pattern as asked (`openai/*`; only `*` is a wildcard).")
    route: str | None = Field(default=None, description="A route name (or an alias) as asked.")
    ttl_seconds: float = Field(default=3600, gt=0, le=30 * 86400, description="How long an answer is kept.")
    scope: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$",
        description="A shared scope's name: every key shares these answers. Unset: each key has its own.")
    replay: Literal["fast", "paced"] = Field(
        default="fast", description="`fast`: a hit's events go out at once; `paced`: at the original's first-token "
        "time and pace.")
    collapse: bool = Field(default=True, description="An identical request in flight is followed instead of "
                           "calling the provider again (on the same replica).")
    charge: bool = Field(default=False, description="A hit counts against the key's budget and tokens per minute.")
    deny_keys: list[str] = Field(default_factory=list, description="API key ids or names never served nor stored "
                                 "by this rule.")

    @field_validator("models")
    @classmethod
    def _pattern(cls, models: str | None) -> str | None:
        if models is not None and not re.match(_PATTERN_RE, models):
            raise ValueError(f"{models!r} is not a model pattern (letters, digits, _.:@/- and * only)")
        return models

    @model_validator(mode="after")
    def _names_something(self) -> CacheRule:
        if (self.models is None) == (self.route is None):
            raise ValueError("a cache rule names `models` or `route` (one of them)")
        return self

    def applies(self, model: str) -> bool:
        if self.route is not None:
            return model == self.route
        return fnmatch.fnmatchcase(model, self.models or "")


def rule_for(rules: list[CacheRule], model: str) -> CacheRule | None:
    """The first rule that names `model` (as the caller asked for it)."""
    return next((rule for rule in rules if rule.applies(model)), None)


@dataclass(slots=True, frozen=True, kw_only=True)
class CacheChoice:
    """What the caller allows for one request: `Cache-Control: no-cache` (no lookup), `no-store`
    (not stored), the native body's `cache: false` (neither); and which key asks (`deny_keys`)."""

    lookup: bool = True
    store: bool = True
    key_name: str | None = None
