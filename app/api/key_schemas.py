"""Schemas of the key administration API (/v1/admin/keys)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.auth.keystore import KeyRow
from app.auth.policy import NAME_RE, KeyFields, KeyPolicy

__all__ = ["KeyCreate", "KeyCreated", "KeyList", "KeyOut", "KeyPatch"]


class KeyCreate(KeyFields):
    """A new key's name and policy."""


class KeyPatch(KeyFields):
    """Fields to change; absent fields stay, `null` removes a limit."""

    name: str | None = Field(default=None, pattern=NAME_RE)  # type: ignore[assignment]


class KeyOut(BaseModel):
    """A key without its secret (only its id)."""

    id: str
    name: str
    models: list[str] | None
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    budget_usd: float | None
    expires_at: datetime | None
    validators: list[dict[str, Any]]
    source: Literal["config", "database"] = Field(description="config: [[keys]] (read-only here); database: "
                                                              "made with POST /v1/admin/keys.")
    created_at: datetime | None = None
    updated_at: datetime | None = None
    revoked_at: datetime | None = None

    @classmethod
    def of(cls, policy: KeyPolicy, row: KeyRow | None = None) -> KeyOut:
        return cls(
            id=policy.id, name=policy.name, models=list(policy.models) if policy.models is not None else None,
            rpm=policy.rpm, tpm=policy.tpm, max_concurrent=policy.max_concurrent, budget_usd=policy.budget_usd,
            expires_at=policy.expires_at, validators=[v.model_dump() for v in policy.validators],
            source=policy.source, created_at=row.created_at if row else None,
            updated_at=row.updated_at if row else None, revoked_at=row.revoked_at if row else None,
        )


class KeyCreated(KeyOut):
    key: str = Field(description="The key itself: shown this once, stored only as a hash. Keep it secret.")


class KeyList(BaseModel):
    data: list[KeyOut]
