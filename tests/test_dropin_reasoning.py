"""Opaque reasoning across the drop-in facades, and Codex's custom tool calls understood: an
OpenAI Responses upstream's `encrypted_content` comes back to the provider that issued it (through
a Responses client on a translated route, or a Messages client's thinking signature), never to
another; redacted thinking is a reasoning item on the Responses facade. The bodies a loopback
upstream RECEIVED prove it."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.api.compat.responses_request import encrypted_reasoning
from app.core.messages import ReasoningBlock
from app.main import create_app
from app.providers.openai_responses_stream import reasoning_signature
from tests.agent_upstreams import CODE_MODE, ResponsesScript
from tests.compat_support import ALL_RECORDINGS, RecordedUpstream, expect, facade_gateway, settings_for
from tests.support import parse_sse, serve

INCLUDE = ["reasoning.encrypted_content"]


def openai_sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-gateway-client", max_retries=0)


def anthropic_sdk(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-gateway-client", max_retries=0)


def recorded_reasoning(model: str) -> list[dict[str, Any]]:
    """The reasoning items (id and encrypted_content) the recording's output_item.done events carry."""
    body = next(r.body for r in ALL_RECORDINGS if expect(r).model == model)
    items = [json.loads(line.removeprefix(b"data: "))["item"] for line in body.splitlines()
             if line.startswith(b"data: ") and b'"response.output_item.done"' in line]
    return [{"id": i["id"], "encrypted_content": i["encrypted_content"]} for i in items if i["type"] == "reasoning"]


def sent_reasoning(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": i["id"], "encrypted_content": i["encrypted_content"]} for i in body["input"]
            if i.get("type") == "reasoning"]


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_encrypted_reasoning_returns_to_its_provider_on_a_translated_route(stream: bool) -> None:
    """Responses -> OpenAI Responses, translated (the proxy off): the upstream's encrypted reasoning
    (here an item with no summary) reaches the client as the gateway's opaque reasoning item; sent
    back, the upstream gets its own item again (id and encrypted_content). To Anthropic it is not sent."""
    model = "openai-responses/reasoning-text-function-call"
    upstream = RecordedUpstream()
    async with facade_gateway(upstream, dropin_passthrough=False) as url, openai_sdk(url) as client:
        ask: list[Any] = [{"role": "user", "content": "Capital of PotatoLand?"}]
        if stream:
            async with client.responses.stream(model=model, input=ask, include=INCLUDE) as events:
                first = await events.get_final_response()
        else:
            first = await client.responses.create(model=model, input=ask, include=INCLUDE)
        output = [item.model_dump(exclude_none=True) for item in first.output]
        reasoning = [item for item in output if item["type"] == "reasoning"]
        assert len(reasoning) == 1 and reasoning[0]["encrypted_content"].startswith("fgw-reasoning.")
        assert [item["type"] for item in output] == ["reasoning", "message", "function_call"]
        call = next(item for item in output if item["type"] == "function_call")
        answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "Spud City"}
        await client.responses.create(model="openai-responses/text", include=INCLUDE, input=[*ask, *output, answer])
        await client.responses.create(model="anthropic/text", include=INCLUDE, input=[*ask, *output, answer])
        plain = await client.responses.create(model=model, input=ask)
    assert sent_reasoning(upstream.requests[1]) == recorded_reasoning(model)
    assert [i.get("type") for i in upstream.requests[1]["input"]][:2] == ["message", "reasoning"]
    assert all(b["type"] != "thinking" for m in upstream.requests[2]["messages"] for b in m["content"]
               if isinstance(m["content"], list))
    assert [item.type for item in plain.output][0] == "reasoning"  # without include: no encrypted_content
    assert all("encrypted_content" not in item.model_dump(exclude_none=True) for item in plain.output)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_messages_clients_thinking_goes_back_to_the_responses_provider_that_signed_it(stream: bool) -> None:
    """Messages -> OpenAI Responses: a reasoning summary is a thinking block whose signature is the
    gateway's opaque spelling of the encrypted reasoning; sent back, the Responses upstream gets its
    reasoning item again, and an Anthropic upstream does not get it."""
    model = "openai-responses/reasoning-summary-multipart"
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, anthropic_sdk(url) as client:
        ask: list[Any] = [{"role": "user", "content": "Think, then answer."}]
        if stream:
            async with client.messages.stream(model=model, max_tokens=512, messages=ask) as events:
                first = await events.get_final_message()
        else:
            first = await client.messages.create(model=model, max_tokens=512, messages=ask)
        content = [block.model_dump(exclude_none=True) for block in first.content]
        thinking = [block for block in content if block["type"] == "thinking"]
        assert thinking and all(b["signature"].startswith("fgw-reasoning.") for b in thinking)
        turn = [*ask, {"role": "assistant", "content": content}, {"role": "user", "content": "And then?"}]
        await client.messages.create(model="openai-responses/text", max_tokens=512, messages=turn)
        await client.messages.create(model="anthropic/text", max_tokens=512, messages=turn)
    assert sent_reasoning(upstream.requests[1]) == recorded_reasoning(model)[: len(thinking)]
    assert all(b["type"] != "thinking" for m in upstream.requests[2]["messages"] for b in m["content"]
               if isinstance(m["content"], list))


