"""What an operator reads in the log of a real `foundry-gateway serve`: the start-up lines say why each
provider is served (its key, not an "injected client"), where the Redis store is (host, port and
database; only a password is hidden), and warn of an unknown FOUNDRY_* variable as a structured
line; a configured provider without its key is "not served", never "unknown"; SIGTERM is logged
when it arrives, before the drain's own line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import httpx
import pytest

from app.config_load import load_settings, secret_values
from app.core import secrets
from app.startup import stream_store_label
from tests.redis_support import free_port
from tests.support import REPO

GUARD = 60.0


@pytest.mark.slow
async def test_the_start_up_lines_the_refusal_and_the_stop_signal(redis_url: str) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("FOUNDRY_")}
    env.update(OPENAI_API_KEY="sk-test-0123456789abcdefghijkl", FOUNDRY_REDIS_URL=redis_url, FOUNDRY_RECORDS="off",
               FOUNDRY_MAX_BODYBYTES="10", FOUNDRY_LOG_JSON="true",
               FOUNDRY_PROVIDERS=json.dumps([{"name": "groq", "base_url": "https://api.groq.com/openai/v1",
                                              "api_key_env": "GROQ_API_KEY"}]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port), cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    started: list[bytes] = []
    try:
        async with asyncio.timeout(GUARD):
            while b"Uvicorn running on" not in (line := await proc.stdout.readline()):
                assert line, "the gateway process exited before it listened"
                started.append(line)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                refused = await client.post("/v1/generate", json={"model": "groq/llama-3.1-8b-instant",
                                                                  "messages": [{"role": "user", "content": "hi"}]})
            proc.send_signal(signal.SIGTERM)
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = [json.loads(line) for line in [*started, *out.splitlines()] if line.startswith(b"{")]
    events = [line["event"] for line in lines]
    providers = {line["provider"]: line for line in lines if line["event"] == "provider"}
    assert providers["openai"]["why"] == "OPENAI_API_KEY set"
    assert providers["groq"]["served"] is False and providers["groq"]["why"] == "GROQ_API_KEY is not set"
    [store] = [line["store"] for line in lines if line["event"] == "stream_store"]
    assert store == redis_url.removesuffix("/")
    [unknown] = [line for line in lines if line["event"] == "unknown_setting"]
    assert unknown["level"] == "warning" and "FOUNDRY_MAX_BODYBYTES" in unknown["message"]
    assert b"FOUNDRY_MAX_BODYBYTES" not in err  # not a plain stderr line beside the structured log
    assert refused.status_code == 404
    assert "provider 'groq' is not served" in refused.json()["error"]["message"]
    assert "stop_signal" in events and "drained" in events
    assert events.index("stop_signal") < events.index("drained")
    [stop] = [line for line in lines if line["event"] == "stop_signal"]
    assert stop["signal"] == "SIGTERM"


def test_the_redis_store_line_hides_only_the_password() -> None:
    plain = load_settings(redis_url="redis://redis.internal:6380/2")
    secrets.remember(*secret_values(plain))
    assert secrets.scrub(stream_store_label(plain)) == "redis://redis.internal:6380/2"
    settings = load_settings(redis_url="redis://gateway:s3cret-Redis-pw@redis.internal:6380/2",
                             database_url="postgresql://foundry:db-pw@db.internal/foundry")
    secrets.remember(*secret_values(settings))
    assert secrets.scrub(stream_store_label(settings)) == "redis://redis.internal:6380/2"
    assert "s3cret-Redis-pw" not in secrets.scrub("connect to redis://gateway:s3cret-Redis-pw@redis.internal:6380/2")
    assert "db-pw" not in secrets.scrub("postgresql+asyncpg://foundry:db-pw@db.internal/foundry")
