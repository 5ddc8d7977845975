"""Sessions of the gateway's /mcp endpoint, kept where every replica finds them.

`initialize` creates one (`Mcp-Session-Id`), bound to the key that made it; every later request
names it, on whichever replica the balancer picks. With FOUNDRY_REDIS_URL the session lives in
Redis beside the streams (one key per session, hash-tagged for a cluster, expiring after
`ttl` seconds without use); without it, in this process. The session holds no connection: the
gateway's sessions with the MCP servers behind it are per replica (app/tools/mcp_client.py).
"""

from __future__ import annotations

import secrets as random
import time
from dataclasses import asdict, dataclass
from typing import Protocol

import orjson

from app.redis_client import RedisClient

__all__ = ["McpSession", "McpSessions", "MemoryMcpSessions", "RedisMcpSessions", "build_sessions"]

DEFAULT_TTL = 3600.0
MAX_MEMORY_SESSIONS = 10_000


@dataclass(slots=True, frozen=True)
class McpSession:
    id: str
    owner: str
    """The key id that initialized it (`admin`, `open` without one): only that caller may use it."""
    protocol_version: str
    client: str
    created_at: float


class McpSessions(Protocol):
    async def create(self, owner: str, protocol_version: str, client: str) -> McpSession: ...

    async def get(self, session_id: str) -> McpSession | None:
        """The session (its expiry pushed back), or None when unknown or expired."""

    async def delete(self, session_id: str) -> bool: ...

    async def aclose(self) -> None: ...


def _new(owner: str, protocol_version: str, client: str) -> McpSession:
    return McpSession(id=random.token_urlsafe(24), owner=owner, protocol_version=protocol_version,
                      client=client[:200], created_at=time.time())


class MemoryMcpSessions:
    def __init__(self, ttl: float = DEFAULT_TTL, max_sessions: int = MAX_MEMORY_SESSIONS) -> None:
        self._ttl = ttl
        self._max = max_sessions
        self._sessions: dict[str, tuple[McpSession, float]] = {}

    async def create(self, owner: str, protocol_version: str, client: str) -> McpSession:
        now = time.monotonic()
        if len(self._sessions) >= self._max:  # the expired go first, then the oldest
            self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
            while len(self._sessions) >= self._max:
                self._sessions.pop(next(iter(self._sessions)))
        session = _new(owner, protocol_version, client)
        self._sessions[session.id] = (session, now + self._ttl)
        return session

    async def get(self, session_id: str) -> McpSession | None:
        entry = self._sessions.get(session_id)
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            del self._sessions[session_id]
            return None
        self._sessions[session_id] = (entry[0], time.monotonic() + self._ttl)
        return entry[0]

    async def delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def aclose(self) -> None:
        self._sessions.clear()


class RedisMcpSessions:
    def __init__(self, url: str, *, ttl: float = DEFAULT_TTL, prefix: str = "foundry", timeout: float = 2.0,
                 client: RedisClient | None = None) -> None:
        self._ttl = max(1, int(ttl))
        self._prefix = prefix
        if client is None:
            from app.redis_client import connect  # redis is imported only when used

            client = connect(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._redis = client

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}:mcp:{{{session_id}}}"

    async def create(self, owner: str, protocol_version: str, client: str) -> McpSession:
        session = _new(owner, protocol_version, client)
        await self._redis.set(self._key(session.id), orjson.dumps(asdict(session)), ex=self._ttl)
        return session

    async def get(self, session_id: str) -> McpSession | None:
        if not session_id.isascii() or len(session_id) > 128:
            return None
        key = self._key(session_id)
        raw = await self._redis.getex(key, ex=self._ttl)
        if raw is None:
            return None
        try:
            return McpSession(**orjson.loads(raw))
        except (orjson.JSONDecodeError, TypeError):
            return None

    async def delete(self, session_id: str) -> bool:
        return bool(await self._redis.delete(self._key(session_id)))

    async def aclose(self) -> None:
        await self._redis.aclose()


def build_sessions(redis_url: str | None, *, ttl: float = DEFAULT_TTL, timeout: float = 2.0) -> McpSessions:
    """In Redis when the gateway has one (sessions on any replica), else in this process."""
    if redis_url is None:
        return MemoryMcpSessions(ttl)
    return RedisMcpSessions(redis_url, ttl=ttl, timeout=timeout)
