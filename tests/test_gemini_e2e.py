"""End to end: the gateway under uvicorn on loopback, configured by GEMINI_API_KEY /
GEMINI_BASE_URL, serving `gemini/*` against a fake Gemini server on loopback."""

from __future__ import annotations

import asyncio

import orjson

from app.providers.options import DEFAULT_ALLOWED
from app.settings import Settings
from tests.support import parse_sse, recordings
from tests.upstream_fakes import FakeUpstream, first_token_then_leave, gateway

RECORDING = {r.name: r for r in recordings("gemini")}
KEY = "gm-e2e-test-key-0000000000"
STREAM = "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse"


def configured(upstream: str) -> Settings:
    return Settings(gemini_api_key=KEY, gemini_base_url=upstream, upstream_max_retries=0,
                    provider_options_allow={"gemini": [*DEFAULT_ALLOWED["gemini"], "builtin_tools"]})


def fake_gemini(*replies: object, hold: bool = False) -> FakeUpstream:
    return FakeUpstream("/v1beta/models/{target}", list(replies), hold=hold)


ASK = {
    "model": "gemini/gemini-3-pro-preview",
    "messages": [{"role": "system", "content": "Use the tool."},
                 {"role": "user", "content": "Which country am I in?"}],
    "tools": [{"name": "get_country", "description": "The user's country"}],
    "max_tokens": 300,
}


async def test_tool_round_trip_sends_the_thought_signature_back() -> None:
    fake = fake_gemini(RECORDING["function-call-thought-signature"].body, RECORDING["text"].body)
    async with gateway(fake, configured) as client:
        first = parse_sse((await client.post("/v1/stream", json=ASK)).content)
        final = first[-1][2]
        assert first[0][2]["provider"] == "gemini"
        assert final["status"] == "ok" and final["stop_reason"] == "tool_calls"
        (call,) = final["message"]["tool_calls"]
        assert call == {"id": "call_QUVVadTSNJ6_qtsPvN7J8Q0_0", "name": "get_country", "arguments": {}}
        (signature,) = final["message"]["reasoning"]
        assert signature["provider"] == "gemini" and signature["signature"].startswith("EpwICpkIAX")
        counts = {name: n for name, n in final["usage"].items() if not name.startswith("cost")}  # priced: test_prices.py
        assert counts == {"input_tokens": 29, "output_tokens": 212, "total_tokens": 241,
                                  "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 202}

        follow = {**ASK, "messages": [*ASK["messages"], final["message"],
                                      {"role": "tool", "tool_call_id": call["id"], "content": "France"}]}
        second = parse_sse((await client.post("/v1/stream", json=follow)).content)[-1][2]
        assert second["status"] == "ok" and second["message"]["content"] == "The capital of France is Paris.\n"

    first_wire, second_wire = fake.requests
    assert first_wire.url == STREAM and second_wire.url == STREAM
    assert all(r.headers["x-goog-api-key"] == KEY for r in fake.requests)
    assert first_wire.body["systemInstruction"] == {"parts": [{"text": "Use the tool."}]}
    assert first_wire.body["generationConfig"] == {"temperature": 0.0, "maxOutputTokens": 300}
    assert first_wire.body["tools"] == [{"functionDeclarations": [{
        "name": "get_country", "description": "The user's country",
        "parametersJsonSchema": {"type": "object", "properties": {}}}]}]
    assert second_wire.body["contents"][1:] == [
        {"role": "model", "parts": [{"functionCall": {"name": "get_country", "args": {}},
                                     "thoughtSignature": signature["signature"]}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_country", "response": {"output": "France"}}}]},
    ]


async def test_a_blocked_prompt_ends_with_final_blocked() -> None:
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
               "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}, "responseId": "blk",
               "modelVersion": "gemini-2.5-flash"}
    fake = fake_gemini(b"data: " + orjson.dumps(blocked) + b"\r\n\r\n")
    async with gateway(fake, configured) as client:
        ask = {"model": "gemini/gemini-2.5-flash", "messages": [{"role": "user", "content": "something bad"}]}
        events = parse_sse((await client.post("/v1/stream", json=ask)).content)
    assert [e for _, e, _ in events] == ["start", "final"]
    final = events[-1][2]
    assert final["status"] == "blocked" and final["error"]["code"] == "upstream_blocked"
    assert final["error"]["block_reason"] == "PROHIBITED_CONTENT"


async def test_reasoning_code_execution_and_grounding_come_out_as_canonical_events() -> None:
    fake = fake_gemini(RECORDING["thinking-thought-parts"].body, RECORDING["code-execution"].body)
    async with gateway(fake, configured) as client:
        ask = {"model": "gemini/gemini-2.5-pro", "messages": [{"role": "user", "content": "How to cross a street?"}],
               "provider_options": {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}}
        thinking = parse_sse((await client.post("/v1/stream", json=ask)).content)
        ask = {"model": "gemini/gemini-3-flash-preview", "messages": [{"role": "user", "content": "Compute it"}],
               "provider_options": {"builtin_tools": [{"codeExecution": {}}]}}
        code = parse_sse((await client.post("/v1/stream", json=ask)).content)
    assert fake.requests[0].body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
    assert fake.requests[1].body["tools"] == [{"codeExecution": {}}]
    expected = RECORDING["thinking-thought-parts"].expected
    assert "".join(d["content"] for _, e, d in thinking if e == "reasoning") == expected["reasoning"]
    assert thinking[-1][2]["message"]["content"] == expected["text"]
    (call,) = [d for _, e, d in code if e == "tool_call"]
    (result,) = [d for _, e, d in code if e == "tool_result"]
    assert call["server"] and call["name"] == "code_execution" and call["id"] == result["tool_call_id"] == "8xju7mua"
    assert result["content"] == "-428330955.97745\n" and code[-1][2]["message"]["tool_calls"] == []


async def test_failures_before_and_after_the_first_event() -> None:
    bad_key = {"error": {"code": 400, "message": f"API key not valid: {KEY}", "status": "INVALID_ARGUMENT",
                         "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}}
    quota = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}]}}
    text = RECORDING["text"].body
    fake = fake_gemini((400, bad_key, {}), (429, quota, {}), (404, {"error": {"code": 404, "message": "no model"}}, {}),
                       text[: text.rindex(b"data: ")])
    ask = {"model": "gemini/gemini-2.0-flash", "messages": [{"role": "user", "content": "Capital of France?"}]}
    async with gateway(fake, configured) as client:
        refused = await client.post("/v1/stream", json=ask)
        assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_auth"
        assert KEY not in refused.text
        limited = await client.post("/v1/stream", json=ask)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "30"
        missing = await client.post("/v1/stream", json=ask)
        assert missing.status_code == 404
        cut = parse_sse((await client.post("/v1/stream", json=ask)).content)[-1][2]
    assert cut["status"] == "error" and cut["error"]["code"] == "upstream_incomplete"
    assert cut["message"]["content"] == "The capital of France"  # the text so far is kept


async def test_client_disconnect_closes_the_gemini_stream() -> None:
    text = RECORDING["text"].body
    fake = fake_gemini(text[: text.rindex(b"data: ")], hold=True)
    async with gateway(fake, configured) as client:
        ask = {"model": "gemini/gemini-2.0-flash", "messages": [{"role": "user", "content": "Capital of France?"}]}
        await first_token_then_leave(client, ask)
        # The gateway's client is gone: the upstream response is closed (DESIGN.md section 6).
        await asyncio.wait_for(fake.closed.wait(), timeout=5.0)
