"""FOUNDRY_REDIS_URL picks one Redis or a cluster (app/redis_client.py): the URL forms, the errors
(which never echo the URL: it may hold a password), and the client each form builds."""

import pytest
from redis.asyncio import Redis, RedisCluster

from app.config_file import ConfigError
from app.config_load import load_settings
from app.redis_client import cluster_seeds, connect, describe_cluster
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
