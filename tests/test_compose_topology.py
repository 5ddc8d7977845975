"""docker-compose.yml, started as processes on loopback: a private redis-server, a fresh PostgreSQL
database, the two gateway replicas with exactly the compose environment and command, and Debian's
nginx running deploy/nginx.conf (its upstream addresses rewritten to the replicas' ports). Through
nginx: a stream, resumed on either replica with Last-Event-ID, and a drain (SIGTERM) of one replica
during which no 503 reaches the client (nginx resends a gateway's 503 to the other replica)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.lifecycle import drain_budget
from tests.compose_support import load_compose, seconds, service_environment
from tests.support import REPO
from tests.support import free_port as _free_port

pytestmark = pytest.mark.slow

ADMIN = "compose-admin-key-0123456789abcdef"
PASSWORD = "compose-pg-password-not-used-by-trust"
GUARD = 30.0




def _nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is not installed (.ci/run installs Debian's package)")
        pytest.skip("nginx is not installed (apt-get install nginx)")
    return found


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not on PATH")
        pytest.skip("redis-server is not on PATH")
    return found


class Process:
    """A child process whose output lines are kept, with a wait for a line that says something."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc, self.name, self.lines = proc, name, []
        self._seen: list[tuple[str, asyncio.Event]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            for text, event in self._seen:
                if text in line:
                    event.set()

    async def said(self, text: str) -> None:
        event = asyncio.Event()
        if any(text in line for line in self.lines):
            return
        self._seen.append((text, event))
        waiter = asyncio.create_task(event.wait())
        done, _ = await asyncio.wait({waiter, self._reader}, timeout=GUARD, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            pytest.fail(f"{self.name} did not say {text!r}:\n" + "".join(self.lines[-30:]))

    async def stop(self) -> None:
        """Kill the process and its children (nginx's worker holds the output pipe too)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: start_new_session below
        await self.proc.wait()
        await self._reader


async def _start(name: str, *argv: str, env: dict[str, str], cwd: Path = REPO) -> Process:
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    return Process(proc, name)


def _nginx_conf(tmp: Path, site: str, uid_root: bool) -> Path:
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir()
    conf = tmp / "nginx.conf"
    conf.write_text(
        ("user root;\n" if uid_root else "") +
        f"daemon off;\nworker_processes 1;\npid {tmp}/nginx.pid;\nerror_log stderr warn;\n"
        "events { worker_connections 256; }\n"
        "http {\n access_log off;\n"
        f" client_body_temp_path {tmp}/body;\n proxy_temp_path {tmp}/proxy;\n fastcgi_temp_path {tmp}/fastcgi;\n"
        f" uwsgi_temp_path {tmp}/uwsgi;\n scgi_temp_path {tmp}/scgi;\n" + site + "\n}\n")
    return conf


@contextlib.asynccontextmanager
async def compose_topology(tmp: Path, database_url: str) -> AsyncIterator[dict[str, Any]]:
    """Everything docker-compose.yml starts, on loopback; yields the front door and the replicas."""
    nginx, redis_server = _nginx(), _redis_server()
    database = make_url(database_url)
    environ = {"FOUNDRY_ADMIN_KEY": ADMIN, "POSTGRES_PASSWORD": PASSWORD, "POSTGRES_USER": database.username or "",
               "POSTGRES_DB": database.database or ""}
    services = load_compose(REPO / "docker-compose.yml", environ)["services"]
    ports = {name: _free_port() for name in services}
    loopback = {"redis:6379": f"127.0.0.1:{ports['redis']}", "@postgres:5432": f"@{database.host}:{database.port}"}
    processes: list[Process] = []
    base_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    try:
        redis_dir = tmp / "redis"
        redis_dir.mkdir()
        redis_cmd = services["redis"]["command"]
        assert redis_cmd[0] == "redis-server"
        redis = await _start("redis", redis_server, *redis_cmd[1:], "--port", str(ports["redis"]), "--bind",
                             "127.0.0.1", "--dir", str(redis_dir), env=base_env)
        processes.append(redis)
        await redis.said("Ready to accept connections")

        replicas: dict[str, dict[str, Any]] = {}
        for name in ("gateway-a", "gateway-b"):
            service = services[name]
            env = service_environment(service)
            for host, address in loopback.items():
                env = {k: v.replace(host, address) for k, v in env.items()}
            command = list(service["command"])
            assert command[:2] == ["foundry-gateway", "serve"], command
            command[command.index("--host") + 1] = "127.0.0.1"
            command[command.index("--port") + 1] = str(ports[name])
            process = await _start(name, sys.executable, "-m", "app", *command[1:], env={**base_env, **env})
            processes.append(process)
            replicas[name] = {"process": process, "url": f"http://127.0.0.1:{ports[name]}", "env": env,
                              "stop_grace": seconds(service["stop_grace_period"])}
        for replica in replicas.values():
            await replica["process"].said("Uvicorn running on")

        site = (REPO / "deploy" / "nginx.conf").read_text()
        for name in replicas:
            site, n = re.subn(rf"server {name}:8000", f"server 127.0.0.1:{ports[name]}", site)
            assert n == 1, f"deploy/nginx.conf has no upstream {name}:8000"
        site, n = re.subn(r"listen 8000;", f"listen 127.0.0.1:{ports['nginx']};", site)
        assert n == 1
        conf = _nginx_conf(tmp, site, os.geteuid() == 0)
        front = await _start("nginx", nginx, "-c", str(conf), "-p", str(tmp), env=base_env)
        processes.append(front)
        url = f"http://127.0.0.1:{ports['nginx']}"
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(200):  # until nginx listens (its start says nothing on stderr)
                with contextlib.suppress(httpx.TransportError):
                    await client.get(url + "/healthz")
                    break
                assert front.proc.returncode is None, "".join(front.lines)
                await asyncio.sleep(0.05)
        yield {"url": url, "replicas": replicas, "processes": processes}
    finally:
        for process in reversed(processes):
            await process.stop()


def _frames(text: str) -> list[dict[str, Any]]:
    frames = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            frames.append({"id": int(fields["id"]), "event": fields["event"], "data": json.loads(fields["data"])})
    return frames


@pytest.fixture
def compose_database(postgres: Callable[[], str]) -> str:
    """A fresh PostgreSQL database on the machine's server (dropped at the end of the session)."""
    return postgres()


async def test_compose_topology_streams_resumes_and_drains_through_nginx(tmp_path: Path, compose_database: str) -> None:
    async with compose_topology(tmp_path, compose_database) as topology, httpx.AsyncClient(timeout=GUARD) as client:
        front, (a, b) = topology["url"], topology["replicas"].values()
        # the drain is fitted into compose's stop grace (one variable sets both)
        assert a["env"]["FOUNDRY_STOP_GRACE_SECONDS"] == "30" and a["stop_grace"] == 30.0
        assert drain_budget(a["stop_grace"]) > 0

        # a key made by the operator's command line, on the compose database
        made = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "keys", "create", "compose-team", cwd=REPO, env={**os.environ, **a["env"]},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await made.communicate()
        assert made.returncode == 0, err.decode()
        key = json.loads(out)["key"]
        headers = {"Authorization": f"Bearer {key}"}
        assert (await client.post(front + "/v1/generate", json={"model": "mock/simple", "messages": [
            {"role": "user", "content": "hi"}]})).status_code == 401  # compose requires keys
        assert (await client.get(front + "/metrics")).status_code == 404  # not through the front door

        # a stream through nginx, resumed after event 3 on each replica (one of them did not run it)
        body = {"model": "mock/lorem-30", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "provider_options": {"delay_ms": 10}}
        started = await client.post(front + "/v1/generate", json=body, headers=headers)
        assert started.status_code == 202, started.text
        stream_id = started.json()["stream_id"]
        whole = _frames((await client.get(f"{front}/v1/stream/{stream_id}?after=0", headers=headers)).text)
        assert whole[-1]["event"] == "final" and whole[-1]["data"]["status"] == "ok"
        for replica in (a, b):
            resumed = await client.get(f"{replica['url']}/v1/stream/{stream_id}",
                                       headers={**headers, "Last-Event-ID": "3"})
            assert resumed.status_code == 200
            assert _frames(resumed.text) == whole[3:]

        # drain replica A with a stream running on it: no 503 reaches a client of the front door
        slow = {**body, "model": "mock/lorem-60", "provider_options": {"delay_ms": 50}}
        del slow["stream"]
        async with client.stream("POST", a["url"] + "/v1/stream", json=slow, headers=headers) as running:
            lines = running.aiter_lines()
            async for line in lines:
                if line.startswith("event: token"):
                    break
            a["process"].proc.send_signal(signal.SIGTERM)
            for _ in range(200):  # until A says it drains (readiness is the signal's only outward sign)
                if (await client.get(a["url"] + "/readyz")).status_code == 503:
                    break
                await asyncio.sleep(0.02)
            else:
                pytest.fail("replica A never started draining")
            statuses = []
            for _ in range(10):  # nginx sends some to A, which refuses them (503 shutdown) while it drains
                answer = await client.post(front + "/v1/generate", json={
                    "model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}, headers=headers)
                statuses.append(answer.status_code)
            assert statuses == [200] * 10, statuses
            rest = "\n".join([line async for line in lines])
        assert any('"status": 503' in line for line in a["process"].lines)  # A did refuse some: nginx resent them
        assert '"status":"ok"' in rest.replace(" ", "")  # the running stream finished within the grace
        # uvicorn ends by the signal it was given, once drained (it re-raises it after its shutdown)
        assert await asyncio.wait_for(a["process"].proc.wait(), GUARD) in (0, -signal.SIGTERM)
    logs = "".join(line for p in topology["processes"] for line in p.lines)
    assert ADMIN not in logs and key not in logs and PASSWORD not in logs
    assert '"provider"' in logs and '"stream_store"' in logs and '"auth"' in logs
