"""Gateway keys in the records database (table `api_keys`, migration 0002): hashes and policies.

Revoking keeps the row (`revoked_at`), so a key's runs and usage still name a known key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.auth.keys import hash_key, hashes_equal, new_key, new_key_id
from app.auth.policy import KeyFields, KeyPolicy
from app.core.errors import GatewayError
from app.records.tables import api_keys

__all__ = ["KEYS_DOWN", "KeyRow", "KeyStore", "KeysUnavailable"]

KEYS_DOWN = (sa.exc.SQLAlchemyError, OSError, TimeoutError)
"""What a key database that cannot answer raises (asyncpg's refused connect is an OSError)."""


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


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _row(row: Any) -> KeyRow:
    fields = KeyFields.model_validate({"name": row["name"], **row["policy"]})
    return KeyRow(policy=KeyPolicy.of(row["id"], fields, "database"), created_at=_utc(row["created_at"]),
                  updated_at=_utc(row["updated_at"]),
                  revoked_at=_utc(row["revoked_at"]) if row["revoked_at"] is not None else None)


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

    async def by_hash(self, key_hash: str) -> KeyPolicy | None:
        """The live (not revoked) key with this hash."""
        query = sa.select(api_keys).where(api_keys.c.key_hash == key_hash, api_keys.c.revoked_at.is_(None))
        async with self._conn() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None or not hashes_equal(row["key_hash"], key_hash):
            return None
        return _row(row).policy
