"""The gateway's own credentials never leave it in answer text: an upstream that echoes the request
headers as its answer (the provider key it was sent, the admin key) has them `[redacted]` in the
token events, the final, the transcript and the run record, however the answer splits them."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.secrets import REDACTED, HeldText, forget, remember
from app.main import create_app
from tests.hostile_upstream import KEY, HostileUpstream, Seen, ask, provider_settings
from tests.support import parse_sse, serve

GUARD = 60
ADMIN = "admin-echo-test-0123456789abcdefgh"


@pytest.fixture(autouse=True)
def _forget_the_secrets() -> Iterator[None]:
    """The values these tests configure (`held-secret-...`) would hold back other tests' answer
    text that begins like them: the registry is the process's, so it is cleared after each."""
    yield
    forget()


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-x",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _echo(step: int) -> Any:
    """A chat answer quoting the request's credential headers, in pieces of `step` characters."""
    async def answer(seen: Seen, writer: asyncio.StreamWriter) -> None:
        text = f"You sent {seen.headers.get('authorization')} and {ADMIN}. Done."
        pieces = [text[i:i + step] for i in range(0, len(text), step)]
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        writer.write(b"".join(_chunk(p) for p in pieces) + _chunk(None, "stop") + b"data: [DONE]\n\n")
        await writer.drain()
        writer.close()
    return answer


@pytest.mark.parametrize("step", [1, 3, 7, 16, 1000])
async def test_an_echoed_provider_key_and_admin_key_are_redacted_everywhere(step: int) -> None:
    async with HostileUpstream(_echo(step)) as upstream:
        settings = provider_settings("openai", upstream.url, admin_key=ADMIN, records_linger=0)
        app = create_app(settings)
        headers = {"Authorization": f"Bearer {ADMIN}"}
        async with serve(app) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD, headers=headers) as client:
            streamed = await client.post("/v1/stream", json=ask("openai"))
            generated = await client.post("/v1/generate", json=ask("openai"))
            stream_id = parse_sse(streamed.content)[0][2]["stream_id"]
            transcript = await client.get(f"/v1/stream/{stream_id}/transcript")
            await app.state.records.flush()
            record = await client.get(f"/v1/runs/{stream_id}")
    events = parse_sse(streamed.content)
    text = "".join(data["content"] for _, kind, data in events if kind == "token")
    # at most the first two characters of a secret go out before the rest shows it is one
    match = re.fullmatch(r"You sent Bearer (.{0,2})\[redacted\] and (.{0,2})\[redacted\]\. Done\.", text)
    assert match is not None, text
    assert KEY.startswith(match[1]) and ADMIN.startswith(match[2])
    assert events[-1][2]["message"]["content"] == text
    assert generated.json()["message"]["content"] == text
    for response in (streamed, generated, transcript, record):
        assert response.status_code == 200, response.text[:300]
        assert KEY not in response.text and ADMIN not in response.text
    assert REDACTED in transcript.text


def test_held_text_keeps_back_no_more_than_a_key_less_one_character() -> None:
    secret = "held-secret-value-0123456789"
    remember(secret)
    held = HeldText()
    out = [held.feed("plain words "), held.feed("then held-sec"), held.feed("ret-value-0123456789 after"),
           held.feed(" and a cut held-secret-valu")]
    out.append(held.flush())
    # (other tests' secrets are remembered too: what else is held back may vary, never the total)
    assert out[1].startswith("then") and "held" not in out[1]  # `held-sec` could begin the secret: kept back
    assert out[2].startswith(REDACTED)
    assert "".join(out) == f"plain words then {REDACTED} after and a cut {REDACTED}"
    assert all(len(text) - len(piece) < len(secret) for text, piece in zip(
        ("plain words ", "plain words then held-sec"), (out[0], out[0] + out[1]), strict=True))


@pytest.mark.parametrize("stream", [True, False])
async def test_the_chat_completions_facade_relays_no_echoed_key(stream: bool) -> None:
    """The same-wire facade relays the provider's events, and still only as the gateway released them."""
    async with HostileUpstream(_echo(7)) as upstream:
        async with serve(create_app(provider_settings("openai", upstream.url))) as gw, \
                httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": "openai/gpt-x", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
    assert KEY not in response.text
    if stream:  # relayed as the provider sent it: bytes that cannot be scrubbed are never sent
        assert response.status_code == 200 and "upstream_protocol_error" in response.text
        assert "credentials" in response.text
    else:  # translated: the key is redacted from the answer
        assert response.status_code == 200 and REDACTED in response.text
