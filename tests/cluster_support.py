"""A private Redis Cluster on loopback for the tests and the chaos soak: redis-server processes with
`--cluster-enabled yes` on free ports, joined by `redis-cli --cluster create` (three masters, and
one replica each when asked). No disk (a temporary directory holds the nodes.conf files).

`cluster_url` (session fixture): three masters and three replicas, `redis+cluster://` URL of the
three masters. Without redis-server/redis-cli the tests skip, except under CI=true (they fail).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.redis_support import _wait, free_port, unavailable


def _node(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2, socket_connect_timeout=2)


def _ask(port: int, *args: str):
    client = _node(port)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


class ClusterNodeProc:
    def __init__(self, exe: str, port: int, root: Path) -> None:
        self.exe, self.port = exe, port
        self.bus_port = free_port()  # set, not port + 10000 (past 65535 for a high free port)
        self.dir = root / str(port)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-port", str(self.bus_port),
             "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0",
             "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait(self.ping, "redis-server (cluster node)", self.proc)

    def first_start(self, attempts: int = 3) -> None:
        """Start on fresh ports when the chosen ones were taken between `free_port()` and the bind
        (another process on the machine; redis-server then exits at once, saying so on stdout)."""
        for attempt in range(attempts):
            try:
                return self.start()
            except RuntimeError:
                if attempt == attempts - 1 or self.alive():
                    raise
                self.port, self.bus_port = free_port(), free_port()
                self.dir = self.dir.parent / str(self.port)
                self.dir.mkdir(parents=True, exist_ok=True)

    def ping(self) -> bool:
        try:
            return bool(_ask(self.port, "PING"))
        except redis.RedisError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def role(self) -> str:
        try:
            return str(_ask(self.port, "ROLE")[0])
        except redis.RedisError:
            return "?"

    def nodes(self) -> dict[str, dict]:
        """CLUSTER NODES as this node sees it: address -> fields (flags, master_id, slots...)."""
        return _ask(self.port, "CLUSTER NODES")


class RedisClusterServer:
    """`masters` masters (and `replicas` replicas per master) on loopback, as one cluster."""

    def __init__(self, masters: int = 3, replicas: int = 1) -> None:
        exe, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if exe is None or cli is None:
            unavailable("no redis-server/redis-cli on PATH: the Redis Cluster tests need both")
        assert exe is not None and cli is not None
        self.cli = cli
        self.root = Path(tempfile.mkdtemp(prefix="foundry-cluster-"))
        self.replicas = replicas
        self.nodes = [ClusterNodeProc(exe, free_port(), self.root) for _ in range(masters * (1 + replicas))]
        self.masters = masters

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:self.masters])
        return f"redis+cluster://{seeds}"

    def start(self) -> RedisClusterServer:
        try:
            return self._start()
        except BaseException:  # no node outlives a start that failed half-way
            self.stop()
            raise

    def _start(self) -> RedisClusterServer:
        for node in self.nodes:
            node.first_start()
        subprocess.run(
            [self.cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        _wait(self.healthy, "redis cluster", None, timeout=60)
        return self

    def healthy(self) -> bool:
        """Every live node sees the cluster ok with every slot served."""
        try:
            return all(_ask(n.port, "CLUSTER INFO").get("cluster_state") == "ok"
                       for n in self.nodes if n.alive())
        except redis.RedisError:
            return False

    def replicas_connected(self) -> bool:
        """Every live replica's link to its master is up: none is still in its first sync (a cluster
        just created, or a master turned replica by a failover)."""
        try:
            return all(_ask(n.port, "ROLE")[3] == "connected" for n in self.nodes if n.alive() and n.role() != "master")
        except redis.RedisError:
            return False

    def master_of(self, key: str) -> ClusterNodeProc:
        live = [n for n in self.nodes if n.alive()]
        slot = int(_ask(live[0].port, "CLUSTER KEYSLOT", key))
        for node in live:
            if node.role() != "master":
                continue
            me = next(f for f in node.nodes().values() if "myself" in f["flags"])
            if any(int(lo) <= slot <= int(hi) for lo, hi in (span for span in me["slots"] if len(span) == 2)):
                return node
        raise RuntimeError(f"no master serves slot {slot}")

    def replica_of(self, master: ClusterNodeProc) -> ClusterNodeProc:
        seen = master.nodes()
        master_id = next(f["node_id"] for f in seen.values() if "myself" in f["flags"])
        for address, fields in seen.items():
            if fields["master_id"] == master_id and "slave" in fields["flags"]:
                port = int(address.split("@")[0].rsplit(":", 1)[1])
                return next(n for n in self.nodes if n.port == port)
        raise RuntimeError("the master has no replica")

    def failover(self, key: str) -> tuple[ClusterNodeProc, ClusterNodeProc]:
        """CLUSTER FAILOVER on the replica of `key`'s master (coordinated: no write is lost); waits
        until the replica serves the slot. Returns (old master, new master)."""
        master = self.master_of(key)
        replica = self.replica_of(master)
        assert _ask(replica.port, "CLUSTER FAILOVER")
        _wait(lambda: replica.role() == "master" and master.role() == "slave" and self.healthy(), "cluster failover",
              None, timeout=30)
        return master, replica

    def kill_master_of(self, key: str) -> tuple[ClusterNodeProc, ClusterNodeProc]:
        """SIGKILL `key`'s master; waits until its replica is promoted and the cluster is ok again."""
        master = self.master_of(key)
        replica = self.replica_of(master)
        master.kill()
        _wait(lambda: replica.role() == "master" and self.healthy(), "cluster promotion", None, timeout=30)
        return master, replica

    def cut_replication(self, key: str) -> tuple[ClusterNodeProc, ClusterNodeProc]:
        """Stop `key`'s master replicating to its replica, for good: the replica now authenticates
        as a user that does not exist, and the master drops the link. What the master acknowledges
        from here on its replica never holds, as when a master dies with writes not yet replicated
        (a race a test cannot time). Returns (master, replica)."""
        master = self.master_of(key)
        replica = self.replica_of(master)
        _ask(replica.port, "CONFIG", "SET", "masteruser", "foundry-replication-cut")
        _ask(replica.port, "CONFIG", "SET", "masterauth", "cut")
        _ask(master.port, "CLIENT", "KILL", "TYPE", "replica")
        _wait(lambda: _ask(replica.port, "ROLE")[3] != "connected", "the replication link cut", None, timeout=30)
        return master, replica

    @staticmethod
    def last_id(node: ClusterNodeProc, key: str) -> int:
        """The last entry id (its sequence number) of the Redis Stream `key` as `node` holds it
        (a replica too), 0 when it holds none."""
        client = _node(node.port)
        try:
            client.execute_command("READONLY")
            top = client.xrevrange(key, count=1)
        finally:
            client.close()
        return int(top[0][0].split("-", 1)[0]) if top else 0

    def commandstats(self) -> dict[str, int]:
        """Calls per command summed over the live masters (INFO commandstats)."""
        totals: dict[str, int] = {}
        for node in self.nodes:
            if not node.alive() or node.role() != "master":
                continue
            client = _node(node.port)
            try:
                stats = client.info("commandstats")
            finally:
                client.close()
            for name, fields in stats.items():
                command = name.removeprefix("cmdstat_")
                totals[command] = totals.get(command, 0) + int(fields["calls"])
        return totals

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    """A three-master Redis Cluster (one replica each) shared by the cluster tests."""
    server = RedisClusterServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_cluster() -> Iterator[RedisClusterServer]:
    """A cluster of this test's own, which it may fail over or kill nodes of."""
    server = RedisClusterServer().start()
    try:
        yield server
    finally:
        server.stop()


def wait_until(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen")
        time.sleep(0.05)
