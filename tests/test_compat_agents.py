"""The OpenAI Agents SDK (`openai-agents`) running an agent with one function tool through the
gateway's POST /v1/responses, the gateway under uvicorn on loopback against a fake upstream
Responses API that replays real recordings: first a call of `get_capital` (function-call.sse),
then, once the request carries the tool's output, the answer (text.sse)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool, set_tracing_disabled
from app.main import create_app
from tests.compat_support import settings_for
from tests.support import recordings, serve

RECORDED = {r.name: r for r in recordings("openai-responses")}
ANSWER = RECORDED["text"].expected["text"]


class AgentUpstream:
    """An upstream Responses API: asks for the tool until the conversation holds its output."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def responses(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        answered = any(item.get("type") == "function_call_output" for item in body["input"])
        recording = RECORDED["text" if answered else "function-call"]
        return StreamingResponse(iter([recording.body]), media_type="text/event-stream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/responses", self.responses, methods=["POST"])])


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agent_with_one_function_tool(streamed: bool) -> None:
    asked: list[str] = []

    @function_tool
    def get_capital(country: str) -> str:
        """The capital city of a country."""
        asked.append(country)
        return "Paris"

    upstream = AgentUpstream()
    async with serve(upstream.app()) as up, serve(create_app(settings_for(up))) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-gateway-client", max_retries=0)
        agent = Agent(name="geographer", instructions="Answer with the capital.", tools=[get_capital],
                      model=OpenAIResponsesModel(model="openai-responses/agent", openai_client=client))
        config = RunConfig(tracing_disabled=True)
        if streamed:
            run = Runner.run_streamed(agent, "What is the capital of France?", run_config=config)
            kinds = {event.type async for event in run.stream_events()}
            assert "raw_response_event" in kinds
            result: Any = run
        else:
            result = await Runner.run(agent, "What is the capital of France?", run_config=config)
        await client.close()
    assert asked == ["France"]
    assert result.final_output == ANSWER
    first, second = upstream.requests
    assert first["instructions"] == "Answer with the capital." and [t["name"] for t in first["tools"]] == [
        "get_capital"]
    call = RECORDED["function-call"].expected["tool_calls"][0]
    # as the Agents SDK wrote it (a same-wire request passes through): a message item may omit its type
    assert [i.get("type", "message") for i in second["input"]] == ["message", "function_call", "function_call_output"]
    assert second["input"][1]["call_id"] == second["input"][2]["call_id"] == call["id"]
    assert second["input"][2]["output"] == "Paris"


class CityAnswer(BaseModel):
    city: str


class JsonAnthropic:
    """An Anthropic Messages upstream answering with the JSON its request's output schema asks for."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def messages(self, request: Request) -> Response:
        self.requests.append(await request.json())
        text = json.dumps({"city": "Paris"})
        frames = [("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                                 "content": [], "stop_reason": None,
                                                 "usage": {"input_tokens": 3, "output_tokens": 1}}}),
                  ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                  ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
                  ("content_block_stop", {"index": 0}),
                  ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
                  ("message_stop", {})]
        body = b"".join(f"event: {k}\ndata: {json.dumps({'type': k, **d})}\n\n".encode() for k, d in frames)
        return StreamingResponse(iter([body]), media_type="text/event-stream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])


async def test_an_agent_with_an_output_type_on_another_provider() -> None:
    """`output_type` makes the SDK send `text.format` json_schema: translated to Anthropic's
    structured output, the answer parsed into the type."""
    upstream = JsonAnthropic()
    async with serve(upstream.app()) as up, serve(create_app(settings_for(up))) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-gateway-client", max_retries=0)
        agent = Agent(name="geographer", instructions="Answer with the capital.", output_type=CityAnswer,
                      model=OpenAIResponsesModel(model="anthropic/claude-x", openai_client=client))
        result = await Runner.run(agent, "What is the capital of France?", run_config=RunConfig(tracing_disabled=True))
        await client.close()
    assert result.final_output == CityAnswer(city="Paris")
    assert upstream.requests[-1]["output_config"]["format"]["type"] == "json_schema"
