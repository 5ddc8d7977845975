"""pydantic-ai's `OpenAIResponsesModel` (a real Responses client: it asks `include:
["reasoning.encrypted_content"]` with reasoning models, and `NativeOutput` sends `text.format`
json_schema) through POST /v1/responses, with a tool and structured output, to an OpenAI Responses
model (passed through) and to an Anthropic model (translated), each a scripted loopback upstream in
its own wire format: the tool runs in the client, and the answer is the validated object."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from tests.compat_support import settings_for
from tests.support import serve

ANSWER = '{"city": "Paris", "celsius": 21}'


class Weather(BaseModel):
    city: str
    celsius: int


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


async def _frames(frames: list[bytes]) -> AsyncIterator[bytes]:
    for frame in frames:
        yield frame


def _responses(body: dict[str, Any]) -> list[bytes]:
    """A call of the first tool, then (after its output) the answer's JSON."""
    seq = iter(range(100))

    def ev(kind: str, **data: Any) -> bytes:
        return _sse(kind, {**data, "sequence_number": next(seq)})
    after_tool = any(i.get("type") == "function_call_output" for i in body["input"] if isinstance(i, dict))
    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress",
                "model": body["model"], "output": [], "usage": None}
    if not after_tool:
        item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": body["tools"][0]["name"],
                "arguments": '{"city": "Paris"}', "status": "completed"}
        events = [ev("response.output_item.added", output_index=0, item={**item, "arguments": ""}),
                  ev("response.function_call_arguments.delta", item_id="fc_1", output_index=0,
                     delta=item["arguments"]),
                  ev("response.function_call_arguments.done", item_id="fc_1", output_index=0,
                     arguments=item["arguments"]),
                  ev("response.output_item.done", output_index=0, item=item)]
    else:
        part = {"type": "output_text", "text": ANSWER, "annotations": []}
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [part]}
        where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        events = [ev("response.output_item.added", output_index=0, item={**item, "content": []}),
                  ev("response.content_part.added", **where, part={**part, "text": ""}),
                  ev("response.output_text.delta", **where, delta=ANSWER[:9]),
                  ev("response.output_text.delta", **where, delta=ANSWER[9:]),
                  ev("response.output_text.done", **where, text=ANSWER),
                  ev("response.content_part.done", **where, part=part),
                  ev("response.output_item.done", output_index=0, item=item)]
    usage = {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 8,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 28}
    return [ev("response.created", response=response), *events,
            ev("response.completed", response={**response, "status": "completed", "output": [item], "usage": usage})]


def _messages(body: dict[str, Any]) -> list[bytes]:
    after_tool = any(isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
                     for m in body["messages"])
    start = _sse("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant",
                                               "model": body["model"], "content": [], "stop_reason": None,
                                               "stop_sequence": None, "usage": {"input_tokens": 20,
                                                                                "output_tokens": 1}}})
    if not after_tool:
        block = {"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"], "input": {}}
        delta, stop = {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}, "tool_use"
    else:
        block, delta, stop = {"type": "text", "text": ""}, {"type": "text_delta", "text": ANSWER}, "end_turn"
    return [start, _sse("content_block_start", {"index": 0, "content_block": block}),
            _sse("content_block_delta", {"index": 0, "delta": delta}), _sse("content_block_stop", {"index": 0}),
            _sse("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 8}}),
            _sse("message_stop", {})]


@dataclass
class Upstream:
    requests: list[dict[str, Any]] = field(default_factory=list)

    def _route(self, frames: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            return StreamingResponse(_frames(frames(body)), media_type="text/event-stream")
        return endpoint

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/responses", self._route(_responses), methods=["POST"]),
                                 Route("/v1/messages", self._route(_messages), methods=["POST"])])


def _agent(url: str, model: str) -> Agent[None, Weather]:
    provider = OpenAIProvider(base_url=f"{url}/v1", api_key="sk-gateway-client")
    agent = Agent(OpenAIResponsesModel(model, provider=provider), output_type=NativeOutput(Weather))

    @agent.tool_plain
    def temperature(city: str) -> int:
        """The temperature in a city, in Celsius."""
        return 21 if city == "Paris" else 0

    return agent


@pytest.mark.parametrize("model", ["gpt-5.1", "claude-sonnet-4-5"])
@pytest.mark.parametrize("stream", [False, True])
async def test_pydantic_ai_responses_model_with_a_tool_and_native_output(model: str, stream: bool) -> None:
    upstream = Upstream()
    async with serve(upstream.app()) as up, serve(create_app(settings_for(up))) as url:
        agent = _agent(url, model)
        if stream:
            async with agent.run_stream("The weather in Paris?") as run:
                output = await run.get_output()
        else:
            output = (await agent.run("The weather in Paris?")).output
    assert output == Weather(city="Paris", celsius=21)
    first, second = upstream.requests
    if model.startswith("gpt"):  # passed through: the client's own request
        assert first["text"]["format"]["type"] == "json_schema" and first["model"] == model
        assert second["input"][-1]["type"] == "function_call_output"
    else:  # translated: structured output as Anthropic's output_config, the tool's result as tool_result
        assert set(first["output_config"]["format"]["schema"]["properties"]) == {"city", "celsius"}
        assert second["messages"][-1]["content"][0]["type"] == "tool_result"
