"""FOUNDRY_REDIS_URL picks one Redis or a cluster (app/redis_client.py): the URL forms, the errors
(which never echo the URL: it may hold a password), and the client each form builds."""

import uuid

import hiredis
import pytest
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from app.config_file import ConfigError
from app.config_load import load_settings
from app.redis_client import (
    HiredisConnection,
    HiredisSSLConnection,
    HiredisUnixConnection,
    cluster_seeds,
    connect,
    describe_cluster,
)
from app.settings import Settings
from app.startup import stream_store_label


def test_plain_urls_are_one_redis() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://h:6380/1", "unix:///tmp/redis.sock"):
        assert cluster_seeds(url) is None and describe_cluster(url) is None
    assert isinstance(connect("redis://127.0.0.1:1/0", socket_timeout=1, socket_connect_timeout=1), Redis)


def test_cluster_url_names_the_seed_nodes() -> None:
    seeds = cluster_seeds("redis+cluster://alice:s3cret-pw@10.0.0.1:7000,10.0.0.2:7001, [::1]:7002,node-d")
    assert seeds is not None
    assert seeds.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002), ("node-d", 6379))
    assert (seeds.username, seeds.password, seeds.tls) == ("alice", "s3cret-pw", False)
    tls = cluster_seeds("rediss+cluster://:pw@h:7000/0")
    assert tls is not None and tls.tls and tls.username is None and tls.password == "pw"
    shown = describe_cluster("redis+cluster://alice:s3cret-pw@10.0.0.1:7000,10.0.0.2:7001")
    assert shown == "redis+cluster://10.0.0.1:7000,10.0.0.2:7001"
    client = connect("redis+cluster://127.0.0.1:1,127.0.0.1:2", socket_timeout=1, socket_connect_timeout=1)
    assert isinstance(client, RedisCluster)  # no connection until the first command


@pytest.mark.parametrize(("url", "says"), [
    ("redis+cluster://:pw-secret@", "at least one seed node"),
    ("redis+cluster://:pw-secret@h:notaport", "port must be a number"),
    ("redis+cluster://:pw-secret@h:70000", "1..65535"),
    ("redis+cluster://:pw-secret@h:7000/3", "only database 0"),
])
def test_a_malformed_cluster_url_is_refused_without_echoing_it(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        cluster_seeds(url)
    assert "pw-secret" not in str(caught.value)


def test_the_startup_banner_shows_the_cluster_without_its_password() -> None:
    label = stream_store_label(Settings(redis_url="redis+cluster://:pw-secret@127.0.0.1:7000,127.0.0.1:7001"))
    assert label == "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
    with pytest.raises(ConfigError) as refused:  # a malformed cluster URL fails `config check`, never the start
        load_settings(redis_url="redis+cluster://:pw-secret@h:x")
    assert refused.value.lines == ["FOUNDRY_REDIS_URL: a redis+cluster:// seed node's port must be a number"]


def test_one_redis_keeps_the_urls_kind_of_connection_and_its_options() -> None:
    """The hiredis-packing connections (`_one_redis`) are the URL's own kind: TCP, TLS, a Unix
    socket, with the URL's database and password as redis-py's `from_url` reads them."""
    cases = {"redis://:pw@127.0.0.1:1/4": (HiredisConnection, 4), "rediss://127.0.0.1:1/2": (HiredisSSLConnection, 2),
             "unix:///tmp/none.sock?db=5": (HiredisUnixConnection, 5)}
    for url, (kind, db) in cases.items():
        pool = connect(url, socket_timeout=1, socket_connect_timeout=1).connection_pool
        assert pool.connection_class is kind and pool.connection_kwargs["db"] == db
        assert isinstance(pool.make_connection(), Connection if kind is not HiredisUnixConnection else
                          UnixDomainSocketConnection)
    assert connect("redis://:pw@127.0.0.1:1/4", socket_timeout=1, socket_connect_timeout=1).connection_pool \
        .connection_kwargs["password"] == "pw"


async def test_commands_to_one_redis_are_packed_by_hiredis_and_read_back_whole(redis_url: str, monkeypatch) -> None:
    """redis-py's asyncio client packs commands in Python (7.9 us an XADD, against 1.4 us with
    hiredis); the gateway's client packs them with hiredis. The store's kinds of command (a
    pipelined XADD of frames with a number, a script, a hash) round-trip the same through it."""
    packed: list[tuple] = []
    pack = hiredis.pack_command
    monkeypatch.setattr(hiredis, "pack_command", lambda args: packed.append(args) or pack(args))
    client = connect(redis_url, socket_timeout=2, socket_connect_timeout=2)
    key = f"test:packing:{uuid.uuid4().hex}"
    try:
        frames = "id: 1\nevent: token\ndata: {\"content\":\"é\"}\n\n".encode()
        pipe = client.pipeline(transaction=False)
        pipe.xadd(f"{key}:events", {b"f": frames, b"s": 1}, id="1-0")
        pipe.hset(f"{key}:meta", mapping={"status": "ok", "ended": repr(1.5)})
        await pipe.execute()
        assert await client.xrange(f"{key}:events") == [(b"1-0", {b"f": frames, b"s": b"1"})]
        assert await client.hgetall(f"{key}:meta") == {b"status": b"ok", b"ended": b"1.5"}
        assert await client.eval("return redis.call('HGET', KEYS[1], ARGV[1])", 1, f"{key}:meta", "status") == b"ok"
        assert any(args[0] == b"XADD" or args[0] == "XADD" for args in packed), packed
        with pytest.raises(DataError):  # what redis-py refuses, refused as before
            await client.set(f"{key}:x", None)  # type: ignore[arg-type]
    finally:
        await client.delete(f"{key}:events", f"{key}:meta")
        await client.aclose()
