"""End to end: the gateway under uvicorn on loopback, configured by ANTHROPIC_API_KEY /
ANTHROPIC_BASE_URL, against a fake Anthropic Messages server on loopback replaying recordings."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.providers.options import DEFAULT_ALLOWED
from app.settings import Settings
from tests.support import parse_sse, recordings
from tests.upstream_fakes import FakeUpstream, gateway

RECORDING = {r.name: r for r in recordings("anthropic")}
KEY = "sk-ant-e2e-test-key-0000"
OVERLOADED = (
    b'event: error\ndata: {"type":"error","error":{"details":null,"type":"overloaded_error",'
    b'"message":"Overloaded"},"request_id":"req_e2e"}\n\n'
)


def fake_anthropic(*replies: bytes | tuple[int, str], hold: bool = False) -> FakeUpstream:
    """POST /v1/messages answers the next reply: SSE bytes, or (status, Anthropic error type)."""
    def reply(r: bytes | tuple[int, str]) -> Any:
        if isinstance(r, bytes):
            return r
        status, etype = r
        return status, {"type": "error", "error": {"type": etype, "message": f"{etype} from fake"}}, \
            {"request-id": "req_fake"}

    return FakeUpstream("/v1/messages", [reply(r) for r in replies], hold=hold)


def settings(upstream: str) -> Settings:
    # the operator opts in to server tools; "system" shows the adapter still guards its own fields
    return Settings(anthropic_api_key=KEY, anthropic_base_url=upstream, upstream_max_retries=0,
                    provider_options_allow={"anthropic": [*DEFAULT_ALLOWED["anthropic"], "tools", "system"]})


ASK = {
    "model": "anthropic/claude-haiku-4-5",
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Use fixed_version, then joke about it."}],
    "tools": [{"name": "fixed_version", "description": "The fixed version"}],
    "provider_options": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
}


async def test_thinking_tool_loop_round_trips_through_the_gateway() -> None:
    fake = fake_anthropic(RECORDING["thinking-then-tool-use"].body, RECORDING["text"].body)
    async with gateway(fake, settings) as client:
        first = parse_sse((await client.post("/v1/stream", json=ASK)).content)
        kinds = [e for _, e, _ in first]
        assert kinds[0] == "start" and kinds[-1] == "final" and "reasoning" in kinds and "tool_call" in kinds
        start, final = first[0][2], first[-1][2]
        assert start["provider"] == "anthropic"
        assert final["status"] == "ok" and final["stop_reason"] == "tool_calls"
        counts = {name: n for name, n in final["usage"].items() if not name.startswith("cost")}  # priced: test_prices.py
        assert counts == {"input_tokens": 598, "output_tokens": 92, "total_tokens": 690,
                                  "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 53}
        assistant = final["message"]
        (call,) = assistant["tool_calls"]
        assert call == {"id": "toolu_01825dXWLSoJwCst1qTsiWdb", "name": "fixed_version", "arguments": {}}
        (thinking,) = assistant["reasoning"]
        assert thinking["signature"] and thinking["text"].startswith("The user wants me to")

        # Second turn: the assistant message exactly as released, then the tool's result.
        follow = {**ASK, "messages": [*ASK["messages"], assistant,
                                      {"role": "tool", "tool_call_id": call["id"], "content": "1.0.0"}]}
        second = parse_sse((await client.post("/v1/stream", json=follow)).content)
        assert second[-1][2]["status"] == "ok" and second[-1][2]["message"]["content"] == "Hello"

    first_wire, second_wire = (r.body for r in fake.requests)
    assert first_wire["system"] == "Be brief." and first_wire["stream"] is True
    assert first_wire["max_tokens"] == 1024 + 4096 and first_wire["thinking"]["budget_tokens"] == 1024
    assert first_wire["tools"] == [{"name": "fixed_version", "description": "The fixed version",
                                    "input_schema": {"type": "object", "properties": {}}}]
    assert "temperature" not in first_wire
    assert second_wire["messages"][1] == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": thinking["text"], "signature": thinking["signature"]},
        {"type": "tool_use", "id": call["id"], "name": "fixed_version", "input": {}},
    ]}
    assert second_wire["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "1.0.0"}]}
    assert all(KEY in (h.get("x-api-key", "") + h.get("authorization", "")) for h in (r.headers for r in fake.requests))


async def test_server_tools_and_citations_come_out_as_canonical_events() -> None:
    fake = fake_anthropic(RECORDING["web-search-server-tool"].body)
    async with gateway(fake, settings) as client:
        ask = {"model": "anthropic/claude-opus-4-1", "messages": [{"role": "user", "content": "Weather in SF?"}],
               "provider_options": {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}}
        events = parse_sse((await client.post("/v1/stream", json=ask)).content)
        clash = await client.post("/v1/stream", json={**ask, "provider_options": {"system": "no"}})
        assert clash.status_code == 400 and "system" in clash.json()["error"]["message"]
    assert len(fake.requests) == 1  # the refused request never left the gateway
    assert fake.requests[0].body["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]
    calls = [d for _, e, d in events if e == "tool_call"]
    results = [d for _, e, d in events if e == "tool_result"]
    assert calls[-1]["is_final"] and calls[-1]["server"] and calls[-1]["arguments"] == {"query": "San Francisco weather today"}
    assert [r["tool_call_id"] for r in results] == ["srvtoolu_01SPfvT38PDPAFnkcrMNGUrM"]
    final = events[-1][2]
    assert final["message"]["content"] == RECORDING["web-search-server-tool"].expected["text"]
    assert final["message"]["tool_calls"] == []  # server tools are not the caller's to answer


async def test_overloaded_before_the_body_is_a_502_and_mid_stream_a_retryable_final() -> None:
    head = RECORDING["thinking-signature"].body
    head = head[: head.index(b"event: content_block_stop", head.index(b'"text_delta"'))]
    fake = fake_anthropic((529, "overloaded_error"), (401, "authentication_error"), head + OVERLOADED)
    async with gateway(fake, settings) as client:
        ask = {"model": "anthropic/claude-sonnet-4-6", "messages": [{"role": "user", "content": "Cross a street?"}]}
        overloaded = await client.post("/v1/stream", json=ask)
        assert overloaded.status_code == 502
        assert overloaded.json()["error"]["code"] == "upstream_overloaded" and overloaded.json()["error"]["retryable"]
        refused = await client.post("/v1/stream", json=ask)
        assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_auth"
        assert KEY not in refused.text
        events = parse_sse((await client.post("/v1/stream", json=ask)).content)
    final = events[-1][2]
    tokens = "".join(d["content"] for _, e, d in events if e == "token")
    assert final["status"] == "error" and final["error"]["code"] == "upstream_overloaded"
    assert final["error"]["retryable"] is True
    assert tokens and final["message"]["content"] == tokens  # the text so far is kept


async def test_client_disconnect_closes_the_anthropic_response() -> None:
    head = RECORDING["thinking-signature"].body
    fake = fake_anthropic(head[: head.index(b"event: message_delta")], hold=True)
    async with gateway(fake, settings) as client:
        ask = {"model": "anthropic/claude-sonnet-4-6", "messages": [{"role": "user", "content": "Cross a street?"}]}
        async with client.stream("POST", "/v1/stream", json=ask) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: token"):
                    break
        # The gateway's client is gone: the upstream Anthropic response is closed (DESIGN.md section 6).
        await asyncio.wait_for(fake.closed.wait(), timeout=5.0)


async def test_a_harmless_unexpected_delta_keeps_the_answer_and_is_counted() -> None:
    """A signature_delta on a text block (seen in another project's recordings) used to end the
    stream as upstream_protocol_error; now the answer goes out whole and the drop is counted."""
    body = RECORDING["thinking-signature"].body
    at = body.index(b"event: content_block_delta", body.index(b'"text_delta"'))
    index = orjson.loads(body[at:].split(b"\n")[1][6:])["index"]
    odd = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
           b'"delta":{"type":"signature_delta","signature":"c2ln"}}\n\n' % index)
    fake = fake_anthropic(body, body[:at] + odd + body[at:])
    async with gateway(fake, settings) as client:
        ask = {"model": "anthropic/claude-sonnet-4-6", "messages": [{"role": "user", "content": "Cross a street?"}]}
        plain = parse_sse((await client.post("/v1/stream", json=ask)).content)[-1][2]
        odd_final = parse_sse((await client.post("/v1/stream", json=ask)).content)[-1][2]
        metrics = (await client.get("/metrics")).text
    assert odd_final["status"] == "ok" and odd_final["message"] == plain["message"]
    assert 'foundry_upstream_ignored_total{provider="anthropic",what="anthropic:signature_delta_on_text"} 1.0' in metrics
