"""Graceful drain: a real gateway process, started as the Dockerfile starts it (`foundry-gateway serve`), gets
SIGTERM with a stream in flight. /readyz turns 503 and new runs are refused at once; a stream
that finishes within FOUNDRY_SHUTDOWN_GRACE_SECONDS ends normally; one still running after it
ends with `final{status: "error", error.code: "shutdown", retryable: true}`, its upstream request
closed; the process exits. The fake upstream runs in the test's loop on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support import REPO, parse_sse, serve
from tests.support import free_port as _free_port
from tests.upstream_fakes import Fault, FaultServer

pytestmark = pytest.mark.slow  # starts processes (make test runs the slow tests after the rest)

GUARD = 30.0
HELLO = [{"role": "user", "content": "Hello"}]




@contextlib.asynccontextmanager
async def gateway_process(upstream: str, grace: float) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("FOUNDRY_")}
    # its records in the session's temporary data directory (tests/conftest.py), never the checkout's ./var
    env.update(FOUNDRY_DATA_DIR=os.environ["FOUNDRY_DATA_DIR"],
               FOUNDRY_PROVIDERS=json.dumps([{"name": "up", "base_url": f"{upstream}/v1"}]),
               FOUNDRY_SHUTDOWN_GRACE_SECONDS=str(grace), FOUNDRY_LOG_LEVEL="info")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port), cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(GUARD):  # wait for uvicorn to say it listens (a log line on stdout)
            while b"Uvicorn running on" not in (line := await proc.stdout.readline()):
                assert line, "the gateway process exited before it listened"
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _first_token(lines: AsyncIterator[str]) -> None:
    async for line in lines:
        if line.startswith("event: token"):
            return


async def _drain_case(fault: Fault, grace: float, release: bool) -> tuple[list, FaultServer, httpx.Response,
                                                                          httpx.Response, int]:
    server = FaultServer({"held": [fault]})
    async with serve(server) as upstream, gateway_process(upstream, grace) as (proc, url):
        async with httpx.AsyncClient(base_url=url, timeout=GUARD) as client:
            assert (await client.get("/readyz")).status_code == 200
            async with client.stream("POST", "/v1/stream", json={"model": "up/held", "messages": HELLO}) as response:
                lines = response.aiter_lines()
                await asyncio.wait_for(_first_token(lines), GUARD)
                proc.send_signal(signal.SIGTERM)
                async with httpx.AsyncClient(base_url=url, timeout=GUARD) as other:  # a new connection
                    async with asyncio.timeout(GUARD):
                        # another process takes the signal when it will: nothing here to wait on but its answer
                        while (ready := await other.get("/readyz")).status_code == 200:  # noqa: ASYNC110
                            await asyncio.sleep(0.02)
                    refused = await other.post("/v1/stream", json={"model": "up/held", "messages": HELLO})
                if release:
                    server.release.set()
                rest = "\n".join([line async for line in lines])
            code = await asyncio.wait_for(proc.wait(), GUARD)
    return parse_sse(rest), server, ready, refused, code


async def test_sigterm_lets_a_stream_finish_within_the_grace() -> None:
    events, server, ready, refused, code = await _drain_case(Fault("held", text="Hello"), grace=20, release=True)
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutdown"
    final = events[-1][2]
    assert events[-1][1] == "final" and final["status"] == "ok"
    assert final["message"]["content"] == "Hello and done."
    assert code == -signal.SIGTERM  # uvicorn re-raises the signal it handled once it has shut down
    assert len(server.served) == 1


async def test_sigterm_cuts_a_stream_still_running_after_the_grace() -> None:
    events, server, ready, refused, code = await _drain_case(Fault("held", text="Hello"), grace=0.5, release=False)
    assert ready.status_code == 503 and refused.status_code == 503
    final = events[-1][2]
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    assert final["status"] == "error" and final["message"]["content"] == "Hello"
    assert final["error"]["code"] == "shutdown" and final["error"]["retryable"] is True
    await asyncio.wait_for(server.served[0].done.wait(), GUARD)
    assert server.served[0].gone  # the upstream request was closed
    assert code == -signal.SIGTERM
