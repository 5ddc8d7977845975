"""The Responses facade (POST /v1/responses) driven by the official `openai` SDK, the gateway under
uvicorn on loopback: every recording of the four wire formats (`responses.create` plain and
streamed, `responses.stream` with its final-response helper), the event sequence on the wire,
the request reaching the upstream, refused fields, `previous_response_id` per key, a mid-stream
failure, and a disconnect that closes the upstream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.api.compat.responses_request import input_messages
from app.core.messages import ToolSpec
from app.main import create_app
from app.settings import Settings
from tests.auth_support import bearer, gateway, make_key
from tests.compat_support import ALL_RECORDINGS, Expect, PickyAdapter, RecordedUpstream, expect, facade_gateway, model_of
from tests.support import serve

CALCULATOR = {"type": "function", "name": "calculator", "description": "Evaluate arithmetic",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                             "required": ["expression"]}}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
STATUS = {"stop": ("completed", None), "tool_calls": ("completed", None), "length": ("incomplete", "max_output_tokens"),
          "content_filter": ("incomplete", "content_filter")}


def sdk(url: str, key: str = "sk-gateway-client") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def summary(response: Any, *, with_ids: bool) -> dict[str, Any]:
    """What a client reads off a Response: text, reasoning, the calls, usage, status."""
    reasoning = "".join(s.text for item in response.output if item.type == "reasoning" for s in item.summary)
    calls = [(c.call_id if with_ids else None, c.name, json.loads(c.arguments))
             for c in response.output if c.type == "function_call"]
    u = response.usage
    usage = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
             "cache_read_tokens": u.input_tokens_details.cached_tokens,
             "reasoning_tokens": u.output_tokens_details.reasoning_tokens}
    reason = response.incomplete_details.reason if response.incomplete_details else None
    return {"text": response.output_text, "reasoning": reasoning, "calls": calls, "usage": usage,
            "status": (response.status, reason)}


def wanted(exp: Expect) -> dict[str, Any]:
    return {"text": exp.text, "reasoning": exp.reasoning, "calls": exp.calls, "status": STATUS[exp.stop],
            "usage": exp.usage_of("input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens")}


def check_sequence(events: list[Any]) -> Any:
    """Numbered 0, 1, 2, ...; created and in_progress first; one terminal event, last: its response."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert [e.type for e in events if e.type in TERMINAL] == [events[-1].type]
    return events[-1].response


async def test_every_recording_through_the_openai_sdk() -> None:
    assert any(expect(r).usage["cache_read_tokens"] for r in ALL_RECORDINGS)  # cached tokens are exercised
    assert any(expect(r).usage["reasoning_tokens"] for r in ALL_RECORDINGS)  # and reasoning tokens
    # Translated, same-wire routes too (the operator's switch): tests/test_dropin_relay.py relays them
    async with facade_gateway(dropin_passthrough=False) as url, sdk(url) as client:
        for exp in map(expect, ALL_RECORDINGS):
            model, name = exp.model, exp.name
            if exp.error:
                with pytest.raises(openai.InternalServerError):
                    await client.responses.create(model=model, input="hi")
                with pytest.raises(openai.APIError):
                    async with client.responses.stream(model=model, input="hi") as stream:
                        async for _ in stream:
                            pass
                continue
            # Plain JSON answer.
            answer = await client.responses.create(model=model, input="hi")
            assert summary(answer, with_ids=exp.ids) == wanted(exp), name
            # The raw event stream.
            events = [e async for e in await client.responses.create(model=model, input="hi", stream=True)]
            streamed = check_sequence(events)
            assert summary(streamed, with_ids=exp.ids) == wanted(exp), name
            deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert deltas == exp.text, name
            assert "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta") == \
                exp.reasoning, name
            # The SDK's stream helper, with its own accumulation of the events.
            async with client.responses.stream(model=model, input="hi") as stream:
                helper_events = [e async for e in stream]
                if exp.stop in ("stop", "tool_calls"):
                    final = await stream.get_final_response()
                else:  # the helper's final response is for `response.completed` only
                    with pytest.raises(RuntimeError):
                        await stream.get_final_response()
                    final = helper_events[-1].response
            assert summary(final, with_ids=exp.ids) == wanted(exp), name


