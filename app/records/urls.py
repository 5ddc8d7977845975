"""The records database URL as users write it, mapped to the async driver the store runs on.

Operators copy `postgresql://` and `postgres://` URLs from their provider's console (Heroku, RDS,
libpq); SQLAlchemy would load the synchronous psycopg2 dialect for the first (not installed) and
no dialect for the second, and the gateway would pass `config check` and crash at start. The
store runs on asyncpg and aiosqlite only, so the plain schemes mean those drivers, and any other
scheme or driver is a configuration error naming it (never the URL: it may hold a password).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, SecretStr

__all__ = ["DatabaseUrl", "async_database_url", "masked_url"]

_DRIVERS = {"postgresql": "asyncpg", "sqlite": "aiosqlite"}
_BACKENDS = {"postgres": "postgresql", "postgresql": "postgresql", "sqlite": "sqlite"}


def async_database_url(url: str) -> str:
    """`url` with the async driver the store uses; ValueError for a URL the store cannot open."""
    # Imported here: the settings run this only when a URL is configured, and importing
    # SQLAlchemy is most of what `config check` would otherwise cost without one.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url.strip())
    except (ArgumentError, ValueError):
        raise ValueError("not a database URL: postgresql://user:password@host:5432/db or sqlite:///path/foundry.db") \
            from None
    backend = _BACKENDS.get(parsed.get_backend_name())
    if backend is None:
        raise ValueError(f"the database {parsed.get_backend_name()!r} is not supported: postgresql://... or sqlite:///...")
    driver = parsed.get_driver_name() if "+" in parsed.drivername else _DRIVERS[backend]
    if driver != _DRIVERS[backend]:
        raise ValueError(f"the driver {driver!r} is not installed: write {backend}://... (the gateway uses "
                         f"{_DRIVERS[backend]})")
    url = url.strip()
    return f"{backend}+{driver}" + url[url.index(":"):]  # the rest as written (SQLAlchemy would re-quote it)


DatabaseUrl = Annotated[SecretStr, AfterValidator(lambda url: SecretStr(async_database_url(url.get_secret_value())))]
"""FOUNDRY_DATABASE_URL as a setting: read with the store's driver when the configuration loads."""


def masked_url(url: str) -> str:
    """`url` with its password shown as `***` (as SQLAlchemy's `render_as_string` does), for logs
    and `config check`. By the standard library: this runs in `config check`, which must not pay
    for importing SQLAlchemy (most of its start-up time otherwise)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))
