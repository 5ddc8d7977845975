"""Gateway keys in the records database (table `api_keys`, migration 0002): hashes and policies.

Revoking keeps the row (`revoked_at`), so a key's runs and usage still name a known key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.auth.keys import hash_key, hashes_equal, new_key, new_key_id
from app.auth.policy import KeyFields, KeyPolicy
from app.core.errors import GatewayError
from app.records.tables import api_keys

__all__ = ["KEYS_DOWN", "MAX_OVERLAP_SECONDS", "KeyRow", "KeyStore", "KeysUnavailable"]

KEYS_DOWN = (sa.exc.SQLAlchemyError, OSError, TimeoutError)
"""What a key database that cannot answer raises (asyncpg's refused connect is an OSError)."""

MAX_OVERLAP_SECONDS = 30 * 24 * 3600
"""The longest a rotated key's previous secret may stay accepted: a month."""


class KeysUnavailable(GatewayError):
    """The key database cannot answer: 503, retryable (a key lookup, the admin routes, a budget's seed)."""

    status = 503
    code = "auth_unavailable"
    retryable = True

    @classmethod
    def of(cls, exc: BaseException) -> KeysUnavailable:
        # The class only: a driver's message can carry the database URL (and its password).
        return cls(f"the key database is unavailable ({type(exc).__name__}); retry later")


@dataclass(slots=True, kw_only=True, frozen=True)
class KeyRow:
    policy: KeyPolicy
    created_at: datetime
    updated_at: datetime
    revoked_at: datetime | None
    previous_expires_at: datetime | None = None
    """Until when the secret before the last rotation is still accepted (None: no overlap open)."""


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _maybe_utc(value: datetime | None) -> datetime | None:
    return _utc(value) if value is not None else None


def _row(row: Any, now: datetime | None = None) -> KeyRow:
    fields = KeyFields.model_validate({"name": row["name"], **row["policy"]})
    overlap = _maybe_utc(row["previous_expires_at"])
    if overlap is not None and overlap <= (now or datetime.now(UTC)):
        overlap = None  # the window closed: the previous secret is refused, nothing to show
    return KeyRow(policy=KeyPolicy.of(row["id"], fields, "database"), created_at=_utc(row["created_at"]),
                  updated_at=_utc(row["updated_at"]), revoked_at=_maybe_utc(row["revoked_at"]),
                  previous_expires_at=overlap)


def _policy_doc(fields: KeyFields) -> dict[str, Any]:
    return fields.model_dump(mode="json", exclude={"name"})


class KeyStore:
    """Every method raises KeysUnavailable (503, retryable) when the database cannot answer."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @contextlib.asynccontextmanager
    async def _conn(self, *, write: bool = False) -> AsyncIterator[AsyncConnection]:
        try:
            async with (self.engine.begin() if write else self.engine.connect()) as conn:
                yield conn
        except KEYS_DOWN as exc:
            raise KeysUnavailable.of(exc) from None

    async def create(self, fields: KeyFields) -> tuple[KeyRow, str]:
        """A new key: its row and, this once, the key itself."""
        key, key_id, now = new_key(), new_key_id(), datetime.now(UTC)
        async with self._conn(write=True) as conn:
            await conn.execute(sa.insert(api_keys).values(
                id=key_id, key_hash=hash_key(key), name=fields.name, policy=_policy_doc(fields),
                created_at=now, updated_at=now, revoked_at=None))
        return KeyRow(policy=KeyPolicy.of(key_id, fields, "database"), created_at=now, updated_at=now,
                      revoked_at=None), key

    async def get(self, key_id: str) -> KeyRow | None:
        async with self._conn() as conn:
            row = (await conn.execute(sa.select(api_keys).where(api_keys.c.id == key_id))).mappings().first()
        return _row(row) if row is not None else None

    async def list(self) -> list[KeyRow]:
        async with self._conn() as conn:
            rows = (await conn.execute(sa.select(api_keys).order_by(api_keys.c.created_at))).mappings().all()
        return [_row(row) for row in rows]

    async def update(self, key_id: str, fields: KeyFields) -> KeyRow | None:
        now = datetime.now(UTC)
        async with self._conn(write=True) as conn:
            result = await conn.execute(sa.update(api_keys).where(
                api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)).values(
                name=fields.name, policy=_policy_doc(fields), updated_at=now))
        return await self.get(key_id) if result.rowcount else None

    async def revoke(self, key_id: str) -> bool:
        now = datetime.now(UTC)
        async with self._conn(write=True) as conn:
            result = await conn.execute(sa.update(api_keys).where(
                api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)).values(revoked_at=now, updated_at=now))
        return bool(result.rowcount)

    async def rotate(self, key_id: str, overlap_seconds: float) -> tuple[KeyRow, str] | None:
        """A new secret for a live key (None: no such key, or revoked); the current secret stays
        accepted for `overlap_seconds` (0: refused at once), the policy and id unchanged, so the
        key's runs, spend and limits carry on. A second rotation ends the first one's overlap."""
        key, now = new_key(), datetime.now(UTC)
        until = now + timedelta(seconds=overlap_seconds) if overlap_seconds > 0 else None
        async with self._conn(write=True) as conn:
            result = await conn.execute(sa.update(api_keys).where(
                api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)).values(
                previous_key_hash=api_keys.c.key_hash if until is not None else None,
                previous_expires_at=until, key_hash=hash_key(key), updated_at=now))
        if not result.rowcount:
            return None
        row = await self.get(key_id)
        return (row, key) if row is not None else None

    async def by_hash(self, key_hash: str) -> KeyPolicy | None:
        """The live (not revoked) key with this hash: its current secret, or its previous one
        within the rotation's overlap window."""
        now = datetime.now(UTC)
        current = api_keys.c.key_hash == key_hash
        previous = sa.and_(api_keys.c.previous_key_hash == key_hash, api_keys.c.previous_expires_at > now)
        query = sa.select(api_keys).where(sa.or_(current, previous), api_keys.c.revoked_at.is_(None))
        async with self._conn() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None:
            return None
        if hashes_equal(row["key_hash"], key_hash):
            return _row(row, now).policy
        stored_previous = row["previous_key_hash"] or ""
        if hashes_equal(stored_previous, key_hash) and _maybe_utc(row["previous_expires_at"]) is not None:
            return _row(row, now).policy
        return None
