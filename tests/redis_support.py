"""A private Redis for the tests, and gateway replicas as real uvicorn processes sharing it.

`redis_url` (session fixture) starts `redis-server` from PATH on a free loopback port (no disk),
or uses FOUNDRY_TEST_REDIS_URL. Without either the Redis tests skip, with the reason, except
under CI=true, where they fail: CI must prove the shared store against a real Redis.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support import REPO, free_port


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"Redis tests must run in CI: {reason}")
    pytest.skip(reason)


def _wait(check, what: str, proc: subprocess.Popen | None, timeout: float = 180.0, output=None) -> None:
    """Poll a process-readiness check (a process we started has no event to await)."""
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            said = output() if output is not None else proc.stderr.read().decode()
            raise RuntimeError(f"{what} exited with {proc.returncode}: {said[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up")
        time.sleep(0.05)


class RedisServer:
    """A private redis-server process on 127.0.0.1 (killed with kill(), restarted with start())."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            unavailable("no redis-server on PATH and FOUNDRY_TEST_REDIS_URL is unset")
        self.exe = exe
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="foundry-redis-")
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait(self.ping, "redis-server", self.proc)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("FOUNDRY_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A Redis of this test's own, which the test may kill."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


class Replica:
    """One gateway process (`uvicorn app.main:app`) on a free loopback port."""

    def __init__(self, redis_url: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "FOUNDRY_REDIS_URL": redis_url, "FOUNDRY_LOG_LEVEL": "warning",
                    "FOUNDRY_REDIS_LEASE_SECONDS": "2", "FOUNDRY_REDIS_TIMEOUT_SECONDS": "1", **env}
        self.proc: subprocess.Popen | None = None
        # Its log (stdout and stderr) goes to a file, never to a pipe nobody reads: a replica that logs more than a pipe
        # holds (a Redis away for long: a warning per failed command) would block on its next line.
        self._log = tempfile.TemporaryFile()

    def output(self) -> str:
        """What the process logged (stdout and stderr), for a failing test's message."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def start(self) -> Replica:
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> Replica:
        """The process started, not yet waited for (`start_together`)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning", "--no-access-log"],
            cwd=REPO, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def wait_ready(self) -> None:
        _wait(self._healthy, "gateway replica", self.proc, output=self.output)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the lease is simply not renewed any more)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()




def start_together(*replicas: Replica) -> tuple[Replica, ...]:
    """Start every replica at once, then wait until each serves: their start-ups (mostly imports)
    overlap instead of queueing. If one never serves, all are stopped."""
    try:
        for replica in replicas:
            replica.launch()
        for replica in replicas:
            replica.wait_ready()
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas


def written_back(answer: httpx.Response, *replicas: Replica) -> bool:
    """A resume answered 200 once the owner wrote its stream back, 503 (retryable) until then; a
    failure shows the end of each of `replicas`' log."""
    assert answer.status_code in (200, 503), answer.text + "".join(
        f"\n--- {replica.url}:\n{replica.output()[-4000:]}" for replica in replicas)
    return answer.status_code == 200