async def test_redacted_thinking_is_a_reasoning_item_on_the_responses_facade() -> None:
    """Responses -> Anthropic: a redacted thinking block is a reasoning item with no summary (its
    payload as the opaque encrypted_content when included), and goes back as redacted thinking."""
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, openai_sdk(url) as client:
        ask: list[Any] = [{"role": "user", "content": "Hi"}]
        first = await client.responses.create(model="anthropic/redacted-thinking", input=ask, include=INCLUDE)
        output = [item.model_dump(exclude_none=True) for item in first.output]
        reasoning = [item for item in output if item["type"] == "reasoning" and not item["summary"]]
        assert reasoning and reasoning[0]["encrypted_content"].startswith("fgw-reasoning.")
        await client.responses.create(model="anthropic/text", input=[*ask, *output, {"role": "user", "content": "Go"}])
        plain = await client.responses.create(model="anthropic/redacted-thinking", input=ask)
    assert any(item.type == "reasoning" and not item.summary for item in plain.output)
    sent = upstream.requests[1]["messages"][1]["content"]
    assert sent[0]["type"] == "redacted_thinking" and sent[0]["data"]


async def test_a_relayed_codex_custom_tool_call_is_in_the_transcript() -> None:
    """Codex's code-mode `exec` (a `custom_tool_call`) relayed on the same-wire route: the client
    gets the upstream's events, and the stream's transcript shows the call with its input."""
    script = ResponsesScript()
    tools = [{"type": "namespace", "name": "code", "tools": [{"type": "custom", "name": "exec"}]}]
    body = {"model": "gpt-5", "stream": True, "input": [
        {"type": "additional_tools", "tools": tools}, {"role": "user", "content": "run it"}]}
    async with serve(script.app()) as up, serve(create_app(settings_for(up))) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as http:
        answer = await http.post("/v1/responses", json=body)
        assert b"event: response.custom_tool_call_input.delta" in answer.content  # relayed as the upstream sent it
        transcript = (await http.get(f"/v1/stream/{answer.headers['x-stream-id']}/transcript")).json()
    assert transcript["stop_reason"] == "tool_calls"
    calls = [m for m in transcript["reasoning_messages"] if m["type"] == "tool_call"]
    assert [c["id"] for c in calls] == ["call_script_1"]
    assert calls[0]["content"]["name"] == "exec" and calls[0]["content"]["input"] == {"input": CODE_MODE}


async def test_a_custom_tool_call_is_a_tool_call_on_the_native_api() -> None:
    """The same upstream through `/v1/stream`: the canonical tool_call events name `exec` with its
    input as `{"input": ...}`."""
    script = ResponsesScript()
    async with serve(_code_mode_only(script)) as up, serve(create_app(settings_for(up))) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as http:
        answer = await http.post("/v1/stream", json={"model": "openai-responses/gpt-5",
                                                     "messages": [{"role": "user", "content": "run it"}]})
    events = parse_sse(answer.content)
    calls = [data for _, kind, data in events if kind == "tool_call"]
    assert calls and calls[-1]["name"] == "exec" and calls[-1]["arguments"] == {"input": CODE_MODE}
    assert "".join(c["args_fragment"] for c in calls) == json.dumps({"input": CODE_MODE}, separators=(",", ":"))
    assert [kind for _, kind, _ in events].count("final") == 1
    assert events[-1][1] == "final" and events[-1][2]["stop_reason"] == "tool_calls"


def _code_mode_only(script: ResponsesScript) -> Any:
    """The script's app, every request offered the code-mode `exec` (as Codex's default model's are)."""
    app = script.app()
    tools = {"type": "additional_tools", "tools": [{"type": "namespace", "name": "code",
                                                     "tools": [{"type": "custom", "name": "exec"}]}]}

    async def offered(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        message = await receive()
        body = json.loads(message.get("body") or b"{}")
        body["input"] = [tools, *body.get("input", [])]
        data = json.dumps(body).encode()

        sent = False

        async def replay() -> Any:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        return await app(scope, replay, send)
    return offered


async def test_a_same_wire_request_gets_the_gateways_opaque_reasoning_unwrapped() -> None:
    """Responses -> OpenAI Responses, passed through: a reasoning item the gateway issued for an
    OpenAI Responses answer (on a translated route) goes up as the provider's own item; one it
    issued for Anthropic's thinking is left out (it would not verify); foreign items go as written."""
    mine = ReasoningBlock(signature=reasoning_signature("rs_1", "gAAAA-own"), provider="openai-responses")
    claude = ReasoningBlock(text="hm", signature="sig-anthropic", provider="anthropic")
    foreign = {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "gAAAA-as-written"}
    items = [{"type": "reasoning", "id": f"rs_{n}_x", "summary": [], "encrypted_content": encrypted_reasoning(b)}
             for n, b in enumerate((mine, claude))]
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, openai_sdk(url) as client:
        await client.responses.create(model="openai-responses/text", include=INCLUDE,
                                      input=[{"role": "user", "content": "Hi"}, *items, foreign,
                                             {"role": "user", "content": "Again"}])
    assert [i for i in upstream.requests[0]["input"] if i.get("type") == "reasoning"] == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-own"}, foreign]
