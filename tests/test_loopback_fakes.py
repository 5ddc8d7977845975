"""A server must not close an idle connection before its client would stop reusing it: when both
ends time out idle connections, the one that closes first has to be the client, or a request
written just as the server closes is reset (`ClientOSError` upstream, 502 `upstream_unavailable`;
`httpx.ReadError` from a test's client; a 502 from a proxy in front of the gateway). Held for the
loopback servers the tests run (tests/support.py `serve`) and for `foundry-gateway serve` behind
the deployed nginx."""

from __future__ import annotations

import re

import anthropic
import httpx
import openai

from app import cli
from app.providers.upstream import KEEPALIVE_SECONDS
from tests.support import KEEP_ALIVE_SECONDS, REPO

NGINX_UPSTREAM_KEEPALIVE = 60.0
"""nginx's `keepalive_timeout` of an upstream block when the configuration sets none (also the
idle timeout of the common cloud load balancers)."""


def test_the_fakes_keep_idle_connections_longer_than_every_client_pools_them() -> None:
    pools = {
        "the gateway's upstream pool": KEEPALIVE_SECONDS,
        "httpx's default pool (the tests' clients)": httpx.Limits().keepalive_expiry,
        "the openai SDK's pool (the facade tests' clients)": openai.DEFAULT_CONNECTION_LIMITS.keepalive_expiry,
        "the anthropic SDK's pool (the facade tests' clients)": anthropic.DEFAULT_CONNECTION_LIMITS.keepalive_expiry,
    }
    assert {name: s for name, s in pools.items() if s is None or s >= KEEP_ALIVE_SECONDS} == {}


def test_the_gateway_keeps_idle_connections_longer_than_the_proxy_in_front_pools_them() -> None:
    nginx = (REPO / "deploy" / "nginx.conf").read_text()
    upstream = nginx[nginx.index("upstream foundry_gateway"):].split("}", 1)[0]
    assert "keepalive " in upstream  # nginx pools connections to the replicas
    set_here = re.search(r"keepalive_timeout\s+(\d+)s?;", upstream)
    pooled = float(set_here.group(1)) if set_here else NGINX_UPSTREAM_KEEPALIVE
    assert cli.KEEP_ALIVE_SECONDS > pooled
