"""A hostile or broken provider server against the gateway, both on loopback: no credential leaves
its origin, every upstream read is bounded, upstream text reaching the caller is truncated, and an
upstream `Retry-After` is passed on only as a sane number of seconds (tests/hostile_upstream.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.providers.config import ProviderConfig
from app.providers.descriptor import UpstreamRequest
from app.providers.upstream import bounded_read, client_session, send
from tests.hostile_upstream import (
    KEY,
    PROVIDERS,
    HostileUpstream,
    ask,
    endless_line,
    gzip_bomb,
    json_answer,
    provider_settings,
    raw_answer,
    redirect,
)
from tests.support import serve

GUARD = 60


async def _call(settings: Any, body: dict[str, Any], path: str = "/v1/generate") -> httpx.Response:
    async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
        return await client.post(path, json=body)


# -- no credential leaves its origin ---------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_to_another_port_never_carries_the_key(provider: str, status: int) -> None:
    async with HostileUpstream(json_answer(200, {})) as elsewhere:
        async with HostileUpstream(redirect(status, elsewhere.url + "/v1/steal")) as upstream:
            response = await _call(provider_settings(provider, upstream.url), ask(provider))
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "upstream_redirect"
    assert len(upstream.seen) == 1 and KEY in str(upstream.seen[0].credentials())
    # The second origin never saw the redirected request, let alone the key. (Only that request:
    # another test's readiness poll, `GET /healthz` to a port it used before, may land on this one.)
    assert [s for s in elsewhere.seen if s.path == "/v1/steal" or KEY in str(s.credentials())] == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_same_origin_redirect_is_not_followed_either(provider: str) -> None:
    async with HostileUpstream(redirect(307, "/v1/other")) as upstream:
        response = await _call(provider_settings(provider, upstream.url), ask(provider))
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_redirect"
    assert len(upstream.seen) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("location", [None, "", "/v1/messages", "http://[::1"])
async def test_loops_empty_and_broken_locations_are_502_everywhere(provider: str, location: str | None) -> None:
    async with HostileUpstream(redirect(302, location)) as upstream:
        for path in ("/v1/generate", "/v1/stream"):
            response = await _call(provider_settings(provider, upstream.url), ask(provider), path)
            assert response.status_code == 502, (path, response.text)
            assert response.json()["error"]["code"] == "upstream_redirect"


# -- every upstream read is bounded ----------------------------------------------------------


async def test_an_error_answer_is_read_only_up_to_the_cap_after_decompression() -> None:
    """A 500 whose gzip body inflates to 64 MiB: the gateway's own client reads at most
    `max_body_bytes` of it, decompressed, and stops reading there (closing the connection)."""
    bomb = gzip_bomb(64, prefix=b'{"error": {"message": "')
    async with HostileUpstream(raw_answer(500, bomb, [("content-encoding", "gzip"),
                                                      ("content-type", "application/json")])) as upstream:
        async with client_session(ProviderConfig(connect_timeout=5, read_timeout=5)) as session:
            response = await send(session, UpstreamRequest(url=upstream.url + "/v1/chat/completions", body=b"{}"), "p")
            assert response.status == 500
            content = await bounded_read(response, 4096)
            assert len(content) == 4096 and content.startswith(b'{"error": {"message": "AAA')
            assert response.closed  # not read on, not pooled


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_gzip_bomb_error_reaches_the_caller_as_a_short_502(provider: str) -> None:
    bomb = gzip_bomb(32, prefix=b'{"error": {"type": "api_error", "message": "', suffix=b'"}}')
    async with HostileUpstream(raw_answer(500, bomb, [("content-encoding", "gzip"),
                                                      ("content-type", "application/json")])) as upstream:
        response = await _call(provider_settings(provider, upstream.url, upstream_max_body_bytes=1 << 16),
                               ask(provider))
    assert response.status_code == 502, response.text[:300]
    assert len(response.content) < 2048


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_json_answer_where_an_event_stream_was_asked_is_read_only_at_its_start(provider: str) -> None:
    """A 200 `application/json` of 64 MiB that never ends sooner: a 502 naming the body's start,
    and the gateway let go of the connection long before the end."""
    async with HostileUpstream(endless_line(64 << 20, content_type="application/json")) as upstream:
        response = await _call(provider_settings(provider, upstream.url), ask(provider))
        await asyncio.wait_for(upstream.seen[0].gone.wait(), GUARD)
    assert response.status_code == 502 and "expected an event stream" in response.json()["error"]["message"]
    assert upstream.seen[0].sent < 64 << 20


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("encoding", [None, "gzip"])
async def test_an_sse_line_past_the_cap_ends_the_run_with_a_protocol_error(provider: str, encoding: str | None) -> None:
    """One `data:` line of 64 MiB (or a gzip bomb of one): the gateway stops at the cap, answers
    `upstream_protocol_error` and lets go of the upstream."""
    answer = endless_line(64 << 20, encoding=encoding)
    if encoding == "gzip":
        answer = raw_answer(200, gzip_bomb(64, prefix=b"data: "), [("content-type", "text/event-stream"),
                                                                   ("content-encoding", "gzip")])
    async with HostileUpstream(answer) as upstream:
        settings = provider_settings(provider, upstream.url, upstream_max_event_bytes=1 << 16)
        generated = await _call(settings, ask(provider))
        streamed = await _call(settings, ask(provider), "/v1/stream")
    assert generated.status_code == 502 and generated.json()["error"]["code"] == "upstream_protocol_error"
    # no event came before the line broke the cap, so the stream had not answered yet either
    assert streamed.status_code == 502 and streamed.json()["error"]["code"] == "upstream_protocol_error"
    if encoding is None:
        assert all(seen.sent < 64 << 20 for seen in upstream.seen)


async def test_healthz_answers_while_a_long_line_streams_in() -> None:
    """A 64 MiB line under a cap above it, read to its end while another client asks /healthz: it
    answers, mid-line (the decoder is linear; the timing is in bench/sse_decoder_bench.py)."""
    released = asyncio.Event()
    async with HostileUpstream(endless_line(64 << 20, released=released)) as upstream:
        settings = provider_settings("openai", upstream.url, upstream_max_event_bytes=128 << 20)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            run = asyncio.create_task(client.post("/v1/generate", json=ask("openai")))
            await asyncio.wait_for(upstream.arrived.wait(), GUARD)
            answered = 0
            while upstream.seen[0].sent < 64 << 20:
                assert (await client.get("/healthz")).status_code == 200
                answered += 1
            released.set()
            response = await run
    assert answered >= 1
    assert response.status_code == 502  # the body ended before the provider finished


# -- upstream text to the caller is truncated ------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 500])
async def test_a_huge_upstream_error_message_is_truncated_on_a_character_boundary(provider: str, status: int) -> None:
    message = "é" * (3 << 20)  # 6 MiB of two-byte characters
    body = {"error": {"type": "invalid_request_error", "message": message, "status": "INVALID_ARGUMENT"}}
    async with HostileUpstream(json_answer(status, body)) as upstream:
        response = await _call(provider_settings(provider, upstream.url), ask(provider))
    assert response.status_code == (400 if status == 400 else 502), response.text[:300]
    text = response.json()["error"]["message"]
    assert len(text.encode()) <= 1100 and "éééé" in text
    assert "\ufffd" not in text  # cut between characters, not inside one


# -- Retry-After -----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("7", "7"), (" 12 ", "12"), ("0", "1"), ("99999", "3600"), ("nan", None), ("-5", None), ("1e309", None),
    ("9" * 8000, "3600"), ("2.5", None), ("inf", None), ("2\tX-Injected: yes", None),
])
async def test_an_upstream_retry_after_is_passed_on_only_as_sane_seconds(value: str, expected: str | None) -> None:
    async with HostileUpstream(json_answer(429, {"error": {"message": "slow down", "type": "rate_limit_error"}},
                                           [("retry-after", value)])) as upstream:
        response = await _call(provider_settings("anthropic", upstream.url), ask("anthropic"))
    assert response.status_code == 429
    assert response.headers.get("retry-after") == expected
    assert json.dumps(response.json()).count("9999999999") == 0


# -- lone surrogates from a provider ---------------------------------------------------------

_TEXT_RECORDINGS = {"anthropic": ("redacted-thinking", b'"type":"text_delta","text":"'), "gemini": ("text", b'"text": "'),
                    "openai-chat": ("text-include-usage", b'"content":"'),
                    "openai-responses": ("text", b'"delta":"')}


@pytest.mark.parametrize("provider", sorted(_TEXT_RECORDINGS))
def test_lone_surrogates_from_a_provider_become_replacement_characters(provider: str) -> None:
    """`\\udfff` in one text delta, and a pair split across the next two (`\\ud83d` | `\\ude00`):
    three U+FFFD in an `ok` answer, the rest of the text as recorded."""
    from tests.support import final_of, recordings, run_bytes
    from tests.test_resplit_conformance import FORMATS

    name, field_start = _TEXT_RECORDINGS[provider]
    (rec,) = [r for r in recordings(provider) if r.name == name]
    normalizer, decoder = FORMATS[provider]
    original = final_of(run_bytes([rec.body], normalizer(), provider=provider, decoder=decoder())[0])
    parts = rec.body.split(field_start)
    nonempty = [i for i in range(1, len(parts)) if not parts[i].startswith(b'"')][:3]
    assert len(nonempty) == 3
    for i, escape in zip(nonempty, (rb"\udfff", rb"\ud83d", rb"\ude00"), strict=True):
        parts[i] = escape + parts[i]
    final = final_of(run_bytes([field_start.join(parts)], normalizer(), provider=provider, decoder=decoder())[0])
    assert final.status == "ok", final.error
    assert final.message.content.count("\ufffd") == 3
    assert final.message.content.replace("\ufffd", "") == original.message.content
