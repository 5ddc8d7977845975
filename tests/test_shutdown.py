"""SIGTERM with a real uvicorn process (the Makefile's command): the process exits in bounded
time and a running stream gets its `final{status: error, error.code: shutdown, retryable}`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from tests.support import REPO, parse_sse
from tests.support import free_port as _free_port

DEADLINE = 60.0  # the test's own bound, far above the configured grace: not a performance claim




def test_sigterm_ends_running_streams_with_a_shutdown_final_and_the_process_exits():
    port = _free_port()
    env = {**os.environ, "FOUNDRY_SHUTDOWN_GRACE_SECONDS": "0.5"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(port),
         "--no-access-log", "--timeout-graceful-shutdown", "10"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=DEADLINE) as client:
            started = time.monotonic()
            while True:  # the process is starting: wait until it answers
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() - started < DEADLINE, "the gateway did not start"
                time.sleep(0.05)
            # A stream of about 100 s: 1000 tokens, 100 ms apart.
            body = {"model": "mock/lorem-1000", "messages": [{"role": "user", "content": "x"}],
                    "provider_options": {"delay_ms": 100}}
            with client.stream("POST", "/v1/stream", json=body) as response:
                raw = b""
                signalled = False
                for chunk in response.iter_bytes():
                    raw += chunk
                    if not signalled and b"event: token" in raw:
                        proc.send_signal(signal.SIGTERM)  # mid-stream
                        signalled = True
        events = parse_sse(raw)
        finals = [d for _, e, d in events if e == "final"]
        assert len(finals) == 1 and events[-1][1] == "final"
        assert finals[0]["status"] == "error"
        assert finals[0]["error"]["code"] == "shutdown" and finals[0]["error"]["retryable"] is True
        assert proc.wait(timeout=DEADLINE) is not None  # it exits: the SIGTERM is not waited out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
