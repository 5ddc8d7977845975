"""The chaos soak's processes (bench/chaos.py): a private Redis (one, or a three-master cluster), a
PostgreSQL database of its own, the fake upstream (bench/chaos_upstream.py), gateway replicas on
fixed loopback ports, and nginx in front of them (a loopback round-robin balancer in this process
when nginx is not installed). Faults are injected here; CPU and memory of the replicas are sampled
here (a replica's CPU is read before it is stopped or killed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis as sync_redis
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.auth.redis_limiter import RedisLimiter  # noqa: E402
from app.records.spend import month_of  # noqa: E402
from bench.run import cpu_seconds, free_port, rss_bytes, serve_command  # noqa: E402
from tests.cluster_support import RedisClusterServer  # noqa: E402
from tests.redis_support import RedisServer  # noqa: E402

ADMIN = "chaos-admin-" + uuid.uuid4().hex
DATABASE = os.environ.get("FOUNDRY_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _wait_http(url: str, proc: subprocess.Popen | None, what: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)


def _spawn(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None,
           **options: Any) -> subprocess.Popen:
    if log is None:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                **options)
    with log.open("ab") as out:  # the child keeps its own descriptor
        out.write(f"--- started at {time.time():.3f}\n".encode())
        out.flush()
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, **options)


def _redis_at(port: int) -> sync_redis.Redis:
    """A short-lived client of one Redis node on loopback (closed by its `with`), for the figures."""
    return sync_redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)


def _nginx_path() -> str | None:
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


class Proc:
    """One process on a fixed port, restartable on the same port."""

    def __init__(self, cmd: list[str], port: int, env: dict[str, str], health: str, log: Path | None = None) -> None:
        self.cmd, self.port, self.env, self.health, self.log = cmd, port, env, health, log
        self.proc: subprocess.Popen | None = None
        self.cpu_base = 0.0

    async def start(self) -> None:
        self.proc = _spawn(self.cmd, self.env, self.log)
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{self.port}{self.health}", self.proc, self.cmd[-1])
        self.cpu_base = cpu_seconds(self.proc.pid)  # serving only: not the imports of a start

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def stop(self, sig: int = signal.SIGTERM, wait: float = 30) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            await asyncio.to_thread(self.proc.wait, wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 10)


def _uvicorn(target: str, port: int) -> list[str]:
    return [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "60"]


class Fleet:
    def __init__(self, tmp: Path, redis: Any, database_url: str, log_level: str = "warning") -> None:
        self.tmp, self.redis, self.database_url, self.log_level = tmp, redis, database_url, log_level
        self.lease_seconds = 2.0
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self._kept: Path | None = None
        self.redis_url: str = redis.url
        self.upstream = Proc(_uvicorn("bench.chaos_upstream:app", free_port()), 0, dict(os.environ), "/healthz")
        self.upstream.port = int(self.upstream.cmd[self.upstream.cmd.index("--port") + 1])
        self.replicas: list[Proc] = []
        self.front = ""
        self.cpu_total = 0.0
        self.rss_peak = 0
        self.key_id = ""
        self._balancer: asyncio.Server | None = None
        self._nginx: subprocess.Popen | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def up(cls, *, cluster: bool, replicas: int, log_level: str = "warning") -> AsyncIterator[Fleet]:
        tmp = Path(tempfile.mkdtemp(prefix="foundry-chaos-"))
        redis = RedisClusterServer().start() if cluster else RedisServer().start()
        name = f"foundry_chaos_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(_dsn(DATABASE), timeout=5)
        await conn.execute(f'CREATE DATABASE "{name}"')
        await conn.close()
        fleet = cls(tmp, redis, make_url(DATABASE).set(database=name).render_as_string(hide_password=False), log_level)
        sampler = None
        try:
            await fleet.upstream.start()
            await fleet._start_replicas(replicas)
            await fleet._start_front()
            sampler = asyncio.create_task(fleet._sample())
            yield fleet
        finally:
            if sampler is not None:
                sampler.cancel()
            await fleet._teardown()
            redis.stop()
            conn = await asyncpg.connect(_dsn(DATABASE), timeout=5)
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def _env(self) -> dict[str, str]:
        providers = [{"name": "chaos", "base_url": f"http://127.0.0.1:{self.upstream.port}/v1", "api_key_env": None}]
        return {**os.environ, "FOUNDRY_PROVIDERS": json.dumps(providers), "FOUNDRY_LOG_LEVEL": self.log_level,
                "FOUNDRY_REDIS_URL": self.redis_url, "FOUNDRY_DATABASE_URL": self.database_url,
                "FOUNDRY_ADMIN_KEY": ADMIN, "FOUNDRY_REDIS_LEASE_SECONDS": str(self.lease_seconds),
                "FOUNDRY_REDIS_TIMEOUT_SECONDS": "1",
                "FOUNDRY_READ_TIMEOUT": "3", "FOUNDRY_PRICES": json.dumps({"chaos/*": {"input": 1.0, "output": 2.0}}),
                "FOUNDRY_KEY_CACHE_SECONDS": "1", "FOUNDRY_DATA_DIR": str(self.tmp)}

    async def _start_replicas(self, n: int) -> None:
        for i in range(n):
            port = free_port()
            # as users run it (its graceful-shutdown bound, request deadline and keep-alive: the
            # soak's SIGTERMs meet what production's do)
            self.replicas.append(Proc([*serve_command(), "--port", str(port)], port, self._env(), "/healthz",
                                      self.logs / f"replica-{i}.log"))
        await asyncio.gather(*(r.start() for r in self.replicas))

    def index_of(self, port: int) -> int:
        """Which replica listens on a port (-1: none)."""
        return next((i for i, r in enumerate(self.replicas) if r.port == port), -1)

    def keep_logs(self) -> str:
        """Keep the replicas' logs past the fleet's teardown (an invariant broke): their folder."""
        if self._kept is None:
            self._kept = Path(tempfile.mkdtemp(prefix="foundry-chaos-logs-"))
            for log in self.logs.glob("*.log"):
                shutil.copy(log, self._kept / log.name)
        return str(self._kept)

    def live_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{r.port}" for r in self.replicas if r.alive()]

    # -- the front door ---------------------------------------------------------------------

    async def _start_front(self) -> None:
        port = free_port()
        self.front = f"http://127.0.0.1:{port}"
        nginx = _nginx_path()
        if nginx is None:
            self._balancer = await asyncio.start_server(self._relay, "127.0.0.1", port)
            return
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.tmp / sub).mkdir(exist_ok=True)
        site = (ROOT / "deploy" / "nginx.conf").read_text()
        servers = "".join(f"    server 127.0.0.1:{r.port} max_fails=1 fail_timeout=2s;\n" for r in self.replicas)
        head, _, rest = site.partition("upstream foundry_gateway {\n")
        site = head + "upstream foundry_gateway {\n" + servers + rest[rest.index("    keepalive"):]
        site = site.replace("listen 8000;", f"listen 127.0.0.1:{port};")
        conf = self.tmp / "nginx.conf"
        conf.write_text(
            ("user root;\n" if os.geteuid() == 0 else "") +
            f"daemon off;\nworker_processes 1;\npid {self.tmp}/nginx.pid;\nerror_log stderr crit;\n"
            "events { worker_connections 2048; }\nhttp {\n access_log off;\n" +
            "".join(f" {sub}_temp_path {self.tmp}/{sub};\n" for sub in ("proxy", "fastcgi", "uwsgi", "scgi")) +
            f" client_body_temp_path {self.tmp}/body;\n" + site + "\n}\n")
        self._nginx = _spawn([nginx, "-c", str(conf), "-p", str(self.tmp)], start_new_session=True)
        await asyncio.to_thread(_wait_http, f"{self.front}/healthz", self._nginx, "nginx")

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The loopback balancer (no nginx): round robin over the live replicas, next one on refusal."""
        ports = [r.port for r in self.replicas if r.alive()] or [self.replicas[0].port]
        start = int(time.monotonic() * 1000)
        for k in range(len(ports)):
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", ports[(start + k) % len(ports)])
                break
            except OSError:
                continue
        else:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    # -- faults ---------------------------------------------------------------------------------

    async def fault(self, kind: str, index: int) -> None:
        if kind in ("term", "kill"):
            replica = self.replicas[index]
            self._account(replica)
            await replica.stop(signal.SIGTERM if kind == "term" else signal.SIGKILL)
            await asyncio.sleep(1.0)
            await replica.start()
        elif kind == "upstream":
            await self.upstream.stop(signal.SIGKILL)
            await asyncio.sleep(4.0)
            await self.upstream.start()
        elif kind == "redis":
            if isinstance(self.redis, RedisClusterServer):
                old, _ = await asyncio.to_thread(self.redis.kill_master_of, "chaos")
                old.start()  # it rejoins as a replica of the promoted one
            else:
                self.redis.kill()
                await asyncio.sleep(2.0)
                await asyncio.to_thread(self.redis.start)

    def _account(self, replica: Proc) -> None:
        if replica.alive():
            assert replica.proc is not None
            with contextlib.suppress(OSError):
                self.cpu_total += cpu_seconds(replica.proc.pid) - replica.cpu_base

    async def _sample(self) -> None:
        while True:
            total = 0
            for r in self.replicas:
                if r.alive() and r.proc is not None:
                    with contextlib.suppress(OSError, RuntimeError):
                        total += rss_bytes(r.proc.pid)
            self.rss_peak = max(self.rss_peak, total // max(1, len(self.replicas)))
            await asyncio.sleep(1.0)

    # -- figures and the end ----------------------------------------------------------------------

    async def make_key(self) -> str:
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(f"{self.front}/v1/admin/keys", headers={"authorization": f"Bearer {ADMIN}"},
                                  json={"name": "chaos", "budget_usd": 1_000_000.0})
            r.raise_for_status()
        self.key_id = r.json()["id"]
        return str(r.json()["key"])

    def commandstats(self) -> dict[str, int]:
        if isinstance(self.redis, RedisClusterServer):
            return self.redis.commandstats()
        with _redis_at(self.redis.port) as client:
            try:
                return {name.removeprefix("cmdstat_"): int(f["calls"]) for name, f in client.info("commandstats").items()}
            except sync_redis.RedisError:
                return {}

    def stream_state(self, stream_id: str) -> str:
        """What Redis holds of one stream now (its meta without the record, its events' range),
        for a broken stream's timeline."""
        port = (self.redis.master_of(f"foundry:{{{stream_id}}}:meta").port if isinstance(self.redis, RedisClusterServer)
                else self.redis.port)
        with _redis_at(port) as client:
            try:
                meta = {k.decode(): v.decode(errors="replace")[:40] for k, v in
                        client.hgetall(f"foundry:{{{stream_id}}}:meta").items() if k != b"record"}
                events = client.xinfo_stream(f"foundry:{{{stream_id}}}:events") if meta else {}
                return (f"redis: meta {meta or 'missing'}; events {events.get('length', 0)} entries, last id "
                        f"{events.get('last-generated-id', b'-').decode()}")
            except sync_redis.RedisError as exc:
                return f"redis: {type(exc).__name__}"

    def redis_memory(self) -> int:
        """Bytes Redis holds now (used_memory, summed over the live masters of a cluster)."""
        nodes = ([n.port for n in self.redis.nodes if n.alive() and n.role() == "master"]
                 if isinstance(self.redis, RedisClusterServer) else [self.redis.port])
        total = 0
        for port in nodes:
            with _redis_at(port) as client, contextlib.suppress(sync_redis.RedisError):
                total += int(client.info("memory")["used_memory"])
        return total

    async def stop_replicas(self) -> None:
        for replica in self.replicas:
            self._account(replica)
        await asyncio.gather(*(r.stop() for r in self.replicas))

    async def records(self) -> dict[str, dict[str, Any]]:
        conn = await asyncpg.connect(_dsn(self.database_url), timeout=5)
        try:
            rows = await conn.fetch("SELECT id, owner, status, output_tokens, cost_usd FROM runs")
        finally:
            await conn.close()
        return {row["id"]: dict(row) for row in rows}

    async def spend_counter(self, key_id: str = "") -> float | None:
        """The key's budget counter for this month, as the gateway reads it (its limiter)."""
        limiter = RedisLimiter(self.redis_url)
        try:
            return await limiter.spend(key_id or self.key_id, month_of(datetime.now(UTC)))
        finally:
            await limiter.aclose()

    async def _teardown(self) -> None:
        if self._balancer is not None:
            self._balancer.close()
        if self._nginx is not None and self._nginx.poll() is None:
            os.killpg(self._nginx.pid, signal.SIGKILL)
            self._nginx.wait(10)
        for replica in self.replicas:
            await replica.stop(signal.SIGKILL)
        await self.upstream.stop(signal.SIGKILL)
