"""A request that trickles in is cut: a real `foundry-gateway serve` process with a 1 s request
deadline, and sockets that send their head (or their body) a byte at a time, or nothing at all.
Each gets a 408 JSON error or a closed connection, while ordinary requests are served. The
deadline is waited for as an event (the socket closing); the test's own guard is far above it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.support import REPO
from tests.support import free_port as _free_port

pytestmark = pytest.mark.slow  # starts a gateway process (make test runs the slow tests after the rest)

GUARD = 60.0
HEAD = b"POST /v1/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n"




def _trickle(port: int, burst: bytes, data: bytes, answers: list[bytes], stop: threading.Event) -> None:
    """Send `burst` at once, then `data` a byte every 50 ms (then nothing) until the server answers
    or closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as sock:
        sock.sendall(burst)
        sock.settimeout(0.05)
        received = b""
        for i in range(len(data) + int(GUARD / 0.05)):
            if stop.is_set():
                break
            if i < len(data):
                try:
                    sock.sendall(data[i:i + 1])
                except OSError:
                    break
            try:
                part = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not part:
                break
            received += part
        answers.append(received)


def test_a_trickling_request_head_or_body_is_cut_after_the_deadline() -> None:
    port = _free_port()
    env = {**os.environ, "FOUNDRY_REQUEST_TIMEOUT_SECONDS": "1", "FOUNDRY_RECORDS": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = threading.Event()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client:
            started = time.monotonic()
            while True:
                assert proc.poll() is None, "the gateway exited while starting"
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() - started < GUARD, "the gateway did not start"
                time.sleep(0.05)
            answers: list[bytes] = []
            # heads a byte at a time, a whole head then its body a byte at a time, nothing at all
            slow = [(b"", HEAD)] * 20 + [(HEAD, b'{"model": "mock/simple", "messages": []')] * 5 + [(b"", b"")] * 5
            threads = [threading.Thread(target=_trickle, args=(port, *data, answers, stop)) for data in slow]
            for thread in threads:
                thread.start()
            ask = {"model": "mock/simple", "messages": [{"role": "user", "content": "x"}]}
            assert client.post("/v1/generate", json=ask).status_code == 200  # served meanwhile
            for thread in threads:
                thread.join(GUARD)
            assert not any(thread.is_alive() for thread in threads), "a trickling connection was never cut"
        assert len(answers) == len(slow)
        for answer in answers:
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:100]
            if answer:
                assert b'"code":"request_timeout"' in answer
        assert sum(a.startswith(b"HTTP/1.1 408 ") for a in answers) >= 25
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