async def test_every_event_and_response_validates_against_the_sdks_types() -> None:
    """Not the SDK's lenient parse: each event and Response validated as the SDK's types define them
    (required fields, closed lists of values), over every recording."""
    events = TypeAdapter(ResponseStreamEvent)
    # the gateway's own rendering (a relayed same-wire stream is the provider's, as it sent it)
    async with facade_gateway(dropin_passthrough=False) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        for rec in ALL_RECORDINGS:
            ask = {"model": model_of(rec), "input": "hi", "tools": [CALCULATOR]}
            streamed = await http.post("/v1/responses", json={**ask, "stream": True})
            frames = [f.split("\n") for f in streamed.text.split("\n\n") if f.startswith("event: ")]
            assert frames or expect(rec).error, rec
            for kind, data in frames:
                event = events.validate_json(data.removeprefix("data: "))
                assert event.type == kind.removeprefix("event: "), rec
            plain = await http.post("/v1/responses", json=ask)
            if expect(rec).error:  # each recorded error comes before any output: an HTTP error
                assert plain.status_code == 502 and plain.json()["error"]["message"], rec
            else:
                assert plain.status_code == 200, rec
                Response.model_validate(plain.json())


async def test_the_event_sequence_on_the_wire() -> None:
    """What any Responses client reads: `event:` lines, items added then done, parts, deltas."""
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/v1/responses", json={"model": "mock/tool_call", "input": "hi", "stream": True,
                                                          "tools": [CALCULATOR]})
    assert response.headers["content-type"].startswith("text/event-stream") and response.headers["x-stream-id"]
    frames = [f.split("\n") for f in response.text.split("\n\n") if f and not f.startswith(":")]
    events = [(f[0].removeprefix("event: "), json.loads(f[1].removeprefix("data: "))) for f in frames]
    assert all(kind == data["type"] for kind, data in events)
    assert [kind for kind, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    done = events[-1][1]["response"]
    assert done["id"] == "resp_" + response.headers["x-stream-id"] and done["status"] == "completed"
    assert done["output"][1] == {"id": done["output"][1]["id"], "type": "function_call", "status": "completed",
                                 "arguments": '{"expression": "2 + 2"}', "call_id": "call_mock_1",
                                 "name": "calculator"}
    assert done["usage"]["total_tokens"] == done["usage"]["input_tokens"] + done["usage"]["output_tokens"]
    assert done["tools"][0]["name"] == "calculator" and done["tool_choice"] == "auto"


async def test_the_request_reaches_the_upstream() -> None:
    """Input items, instructions, tools, tool_choice, reasoning and limits reach the provider
    through the canonical request (here an upstream Responses API)."""
    upstream = RecordedUpstream()
    ask = [{"role": "developer", "content": "Be brief."},
           {"role": "user", "content": [{"type": "input_text", "text": "Weather"},
                                        {"type": "input_text", "text": "in Paris?"}]},
           {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}'},
           {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
    tool = {"type": "function", "name": "weather", "strict": False,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    async with facade_gateway(upstream, dropin_passthrough=False) as url, sdk(url) as client:
        answer = await client.responses.create(
            model="openai-responses/text", input=ask, instructions="You are terse.", tools=[tool],
            tool_choice={"type": "function", "name": "weather"}, max_output_tokens=50, top_p=0.5,
            parallel_tool_calls=False, reasoning={"effort": "low", "summary": "auto"}, metadata={"team": "a"},
            store=False)
    sent = upstream.requests[-1]
    assert sent["instructions"] == "You are terse.\n\nBe brief."
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather"},
                                                        {"type": "input_text", "text": "in Paris?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
    assert [t["name"] for t in sent["tools"]] == ["weather"]
    assert sent["tool_choice"] == {"type": "function", "name": "weather"}
    assert (sent["max_output_tokens"], sent["top_p"], sent["parallel_tool_calls"]) == (50, 0.5, False)
    assert sent["reasoning"] == {"effort": "low", "summary": "auto"}
    assert "metadata" not in sent  # echoed to the caller, not sent upstream
    assert sent["store"] is False  # carried: the provider would store the response otherwise
    assert answer.metadata == {"team": "a"} and answer.store is False
    assert (answer.max_output_tokens, answer.top_p, answer.parallel_tool_calls) == (50, 0.5, False)


@pytest.mark.parametrize(("model", "wire"), [
    ("anthropic/text", lambda b: b["messages"][0]["content"][1]),
    ("openai-responses/text", lambda b: b["input"][0]["content"][1]),
])
async def test_the_sdks_vision_call_passes_through(model: str, wire: Any) -> None:
    """`responses.create` with an `input_image` (a data URL) reaches the provider as its own image."""
    from tests.test_content_parts import PNG

    upstream = RecordedUpstream()
    url = f"data:image/png;base64,{PNG}"
    async with facade_gateway(upstream) as base, sdk(base) as client:
        answer = await client.responses.create(model=model, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": url, "detail": "auto"}]}])
    assert answer.status == "completed"
    sent = wire(upstream.requests[-1])
    assert sent in ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "input_image", "image_url": url, "detail": "auto"})


async def test_a_request_to_another_provider_goes_through_the_canonical_pipeline() -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, sdk(url) as client:
        answer = await client.responses.create(model="anthropic/text", input="hi", instructions="Be brief.",
                                               max_output_tokens=64)
        assert answer.status == "completed" and answer.output_text
        sent = upstream.requests[-1]
        assert sent["system"] == "Be brief."  # one text block without cache_control goes upstream as a string
        assert sent["messages"][0]["role"] == "user" and sent["max_tokens"] == 64
        # A field that provider cannot take is named as the caller wrote it.
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="anthropic/text", input="hi", reasoning={"effort": "high"})
        assert raised.value.body["param"] == "reasoning.effort"


@pytest.mark.parametrize(("ask", "param"), [
    ({"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]},
     "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].id"),
    ({"input": [{"type": "item_reference", "id": "msg_0_str_unknown"}]}, "input[0].id"),
    ({"input": [{"type": "computer_call_output", "call_id": "c1"}]}, "input[0].type"),
    ({"input": [{"role": "wizard", "content": "hi"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{nope"}]},
     "input[0].arguments"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "array"}}]},
     "tools[0].parameters"),
    ({"input": "hi", "tools": [CALCULATOR], "tool_choice": {"type": "function", "name": "other"}},
     "tool_choice.name"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": "hi", "include": ["file_search_call.results"]}, "include"),
    ({"input": "hi", "text": {"format": {"type": "json_object"}}}, "text.format.type"),
    ({"input": "hi", "truncation": "auto"}, "truncation"),
    ({"input": "hi", "top_logprobs": 3}, "top_logprobs"),
    ({"input": "hi", "extra_body": {"surprise": 1}}, "surprise"),
    ({"input": "hi", "extra_body": {"validators": [{"name": "nope"}]}}, "validators[0].name"),
    ({"input": "hi", "previous_response_id": "resp_nothing_here"}, "previous_response_id"),
    ({"input": "hi", "model": "picky/any", "top_p": 0.5}, "top_p"),
    ({"input": "hi", "model": "picky/any", "user": "u-1"}, "user"),
])
async def test_what_cannot_be_carried_is_refused_naming_the_field(ask: dict[str, Any], param: str) -> None:
    error = openai.NotFoundError if param in ("previous_response_id", "input[0].id") else openai.BadRequestError
    async with facade_gateway(adapters={"picky": PickyAdapter()}) as url, sdk(url) as client:
        for stream in (False, True):
            with pytest.raises(error) as raised:
                await client.responses.create(**{"model": "mock/simple", **ask}, stream=stream)
            body = raised.value.body
            assert isinstance(body, dict) and set(body) >= {"message", "type", "param", "code"}
            assert body["param"] == param, body


async def test_previous_response_id_continues_the_keys_own_response() -> None:
    async with gateway() as (app, admin):
        url = str(admin.base_url).rstrip("/")
        mine, theirs = (await make_key(admin, name="mine"))["key"], (await make_key(admin, name="theirs"))["key"]
        async with sdk(url, mine) as client, sdk(url, theirs) as other:
            first = await client.responses.create(model="mock/tool_call", input="What is 2+2?", tools=[CALCULATOR],
                                                  instructions="Use the calculator.")
            call = first.output[-1]
            assert call.type == "function_call" and first.status == "completed"
            answer = [{"type": "function_call_output", "call_id": call.call_id, "output": "4"}]
            second = await client.responses.create(model="mock/tool_call", previous_response_id=first.id,
                                                   input=answer, tools=[CALCULATOR])
            assert second.output_text == "Sum is 4" and second.previous_response_id == first.id
            # The run was given the recorded conversation, without the earlier instructions.
            transcript = (await admin.get(f"/v1/stream/{second.id.removeprefix('resp_')}/transcript",
                                          headers=bearer(mine))).json()
            assert [(m["role"], m.get("content", "")) for m in transcript["request_messages"]] == [
                ("user", "What is 2+2?"), ("assistant", "Calling calculator"), ("tool", "4")]
            assert transcript["request_messages"][1]["tool_calls"][0]["id"] == call.call_id
            # Another key's response is unknown to the caller, as is one this gateway never made.
            for client_, previous in ((other, first.id), (client, "resp_str_unknown"), (client, "str_no_prefix")):
                with pytest.raises(openai.NotFoundError) as raised:
                    await client_.responses.create(model="mock/simple", previous_response_id=previous, input="hi")
                assert raised.value.body["param"] == "previous_response_id"
                assert raised.value.body["code"] == "previous_response_not_found"


async def test_a_failure_after_the_stream_began_makes_the_sdk_raise() -> None:
    broken = {"provider_options": {"fail_after": 2}}
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        seen = []
        with pytest.raises(openai.APIError) as raised:
            async for event in await client.responses.create(model="mock/lorem-20", input="hi", stream=True,
                                                             extra_body=broken):
                seen.append(event)
        assert "fail_after" in raised.value.message and raised.value.body["code"] == "upstream_disconnected"
        assert "lorem" in "".join(e.delta for e in seen if e.type == "response.output_text.delta")
        with pytest.raises(openai.InternalServerError):
            await client.responses.create(model="mock/lorem-20", input="hi", extra_body=broken)


async def test_client_disconnect_closes_the_upstream() -> None:
    upstream = RecordedUpstream(hold=True)
    async with facade_gateway(upstream) as url, sdk(url) as client:
        async with client.responses.stream(model="openai-responses/text", input="hi") as stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    break
            assert not upstream.closed.is_set()
        await asyncio.wait_for(upstream.closed.wait(), timeout=5.0)


async def test_validators_through_extra_body_block_as_content_filter() -> None:
    ask = "Mail jo@example.com now. The password is hunter2."
    extra = {"validators": [{"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]}
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        answer = await client.responses.create(model="mock/echo", input=ask, extra_body=extra)
        assert answer.status == "incomplete" and answer.incomplete_details.reason == "content_filter"
        assert "password" not in answer.output_text


@pytest.mark.parametrize(("body", "param"), [
    (b'{"model": "mock/simple", "input": "bad \\udfff"}', "input"),
    (b'{"model": "mock/simple", "input": "hi", "max_output_tokens": "10"}', "max_output_tokens"),
    (b'{"model": "mock/simple", "input": "hi", "stream": 1}', "stream"),
    (b'{"model": "mock/simple", "input": []}', "input"),
    (b'{"model": "mock/simple", "input": [{"type": "reasoning", "summary": []}]}', "input"),
    (b'{"model": "mock/simple", "input": "hi", "metadata": {"k": "' + b"v" * 513 + b'"}}', "metadata.k"),
    (b'{"model": "mock/simple", "input": "hi"', "body"),
])
async def test_hostile_bodies_are_400s_naming_the_field(body: bytes, param: str) -> None:
    """What no SDK would send (invalid Unicode, loose types, broken JSON), sent raw."""
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/v1/responses", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


@pytest.mark.xfail("strict" not in ToolSpec.model_fields, strict=True,
                   reason="`strict` is carried once the canonical ToolSpec has it (issue 26, the dropin branch)")
async def test_strict_reaches_the_upstream() -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, sdk(url) as client:
        await client.responses.create(model="openai-responses/text", input="hi", tools=[{**CALCULATOR, "strict": True}])
    assert upstream.requests[-1]["tools"][0]["strict"] is True


@pytest.mark.parametrize("content", [True, False])
async def test_previous_response_id_is_served_from_the_run_records(tmp_path: Any, content: bool) -> None:
    """A response of a gateway that is gone (not live anywhere) is continued from its record; a
    response whose record keeps no content cannot be, and says so."""
    settings = {"data_dir": str(tmp_path), "record_content": content}
    async with serve(create_app(Settings(**settings))) as url, sdk(url) as client:
        first = await client.responses.create(model="mock/tool_call", input="What is 2+2?")  # the gateway's tool
    assert first.output_text == "Calling calculatorSum is 4"
    again = create_app(Settings(**settings))
    async with serve(again) as url, sdk(url) as client, httpx.AsyncClient(base_url=url) as http:
        stream_id = first.id.removeprefix("resp_")
        assert again.state.gateway.store.get(stream_id) is None  # not live here: from the records
        if not content:
            with pytest.raises(openai.BadRequestError) as raised:
                await client.responses.create(model="mock/echo", previous_response_id=first.id, input="And 3+3?")
            assert raised.value.body["param"] == "previous_response_id"
            return
        second = await client.responses.create(model="mock/echo", previous_response_id=first.id, input="And 3+3?")
        transcript = (await http.get(f"/v1/stream/{second.id.removeprefix('resp_')}/transcript")).json()
    sent = transcript["request_messages"]
    assert [(m["role"], m.get("content", "")) for m in sent] == [
        ("user", "What is 2+2?"), ("assistant", "Calling calculator"), ("tool", "4"), ("assistant", "Sum is 4"),
        ("user", "And 3+3?")]
    assert sent[1]["tool_calls"][0]["name"] == "calculator" and sent[2]["tool_call_id"] == sent[1]["tool_calls"][0]["id"]


async def test_keys_limits_and_records_apply_as_on_the_other_facades() -> None:
    async with gateway(auth="required") as (app, admin):
        url = str(admin.base_url).rstrip("/")
        made = await make_key(admin, name="narrow", models=["mock/simple"])
        key = made["key"]
        async with sdk(url, key) as client, sdk(url, "fgw-not-a-key") as stranger:
            raw = await client.responses.with_raw_response.create(model="mock/simple", input="hi")
            answer = raw.parse()
            assert answer.output_text == "Hello, world" and raw.headers["x-stream-id"] == answer.id.removeprefix("resp_")
            with pytest.raises(openai.PermissionDeniedError):
                await client.responses.create(model="mock/echo", input="hi")
            with pytest.raises(openai.AuthenticationError):
                await stranger.responses.create(model="mock/simple", input="hi")
        await app.state.records.flush()
        run = (await admin.get(f"/v1/runs/{raw.headers['x-stream-id']}", headers=bearer(key))).json()
        assert (run["model"], run["status"], run["owner"]) == ("mock/simple", "ok", made["id"])


async def test_item_references_to_earlier_output_are_resolved_per_key() -> None:
    """With `store` on, the Vercel AI SDK sends earlier output as `item_reference`s to its ids:
    they stand for that response's answer, rebuilt from its transcript, for the key that ran it."""
    async with gateway() as (app, admin):
        url = str(admin.base_url).rstrip("/")
        mine, theirs = (await make_key(admin, name="mine"))["key"], (await make_key(admin, name="theirs"))["key"]
        async with sdk(url, mine) as client, sdk(url, theirs) as other:
            first = await client.responses.create(model="mock/tool_call", input="What is 2+2?", tools=[CALCULATOR])
            text, call = first.output
            ask = [{"role": "user", "content": [{"type": "input_text", "text": "What is 2+2?"}]},
                   {"type": "item_reference", "id": text.id}, {"type": "item_reference", "id": call.id},
                   {"type": "function_call_output", "call_id": call.call_id, "output": "4"}]
            second = await client.responses.create(model="mock/tool_call", input=ask, tools=[CALCULATOR])
            assert second.output_text == "Sum is 4"
            transcript = (await admin.get(f"/v1/stream/{second.id.removeprefix('resp_')}/transcript",
                                          headers=bearer(mine))).json()
            sent = transcript["request_messages"]
            assert [(m["role"], m.get("content", "")) for m in sent] == [
                ("user", [{"type": "text", "text": "What is 2+2?"}]), ("assistant", "Calling calculator"), ("tool", "4")]
            assert sent[1]["tool_calls"][0]["id"] == call.call_id
            with pytest.raises(openai.NotFoundError) as raised:
                await other.responses.create(model="mock/tool_call", input=ask, tools=[CALCULATOR])
            assert raised.value.body["param"] == "input[1].id"


def test_a_replayed_reasoning_item_inside_a_turn_keeps_it_one_turn() -> None:
    """The Agents SDK replays earlier output as it came: text, reasoning, then the calls."""
    messages = input_messages([
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        {"type": "reasoning", "id": "rs_1_str_x", "summary": [{"type": "summary_text", "text": "use the tool"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    assert [(m.role, m.content, [c.id for c in m.tool_calls]) for m in messages] == [
        ("user", "Weather in Paris?", []), ("assistant", "Let me check.", ["call_1"]), ("tool", "sunny", [])]
