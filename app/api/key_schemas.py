"""Schemas of the key administration API (/v1/admin/keys)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.auth.keystore import MAX_OVERLAP_SECONDS, KeyRow
from app.auth.policy import NAME_RE, KeyFields, KeyPolicy

__all__ = ["KeyCreate", "KeyCreated", "KeyList", "KeyOut", "KeyPatch", "KeyRotate", "KeyState", "key_state"]

KeyState = Literal["active", "expired", "revoked"]


def key_state(policy: KeyPolicy, row: KeyRow | None = None, now: datetime | None = None) -> KeyState:
    if row is not None and row.revoked_at is not None:
        return "revoked"
    return "expired" if policy.expired(now or datetime.now(UTC)) else "active"


class _GivenPolicy(KeyFields):
    """A policy an admin writes now: an expiry already past is a mistake (a key born refused), told
    by name rather than stored; to stop a key now, revoke it."""

    @field_validator("expires_at")
    @classmethod
    def _in_the_future(cls, value: datetime | None) -> datetime | None:
        if value is not None and (value if value.tzinfo else value.replace(tzinfo=UTC)) <= datetime.now(UTC):
            raise ValueError("is in the past: a key would be refused from the start (revoke a key to stop it now)")
        return value


class KeyCreate(_GivenPolicy):
    """A new key's name and policy."""


class KeyPatch(_GivenPolicy):
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
    state: KeyState = Field(description="active; expired (past `expires_at`: refused, 401 key_expired); revoked.")
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
            source=policy.source, state=key_state(policy, row), created_at=row.created_at if row else None,
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
