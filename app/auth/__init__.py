"""Access control: gateway API keys, per-key models and limits, ownership, usage.

`keys.py` makes and recognises keys (only hashes are stored), `policy.py` is a key's typed
policy (models, limits, budget, validators), `limiter.py` the counters (in memory; `redis_limiter.py` in Redis),
`keystore.py` keys in the records database, `service.py` the `Auth` service the API calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.lazy import lazy_names

if TYPE_CHECKING:
    from app.auth.keys import KEY_PREFIX, hash_key, looks_like_key, new_key
    from app.auth.limiter import Denied, Limiter, MemoryLimiter, build_limiter
    from app.auth.policy import KeyPolicy, Price, Principal, model_allowed
    from app.auth.redis_limiter import RedisLimiter
    from app.auth.service import Auth

__all__ = [
    "KEY_PREFIX",
    "Auth",
    "Denied",
    "KeyPolicy",
    "Limiter",
    "MemoryLimiter",
    "Price",
    "Principal",
    "RedisLimiter",
    "build_limiter",
    "hash_key",
    "looks_like_key",
    "model_allowed",
    "new_key",
]

# Each public name -> its submodule, imported on first use (PEP 562): importing one
# submodule (settings read `policy`) does not import the key store, the limiter and their drivers.
_HOMES = {
    "KEY_PREFIX": "keys",
    "hash_key": "keys",
    "looks_like_key": "keys",
    "new_key": "keys",
    "Denied": "limiter",
    "Limiter": "limiter",
    "MemoryLimiter": "limiter",
    "RedisLimiter": "redis_limiter",
    "build_limiter": "limiter",
    "KeyPolicy": "policy",
    "Price": "policy",
    "Principal": "policy",
    "model_allowed": "policy",
    "Auth": "service",
}

__getattr__ = lazy_names(__name__, _HOMES)
