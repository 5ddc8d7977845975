"""End to end: the gateway under uvicorn on loopback, configured by OPENAI_API_KEY /
OPENAI_BASE_URL, serving `openai-responses/*` against a fake Responses server on loopback."""

from __future__ import annotations

import asyncio

from app.providers.options import DEFAULT_ALLOWED
from app.settings import Settings
from tests.support import parse_sse, recordings
from tests.upstream_fakes import FakeUpstream, first_token_then_leave, gateway

RECORDING = {r.name: r for r in recordings("openai-responses")}
KEY = "sk-responses-e2e-test-key-0000"


def configured(upstream: str) -> Settings:
    return Settings(openai_api_key=KEY, openai_base_url=f"{upstream}/v1", upstream_max_retries=0,
                    provider_options_allow={"openai-responses": [*DEFAULT_ALLOWED["openai-responses"], "builtin_tools"]})


ASK = {
    "model": "openai-responses/gpt-4o",
    "messages": [{"role": "system", "content": "Answer with the tool."},
                 {"role": "user", "content": "What is the capital of France?"}],
    "tools": [{"name": "get_capital", "description": "Capital of a country",
               "parameters": {"type": "object", "properties": {"country": {"type": "string"}},
                              "required": ["country"]}}],
}


async def test_function_call_round_trip_through_the_gateway() -> None:
    fake = FakeUpstream("/v1/responses", [RECORDING["function-call"].body, RECORDING["text"].body])
    async with gateway(fake, configured) as client:
        first = parse_sse((await client.post("/v1/stream", json=ASK)).content)
        assert [e for _, e, _ in first][0] == "start" and first[0][2]["provider"] == "openai-responses"
        final = first[-1][2]
        assert final["status"] == "ok" and final["stop_reason"] == "tool_calls"
        assert final["model"] == "gpt-4o-2024-08-06"
        (call,) = final["message"]["tool_calls"]
        assert call == {"id": "call_kL0PCQV7M2WMoVX8V8OtYSAL", "name": "get_capital", "arguments": {"country": "France"}}
        fragments = [d for _, e, d in first if e == "tool_call"]
        assert "".join(d["args_fragment"] for d in fragments) == '{"country":"France"}' and fragments[-1]["is_final"]

        follow = {**ASK, "messages": [*ASK["messages"], final["message"],
                                      {"role": "tool", "tool_call_id": call["id"], "content": "Paris"}]}
        answer = await client.post("/v1/generate", json=follow)
        assert answer.status_code == 200
        body = answer.json()
        assert body["status"] == "ok" and body["message"]["content"] == "The capital of France is Paris."
        assert body["usage"]["input_tokens"] == 278 and body["usage"]["total_tokens"] == 287

    first_wire, second_wire = (r.body for r in fake.requests)
    assert first_wire["instructions"] == "Answer with the tool." and first_wire["stream"] is True
    assert first_wire["tools"][0] == {"type": "function", "name": "get_capital", "description": "Capital of a country",
                                      "parameters": ASK["tools"][0]["parameters"], "strict": False}
    assert second_wire["input"][-2:] == [
        {"type": "function_call", "call_id": call["id"], "name": "get_capital", "arguments": '{"country":"France"}'},
        {"type": "function_call_output", "call_id": call["id"], "output": "Paris"},
    ]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in fake.requests)


async def test_reasoning_and_built_in_tools_come_out_as_canonical_events() -> None:
    fake = FakeUpstream("/v1/responses", [RECORDING["code-interpreter-reasoning-summary"].body])
    async with gateway(fake, configured) as client:
        ask = {"model": "openai-responses/gpt-5", "messages": [{"role": "user", "content": "123456^123?"}],
               "provider_options": {"reasoning_effort": "low", "reasoning_summary": "detailed",
                                    "builtin_tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}}
        events = parse_sse((await client.post("/v1/stream", json=ask)).content)
    (wire,) = (r.body for r in fake.requests)
    assert wire["reasoning"] == {"effort": "low", "summary": "detailed"} and "temperature" not in wire
    assert wire["tools"] == [{"type": "code_interpreter", "container": {"type": "auto"}}]
    expected = RECORDING["code-interpreter-reasoning-summary"].expected
    assert "".join(d["content"] for _, e, d in events if e == "reasoning") == expected["reasoning"]
    calls = [d for _, e, d in events if e == "tool_call" and d["is_final"]]
    assert [(c["id"], c["server"], c["arguments"]["code"]) for c in calls] == [
        (s["id"], True, s["code"]) for s in expected["server_tool_calls"]]
    assert [d["tool_call_id"] for _, e, d in events if e == "tool_result"] == [c["id"] for c in calls]
    final = events[-1][2]
    assert final["status"] == "ok" and final["stop_reason"] == "stop" and final["message"]["tool_calls"] == []
    assert final["usage"]["cache_read_tokens"] == 3200 and final["usage"]["reasoning_tokens"] == 128


async def test_failures_before_and_after_the_first_event() -> None:
    fake = FakeUpstream("/v1/responses", [
        (429, {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}},
         {"retry-after": "11"}),
        (401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}, {}),
        RECORDING["error-insufficient-quota"].body,
        RECORDING["text"].body[: RECORDING["text"].body.index(b"event: response.output_text.done")],
    ])
    ask = {"model": "openai-responses/gpt-5-nano", "messages": [{"role": "user", "content": "Hi"}]}
    async with gateway(fake, configured) as client:
        limited = await client.post("/v1/stream", json=ask)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "11"
        refused = await client.post("/v1/stream", json=ask)
        assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_auth"
        assert KEY not in refused.text
        # An error event before any content: no other target to take over, so an HTTP error
        failed = await client.post("/v1/stream", json=ask)
        assert failed.status_code == 502 and failed.json()["error"]["upstream_code"] == "insufficient_quota"
        cut = parse_sse((await client.post("/v1/stream", json=ask)).content)[-1][2]
    assert cut["status"] == "error" and cut["error"]["code"] == "upstream_incomplete"
    assert cut["message"]["content"] == "The capital of France is Paris."  # the text so far is kept


async def test_client_disconnect_closes_the_responses_stream() -> None:
    body = RECORDING["text"].body
    fake = FakeUpstream("/v1/responses", [body[: body.index(b"event: response.output_text.done")]], hold=True)
    async with gateway(fake, configured) as client:
        ask = {"model": "openai-responses/gpt-4o", "messages": [{"role": "user", "content": "Capital of France?"}]}
        await first_token_then_leave(client, ask)
        # The gateway's client is gone: the upstream response is closed (DESIGN.md section 6).
        await asyncio.wait_for(fake.closed.wait(), timeout=5.0)
