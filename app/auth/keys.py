"""Key material: how keys are made, recognised and stored (as hashes only).

A key is `fgw-` followed by 43 URL-safe base64 characters (32 random bytes, 256 bits). It is
stored as its SHA-256: with that much entropy a slow password hash (bcrypt, argon2) buys nothing,
since no one can enumerate the key space, and SHA-256 keeps the per-request lookup a cheap index
hit. Comparisons of hashes use `hmac.compare_digest` (constant time).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Annotated

from pydantic import AfterValidator, SecretStr

__all__ = ["ADMIN_KEY_MIN_LENGTH", "KEY_PREFIX", "AdminKey", "hash_key", "hashes_equal", "looks_like_key", "new_key",
           "new_key_id"]

KEY_PREFIX = "fgw-"
_KEY_RE = re.compile(r"^fgw-[A-Za-z0-9_-]{43}$")
HASH_RE = r"^[0-9a-f]{64}$"


ADMIN_KEY_MIN_LENGTH = 32
"""An operator's admin key sees every run and mints keys: it is refused at start below this length
(`openssl rand -hex 32` gives 64 characters), or when a few characters repeat to make it up."""


def _strong_admin_key(key: SecretStr) -> SecretStr:
    value = key.get_secret_value()
    if len(value) < ADMIN_KEY_MIN_LENGTH or len(set(value)) < 8:
        raise ValueError(f"too short or too repetitive ({len(value)} characters): use at least "
                         f"{ADMIN_KEY_MIN_LENGTH} random characters, e.g. $(openssl rand -hex 32)")
    return key


AdminKey = Annotated[SecretStr, AfterValidator(_strong_admin_key)]


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    """A key's public name in logs, URLs and records (never the key)."""
    return "key_" + secrets.token_hex(8)


def looks_like_key(value: str) -> bool:
    """The shape of a gateway key; anything else is refused before any lookup."""
    return bool(_KEY_RE.match(value))


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def hashes_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
