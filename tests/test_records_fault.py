"""Records never take the process down: a real gateway process on a SQLite file whose shared-memory
file (`foundry.db-shm`, the WAL index SQLite maps into memory) is cut to nothing mid-run. With an
mmap'd WAL index the next record write touches a page past the file's end: SIGBUS, the process
dies and every running stream is cut without its final. The store keeps no such file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import REPO, parse_sse
from tests.support import free_port as _free_port

pytestmark = pytest.mark.slow  # starts a gateway process (make test runs the slow tests after the rest)

DEADLINE = 60.0  # the test's own bound, not a performance claim
ASK = {"model": "mock/simple", "messages": [{"role": "user", "content": "x"}]}




def _wait_ready(client: httpx.Client, proc: subprocess.Popen[bytes]) -> None:
    started = time.monotonic()
    while True:
        assert proc.poll() is None, "the gateway exited while starting"
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() - started < DEADLINE, "the gateway did not start"
        time.sleep(0.05)


def _finals(client: httpx.Client) -> list[dict]:
    events = parse_sse(client.post("/v1/stream", json=ASK).content)
    return [d for _, e, d in events if e == "final"]


def test_a_shared_memory_file_cut_mid_run_does_not_kill_the_process(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "FOUNDRY_DATA_DIR": str(tmp_path), "FOUNDRY_RECORDS_LINGER": "0.01"}
    env.pop("FOUNDRY_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(port),
         "--no-access-log"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE) as client:
            _wait_ready(client, proc)
            assert [f["status"] for f in _finals(client)] == ["ok"]
            database = tmp_path / "foundry.db"
            for _ in range(int(DEADLINE / 0.05)):  # the first record written: the database is in use
                if client.get("/v1/runs").json().get("data"):
                    break
                time.sleep(0.05)
            shm = Path(f"{database}-shm")
            if shm.exists():
                os.truncate(shm, 0)  # the fault: the mapped WAL index is gone under the process
            for _ in range(5):
                assert proc.poll() is None, f"the gateway died (signal {-proc.returncode})"
                assert [f["status"] for f in _finals(client)] == ["ok"]
                assert client.get("/v1/runs").status_code == 200
            metrics = client.get("/metrics").text
            assert proc.poll() is None
            assert "foundry_records_written_total" in metrics
        assert not shm.exists(), "the records store keeps a memory-mapped WAL index"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
