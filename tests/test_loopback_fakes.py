"""The loopback servers the tests run (tests/support.py `serve`) must not close an idle connection
before a client would stop reusing it: when both ends time out idle connections, the one that
closes first has to be the client, or a request written just as the server closes is reset
(`ClientOSError` upstream, 502 `upstream_unavailable`; `httpx.ReadError` from a test's client)."""

from __future__ import annotations

import anthropic
import httpx
import openai

from app.providers.http import UPSTREAM_LIMITS
from tests.support import KEEP_ALIVE_SECONDS


def test_the_fakes_keep_idle_connections_longer_than_every_client_pools_them() -> None:
    pools = {
        "the gateway's upstream pool": UPSTREAM_LIMITS.keepalive_expiry,
        "httpx's default pool (the tests' clients)": httpx.Limits().keepalive_expiry,
        "the openai SDK's pool": openai.DEFAULT_CONNECTION_LIMITS.keepalive_expiry,
        "the anthropic SDK's pool": anthropic.DEFAULT_CONNECTION_LIMITS.keepalive_expiry,
    }
    assert {name: s for name, s in pools.items() if s is None or s >= KEEP_ALIVE_SECONDS} == {}
