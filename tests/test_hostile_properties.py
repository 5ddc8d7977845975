"""Property: whatever Unicode a request carries (lone surrogates included), the gateway answers a
4xx JSON error or a stream with exactly one `final`. HTTP under uvicorn, served from a thread."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.main import create_app
from app.settings import Settings
from tests.support import KEEP_ALIVE_SECONDS, parse_sse

# Any code point, lone surrogates included (Cs), which JSON carries as \udXXX escapes.
text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
scalar = st.one_of(text, st.integers(-5, 5), st.booleans(), st.none(), st.floats(allow_nan=False))
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(text, inner, max_size=3)), max_leaves=8)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "x"]), "content": text})
body = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["mock/echo", "mock/simple", "mock/lorem-3"]), text),
     "messages": st.lists(message, min_size=1, max_size=3)},
    optional={"tools": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["t", "u"]), "description": text}),
                                max_size=2),
              "provider_options": st.dictionaries(text, value, max_size=2),
              "validators": st.lists(st.fixed_dictionaries(
                  {"name": st.sampled_from(["regex_deny", "banned_words", "json_schema", "pii"]),
                   "config": st.dictionaries(st.sampled_from(["patterns", "words", "schema", "action"]), value,
                                             max_size=2)}), max_size=2),
              "chunking": st.one_of(st.sampled_from(["none", "word"]), text),
              "extra": value},
)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(create_app(Settings()), log_level="warning", lifespan="on",
                                           timeout_keep_alive=int(KEEP_ALIVE_SECONDS)))  # see tests/support.py
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(request=body, path=st.sampled_from(["/v1/stream", "/v1/generate"]))
def test_any_unicode_gives_a_4xx_json_or_exactly_one_final(base_url: str, request: dict[str, Any], path: str) -> None:
    raw = json.dumps(request).encode()  # ensure_ascii: surrogates travel as escapes, as an attacker sends them
    with httpx.Client(base_url=base_url, timeout=60) as client:
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
    if 400 <= r.status_code < 500:
        assert r.headers["content-type"].startswith("application/json")
        assert {"code", "message"} <= set(r.json()["error"])
        return
    assert r.status_code != 500 or r.json()["error"]["code"] == "internal_error", r.text
    if path == "/v1/generate":
        assert r.headers["content-type"].startswith("application/json")
        _status_follows_the_error(r.json(), request)
        return
    events = parse_sse(r.content)
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    _status_follows_the_error(events[-1][2], request)


def _status_follows_the_error(final: dict[str, Any], request: dict[str, Any]) -> None:
    """One status for each ending: ok without an error, blocked by a validator the request names
    (`validation_failed`), error with any other code."""
    error = final.get("error")
    if error is None:
        assert final["status"] == "ok", final
    elif error["code"] == "validation_failed":
        assert final["status"] == "blocked" and request.get("validators"), final
    else:
        assert final["status"] == "error", final
