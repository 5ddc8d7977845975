"""The one place a Redis client is built, from `FOUNDRY_REDIS_URL`.

- `redis://[user:password@]host:port/db`, `rediss://...`, `unix://...`: one Redis (or a proxy in
  front of one), served by redis-py's `Redis`.
- `redis+cluster://[user:password@]host:port[,host:port...]` (and `rediss+cluster://` for TLS):
  a Redis Cluster, served by redis-py's `RedisCluster`; the hosts are seed nodes, the client
  discovers the rest and follows slot moves and failovers. Every key the gateway writes carries a
  hash tag (`{stream id}`, `{key id}`, `{replica}`), so each command and each Lua script touches
  one slot, and no command spans slots.

The stream store (app/streams/redis/link.py) and the limiter (app/auth/limiter.py) both build
their client here, so the choice between one Redis and a cluster is made once. On one Redis the
client packs its commands with hiredis (`HiredisConnection`); `RedisCluster` takes no connection
class, so a cluster's commands are packed by redis-py in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, SecretStr
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff

__all__ = ["HIREDIS_PACKING", "ClusterSeeds", "RedisClient", "RedisUrl", "check_url", "cluster_seeds", "connect",
           "describe_cluster"]

RedisClient = Any
"""`Redis` or `RedisCluster`: both answer the same commands, pipelines and scripts the gateway uses,
but redis-py's annotations type the cluster's command mixins for the synchronous client, so the
union does not type-check; callers see Any."""
_CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}


@dataclass(slots=True, frozen=True)
class ClusterSeeds:
    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool


def _host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):  # [::1]:7000
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise ValueError("a redis+cluster:// seed node needs a host")
    try:
        number = int(port) if port else 6379
    except ValueError:
        raise ValueError("a redis+cluster:// seed node's port must be a number") from None
    if not 0 < number < 65536:
        raise ValueError("a redis+cluster:// seed node's port must be 1..65535")
    return host, number


def cluster_seeds(url: str) -> ClusterSeeds | None:
    """The seed nodes of a redis+cluster:// URL; None for any other URL (one Redis).

    Raises ValueError (naming the part, never echoing the URL: it may hold a password) when a
    cluster URL is malformed."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _CLUSTER_SCHEMES:
        return None
    netloc, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise ValueError("a Redis Cluster has only database 0: redis+cluster://host:port[,host:port...]")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = (user or None), (secret if colon else None)
    nodes = tuple(_host_port(item.strip()) for item in hosts.split(",") if item.strip())
    if not nodes:
        raise ValueError("redis+cluster:// needs at least one seed node: redis+cluster://host:port[,host:port...]")
    return ClusterSeeds(nodes=nodes, username=username, password=password, tls=_CLUSTER_SCHEMES[scheme.lower()])


_SCHEMES = ("redis", "rediss", "unix")


def check_url(url: str) -> None:
    """Raise ValueError (never echoing the URL: it may hold a password) unless `url` is one the
    clients here can connect to: `host:port` without a scheme would otherwise pass the
    configuration check and fail in redis-py at start."""
    if cluster_seeds(url) is not None:
        return
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        raise ValueError("must start with redis://, rediss://, unix:// or redis+cluster:// "
                         "(e.g. redis://localhost:6379/0)")
    if scheme.lower() == "unix":
        return
    netloc = rest.partition("/")[0].rpartition("@")[2]
    if not netloc.strip():
        raise ValueError("has no host: redis://[user:password@]host[:port][/db]")
    try:
        parse_url(url)  # redis-py's own parse, as Redis.from_url reads it: a port that is not a number
    except ValueError as exc:
        raise ValueError(f"cannot be read: {exc}".replace(url, "<url>")) from None


def _checked(url: SecretStr) -> SecretStr:
    check_url(url.get_secret_value())
    return url


RedisUrl = Annotated[SecretStr, AfterValidator(_checked)]
"""FOUNDRY_REDIS_URL as a setting: checked when the configuration loads."""


try:  # redis-py's own hiredis command packer (its synchronous client's, when hiredis has one)
    import hiredis
    from redis.connection import HiredisRespSerializer

    HIREDIS_PACKING = hasattr(hiredis, "pack_command")
except ImportError:  # hiredis is a dependency (redis[hiredis]); a build without it packs in Python
    HIREDIS_PACKING = False


class _HiredisPacking:
    """Commands packed in C by hiredis, as redis-py's synchronous client packs them when hiredis is
    installed; its asyncio client packs every command in Python (a fix is pending upstream:
    https://github.com/redis/redis-py/issues/4176).
    Measured: 7.9 us for one XADD of a stream entry in Python, 1.4 us with hiredis, the same bytes
    (`python bench/redis_writes.py`, docs/performance.md). A memoryview (the gateway sends none)
    keeps redis-py's path, which sends it without a copy."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if _PACKER is None or any(isinstance(arg, memoryview) for arg in args):
            return super().pack_command(*args)  # type: ignore[misc]
        return _PACKER.pack(*args)


class HiredisConnection(_HiredisPacking, Connection):
    pass


class HiredisSSLConnection(_HiredisPacking, SSLConnection):
    pass


class HiredisUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    pass


_PACKER = HiredisRespSerializer() if HIREDIS_PACKING else None
_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: HiredisConnection, SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection}


def _one_redis(url: str, **options: Any) -> Redis:
    """`Redis.from_url(url, **options)`, on connections that pack commands with hiredis: the URL's
    scheme names the connection (TCP, TLS, a Unix socket), as in redis-py's `ConnectionPool.from_url`,
    whose URL options win over keyword options as there."""
    if not HIREDIS_PACKING:
        return Redis.from_url(url, **options)
    url_options = parse_url(url)
    stock = url_options.pop("connection_class", Connection)
    pool = ConnectionPool(connection_class=_PACKING.get(stock, stock), **{**options, **url_options})
    return Redis.from_pool(pool)


def connect(url: str, *, socket_timeout: float | None, socket_connect_timeout: float, fail_fast: bool = True,
            **options: Any) -> RedisClient:
    """A client for `url`. On one Redis, `fail_fast` means no retry loop (a Redis that is away fails
    a request at once instead of hanging it); otherwise redis-py's default retries. On a cluster,
    one retry after a connection error or a slot without an owner, on a refreshed slot map (a
    failover moves a slot to a promoted replica)."""
    seeds = cluster_seeds(url)
    if seeds is None:
        if fail_fast:
            options.update(retry=Retry(NoBackoff(), 0), health_check_interval=0)
        return _one_redis(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_connect_timeout,
                          **options)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in seeds.nodes], username=seeds.username,
        password=seeds.password, ssl=seeds.tls, socket_timeout=socket_timeout,
        socket_connect_timeout=socket_connect_timeout, health_check_interval=0,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 1), **options,
    )


def describe_cluster(url: str) -> str | None:
    """A cluster URL without its credentials (for the startup banner); None for one Redis."""
    seeds = cluster_seeds(url)
    if seeds is None:
        return None
    scheme = "rediss+cluster" if seeds.tls else "redis+cluster"
    return f"{scheme}://" + ",".join(f"{host}:{port}" for host, port in seeds.nodes)
