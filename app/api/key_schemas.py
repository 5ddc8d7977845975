"""Schemas of the key administration API (/v1/admin/keys)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.auth.keystore import MAX_OVERLAP_SECONDS, KeyRow
from app.auth.policy import NAME_RE, KeyFields, KeyPolicy

__all__ = ["KeyCreate", "KeyCreated", "KeyList", "KeyOut", "KeyPatch", "KeyRotate"]


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
    previous_expires_at: datetime | None = Field(
        default=None, description="After a rotation: until when the previous secret is still accepted "
                                  "(absent or null: no overlap open).")

    @classmethod
    def of(cls, policy: KeyPolicy, row: KeyRow | None = None) -> KeyOut:
        return cls(
            id=policy.id, name=policy.name, models=list(policy.models) if policy.models is not None else None,
            rpm=policy.rpm, tpm=policy.tpm, max_concurrent=policy.max_concurrent, budget_usd=policy.budget_usd,
            expires_at=policy.expires_at, validators=[v.model_dump() for v in policy.validators],
            source=policy.source, created_at=row.created_at if row else None,
            updated_at=row.updated_at if row else None, revoked_at=row.revoked_at if row else None,
            previous_expires_at=row.previous_expires_at if row else None,
        )


class KeyCreated(KeyOut):
    key: str = Field(description="The key itself: shown this once, stored only as a hash. Keep it secret.")


class KeyRotate(BaseModel):
    """How long the current secret stays accepted next to the new one."""

    model_config = ConfigDict(extra="forbid")

    overlap_seconds: int = Field(
        default=3600, ge=0, le=MAX_OVERLAP_SECONDS,
        description="Seconds the secret being replaced still works (0: refused at once, within "
                    "FOUNDRY_KEY_CACHE_SECONDS on every replica). Default: an hour.")


class KeyList(BaseModel):
    data: list[KeyOut]
