"""One log pipeline: uvicorn's, the libraries' and the gateway's lines all leave as JSON through
structlog's ProcessorFormatter, scrubbed alike. An exception that carries a provider key and a
configured password, raised in a route under uvicorn, reaches the log without either."""

from __future__ import annotations

import asyncio
import json
import logging
import logging.config
import socket

import httpx
import pytest
import uvicorn

from app.main import create_app
from app.observability import logging_config
from app.settings import Settings

KEY = "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv"
PASSWORD = "pw-Records-Secret-4242"


async def test_a_raised_secret_never_reaches_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(records=False, log_json=True,
                        database_url=f"postgresql+asyncpg://foundry:{PASSWORD}@db.internal:5432/foundry")
    app = create_app(settings)

    async def boom() -> None:
        raise RuntimeError(f"upstream said: Incorrect API key provided: {KEY}; database password {PASSWORD}")

    app.add_api_route("/boom", boom)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(app, log_config=logging_config("info", json=True), access_log=True, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            assert (await client.get("/boom")).status_code == 500
        logging.getLogger("sqlalchemy.engine").warning("connect failed for %s", PASSWORD)  # a library's line
    finally:
        server.should_exit = True
        await task
        sock.close()
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines and all(isinstance(line, dict) for line in lines)  # every line JSON, uvicorn's included
    failure = [line for line in lines if str(line.get("event")).startswith("Exception in ASGI application")]
    assert failure and "RuntimeError" in failure[0]["exception"] and "[redacted]" in failure[0]["exception"]
    assert any(line.get("logger") == "sqlalchemy.engine" for line in lines)
    assert KEY not in out and PASSWORD not in out and "\x1b[" not in out


def test_plain_lines_have_no_colour_codes_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    logging.config.dictConfig(logging_config("info", json=False))
    logging.getLogger("uvicorn.error").info("plain line")
    out = capsys.readouterr().out
    assert "plain line" in out and "\x1b[" not in out
