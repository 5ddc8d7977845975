"""The Streamable HTTP MCP server of the tests (tests/mcp_servers.py `http`) in a process of its own."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from app.tools.mcp_config import McpServerConfig
from tests.support import REPO
from tests.support import free_port as _free_port

REMOTE_TOKEN = "remote-bearer-token-0123456789"




@contextlib.contextmanager
def http_mcp_server() -> Iterator[McpServerConfig]:
    """The server on a free loopback port, and its configuration (the bearer read from
    MCP_TEST_REMOTE_TOKEN, which this sets)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.mcp_servers", "http", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ["MCP_TEST_REMOTE_TOKEN"] = REMOTE_TOKEN
    try:
        deadline = time.monotonic() + 120  # a guard against a server that never listens, not a timing
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Streamable HTTP MCP server did not start")
            time.sleep(0.1)
        yield McpServerConfig(name="remote", transport="http", url=f"http://127.0.0.1:{port}/mcp",
                              bearer_env="MCP_TEST_REMOTE_TOKEN", connect_timeout=60)
    finally:
        proc.terminate()
        proc.wait(10)
