"""Runs with gateway-executed tools, end to end: steps in one stream, results back to the model,
max_steps, mixed and shadowed calls, validators in a later step, the transcript endpoint,
observability."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import httpx

from app.core.messages import Message
from app.core.patches import MessageDelta, MessageEnd, TextDelta, ToolDelta, ToolEnd, ToolStart, UsagePatch
from app.main import create_app
from app.providers.base import ProviderRequest
from app.settings import Settings
from app.tools.config import PythonToolConfig
from tests.fakes import FakeAdapter, ScriptedStream
from tests.support import in_process, parse_sse

ASK = {"model": "fake/m", "messages": [{"role": "user", "content": "What is 2+3?"}]}


def add(a: int, b: int) -> int:
    return a + b


def tool(name: str, target: str, **kwargs) -> PythonToolConfig:
    return PythonToolConfig(name=name, target=target, description=f"the {name} tool",
                            parameters={"type": "object", "properties": {}}, **kwargs)


ADD = tool("add", "tests.test_tool_runs:add")


class StepAdapter(FakeAdapter):
    """A provider answering its n-th request with the n-th script (the last one repeats);
    the steps named in `blocking` wait, after their batches, until closed."""

    def __init__(self, *scripts: list, blocking: frozenset[int] = frozenset()) -> None:
        super().__init__(name="fake")
        self.scripts = scripts
        self.blocking = blocking

    async def open_stream(self, request: ProviderRequest) -> ScriptedStream:
        self.requests.append(request)
        n = len(self.streams)
        stream = ScriptedStream(list(self.scripts[min(n, len(self.scripts) - 1)]), block=n in self.blocking)
        self.streams.append(stream)
        return stream


def calls_step(*calls: tuple[str, str, dict], text: str | None = None, usage=(10, 5)) -> list:
    """A response that (says `text` and) calls tools, each call's arguments in two fragments."""
    batches: list = [[TextDelta(text=text)]] if text else []
    for key, (call_id, name, arguments) in enumerate(calls):
        raw = json.dumps(arguments)
        batches.append([ToolStart(key=key, id=call_id, name=name), ToolDelta(key=key, fragment=raw[: len(raw) // 2])])
        batches.append([ToolDelta(key=key, fragment=raw[len(raw) // 2:]), ToolEnd(key=key)])
    batches.append([MessageDelta(stop_reason="tool_calls", usage=UsagePatch(input_tokens=usage[0],
                                                                          output_tokens=usage[1])), MessageEnd()])
    return batches


def answer_step(*texts: str, usage=(20, 3)) -> list:
    return [[TextDelta(text=t)] for t in texts] + [
        [MessageDelta(stop_reason="stop", usage=UsagePatch(input_tokens=usage[0], output_tokens=usage[1])),
         MessageEnd()]]


async def run(adapter, body=ASK, **settings):
    app = create_app(Settings(**settings), adapters={"fake": adapter})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        r = await c.post("/v1/stream", json=body)
        events = parse_sse(r.content)
        transcript = await c.get(f"/v1/stream/{r.headers['x-stream-id']}/transcript") if events else None
    return events, transcript, app


def kinds(events):
    return [e for _, e, _ in events]


async def test_a_gateway_tool_runs_and_the_model_is_called_again_in_the_same_stream():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 2, "b": 3}), text="Adding"), answer_step("It is ", "5"))
    events, _, _ = await run(adapter, tools=[ADD])
    assert kinds(events) == ["start", "token", "tool_call", "tool_call", "tool_result", "token", "token", "final"]
    assert [i for i, _, _ in events] == list(range(1, 9))  # one sequence of ids across the steps
    assert [d["index"] for _, e, d in events if e == "token"] == [0, 1, 2]  # and of token indexes
    result = next(d for _, e, d in events if e == "tool_result")
    assert result == {"tool_call_id": "c1", "name": "add", "content": "5", "is_error": False}
    final = events[-1][2]
    assert final["status"] == "ok" and final["stop_reason"] == "stop" and final["steps"] == 2
    assert final["message"] == {"role": "assistant", "content": "It is 5", "tool_calls": []}
    assert final["usage"]["input_tokens"] == 30 and final["usage"]["output_tokens"] == 8
    assert final["usage"]["total_tokens"] == 38 and final["max_steps_reached"] is False
    assert final["messages"] == [
        {"role": "assistant", "content": "Adding", "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
        {"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"},
    ]
    first, second = adapter.requests
    assert [t.name for t in first.tools] == ["add"]  # offered: the model sees what the gateway runs
    assert second.messages[1:] == (
        Message(role="assistant", content="Adding", tool_calls=({"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}},)),
        Message(role="tool", content="5", tool_call_id="c1", name="add"),
    )
    assert all(s.closed.is_set() for s in adapter.streams)


async def test_the_transcript_of_a_two_step_run():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 2, "b": 3}), text="Adding"), answer_step("It is 5"))
    events, r, _ = await run(adapter, tools=[ADD])
    assert r.status_code == 200
    t = r.json()
    assert t["stream_id"] == events[0][2]["stream_id"] and t["status"] == "ok" and t["steps"] == 2
    assert t["usage"] == events[-1][2]["usage"] and t["stop_reason"] == "stop"
    assert t["request_messages"] == ASK["messages"]
    assert [(m["type"], m["step"]) for m in t["reasoning_messages"]] == [
        ("assistant_text", 1), ("tool_call", 1), ("tool_output", 1)]
    assert t["reasoning_messages"][1]["content"] == {"name": "add", "input": {"a": 2, "b": 3}, "server": False}
    assert t["reasoning_messages"][2]["content"]["output"] == 5
    assert [(m["type"], m["content"], m["step"]) for m in t["response_messages"]] == [("response", "It is 5", 2)]
    [call] = t["tool_calls"]
    assert call["id"] == "c1" and call["state"] == "has_output" and call["output"] == "5"
    assert call["gateway"] and call["output_source"] == "gateway" and "".join(call["fragments"]) == '{"a": 2, "b": 3}'
    assert call["created_at"] <= call["completed_at"] <= call["output_at"] and t["truncated"] is False


async def test_the_transcript_gives_its_times_in_iso_8601_like_the_run_records():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 2, "b": 3}), text="Adding"), answer_step("It is 5"))
    _, r, _ = await run(adapter, tools=[ADD])
    t = r.json()
    times = [t["created_at"], *(call[k] for call in t["tool_calls"] for k in ("created_at", "completed_at", "output_at")),
             *(m["timestamp"] for m in t["reasoning_messages"] + t["response_messages"])]
    assert len(times) == 1 + 3 + 4
    for at in times:
        assert isinstance(at, str) and datetime.fromisoformat(at).utcoffset() == timedelta(0), at


async def test_unknown_transcripts_are_a_json_404():
    app = create_app(Settings())
    async with in_process(app) as c:  # the lookup opens the records engine: the lifespan closes it
        r = await c.get("/v1/stream/str_nope/transcript")
    assert r.status_code == 404 and r.json()["error"]["code"] == "stream_not_found"


async def test_parallel_calls_run_together_and_a_failure_goes_back_to_the_model():
    from tests import test_tools

    test_tools.started.clear()
    tools = [tool("a", "tests.test_tools:waits_for_peer"), tool("b", "tests.test_tools:waits_for_peer"),
             tool("broken", "tests.test_tools:fails")]
    adapter = StepAdapter(calls_step(("c1", "a", {"name": "a", "peer": "b"}), ("c2", "b", {"name": "b", "peer": "a"}),
                                     ("c3", "broken", {})), answer_step("ok"))
    events, _, app = await run(adapter, tools=tools)
    results = {d["tool_call_id"]: d for _, e, d in events if e == "tool_result"}
    assert results["c1"]["content"] == "a done" and results["c2"]["content"] == "b done"
    assert results["c3"] == {"tool_call_id": "c3", "name": "broken", "content": "RuntimeError: the database is down",
                             "is_error": True}
    tool_messages = adapter.requests[1].messages[2:]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [
        ("c1", "a done"), ("c2", "b done"), ("c3", "RuntimeError: the database is down")]  # in call order
    metrics = app.state.gateway.metrics.render().decode()
    assert 'foundry_tool_executions_total{outcome="error",tool="broken"} 1.0' in metrics
    assert 'foundry_tool_executions_total{outcome="ok",tool="a"} 1.0' in metrics


async def test_a_slow_tool_times_out_as_an_error_result():
    adapter = StepAdapter(calls_step(("c1", "slow", {})), answer_step("sorry"))
    events, _, _ = await run(adapter, tools=[tool("slow", "tests.test_tools:never_returns", timeout=0.05)])
    result = next(d for _, e, d in events if e == "tool_result")
    assert result["is_error"] and result["content"] == "tool slow timed out after 0.05s"
    assert events[-1][2]["status"] == "ok" and adapter.requests[1].messages[-1].content == result["content"]


async def test_max_steps_reached_pauses_the_run_and_says_so():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 1, "b": 1})), calls_step(("c2", "add", {"a": 2, "b": 2})))
    events, _, _ = await run(adapter, {**ASK, "max_steps": 2}, tools=[ADD])
    final = events[-1][2]
    assert final["status"] == "ok" and final["stop_reason"] == "pause" and final["max_steps_reached"] is True
    assert final["steps"] == 2 and len(adapter.requests) == 2
    assert [d["content"] for _, e, d in events if e == "tool_result"] == ["2", "4"]  # the last turn's calls ran too
    assert [m["role"] for m in final["messages"]] == ["assistant", "tool", "assistant", "tool"]
    assert final["message"]["tool_calls"] == []  # nothing for the caller to answer: send `messages` back to go on


async def test_max_steps_above_the_operator_cap_is_refused():
    app = create_app(Settings(max_steps=3, records=False))  # no lifespan here: nothing to write records with
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        r = await c.post("/v1/stream", json={**ASK, "model": "mock/tool_call", "max_steps": 4})
        assert r.status_code == 422 and r.json()["error"]["field"] == "max_steps"
        r = await c.post("/v1/generate", json={**ASK, "model": "mock/tool_call", "max_steps": 1})
    body = r.json()  # one step: the calculator ran, then the run paused
    assert body["stop_reason"] == "pause" and body["steps"] == 1 and body["messages"][-1]["content"] == "4"


async def test_calls_the_gateway_does_not_run_end_the_stream_for_the_caller():
    lookup = {"name": "lookup", "parameters": {"type": "object", "properties": {}}}
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 1, "b": 2}), ("c2", "lookup", {"q": "x"})))
    events, _, _ = await run(adapter, {**ASK, "tools": [lookup]}, tools=[ADD])
    final = events[-1][2]
    assert final["stop_reason"] == "tool_calls" and final["steps"] == 1 and len(adapter.requests) == 1
    assert [c["id"] for c in final["message"]["tool_calls"]] == ["c2"]  # the caller answers lookup
    assert [m["role"] for m in final["messages"]] == ["assistant", "tool"] and final["messages"][1]["content"] == "3"
    assert [t.name for t in adapter.requests[0].tools] == ["lookup", "add"]


async def test_a_tool_the_caller_declares_is_the_callers_even_if_the_gateway_has_one():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 1, "b": 2})))
    events, _, _ = await run(adapter, {**ASK, "tools": [{"name": "add"}]}, tools=[ADD])
    assert "tool_result" not in kinds(events)
    final = events[-1][2]
    assert final["stop_reason"] == "tool_calls" and final["message"]["tool_calls"][0]["id"] == "c1"
    assert "messages" not in final and [t.description for t in adapter.requests[0].tools] == [""]


async def test_a_validator_blocking_in_the_second_step_ends_the_stream_blocked():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 2, "b": 3}), text="Adding. "),
                          answer_step("Fine so far. ", "The secret is 5. ", "More."))
    body = {**ASK, "validators": [{"name": "regex_deny", "config": {"patterns": ["secret"]}}]}
    events, r, _ = await run(adapter, body, tools=[ADD])
    assert kinds(events) == ["start", "token", "tool_call", "tool_call", "tool_result", "token", "final"]
    final = events[-1][2]
    assert final["status"] == "blocked" and final["steps"] == 2 and final["error"]["validator"] == "regex_deny"
    assert final["message"]["content"] == "Fine so far. " and "secret" not in json.dumps(events[:-1])
    assert adapter.streams[1].closed.is_set()
    assert r.json()["status"] == "blocked" and "secret" not in r.text  # the transcript holds what was released


async def test_tool_choice_required_applies_to_the_first_step_only():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 2, "b": 3})), answer_step("5"))
    await run(adapter, {**ASK, "tool_choice": "required", "tools": [{"name": "other"}]}, tools=[ADD])
    assert [r.tool_choice for r in adapter.requests] == ["required", None]


async def test_the_request_log_counts_steps_and_tools(capsys):
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 2, "b": 3})), answer_step("5"))
    await run(adapter, tools=[ADD])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    [line] = [line for line in lines if line.get("event") == "request" and line["path"] == "/v1/stream"]
    assert line["steps"] == 2 and line["tools_run"] == 1 and line["stream_status"] == "ok"


async def test_memory_stays_bounded_on_a_long_stream():
    chunks = 20_000
    app = create_app(Settings(transcript_max_chars=2_000, transcript_max_items=20, max_stream_events=100))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        r = await c.post("/v1/generate", json={**ASK, "model": f"mock/lorem-{chunks}"})
        stream_id = r.headers["x-stream-id"]
        t = (await c.get(f"/v1/stream/{stream_id}/transcript")).json()
    log = app.state.gateway.store.get(stream_id)
    transcript = log.info.transcript
    assert transcript.size[0] <= 2_000 and transcript.size[1] <= 20 and t["truncated"] is True
    assert len(log) <= 100 and log.last_seq == chunks + 2
    assert len(t["response_messages"][0]["content"]) <= 2_000


async def test_text_after_the_last_call_held_by_a_validator_is_in_the_final_message():
    # The sentence chunker holds "and then some" (no sentence end) past the call: it must be
    # checked and released before the tools run, and be part of the message the final reports.
    step = calls_step(("c1", "add", {"a": 1, "b": 1}), text="Adding.")
    step.insert(-1, [TextDelta(key=5, text=" and then some")])
    body = {**ASK, "max_steps": 1, "chunking": "sentence",
            "validators": [{"name": "regex_deny", "config": {"patterns": ["forbidden"]}}]}
    events, _, _ = await run(StepAdapter(step), body, tools=[ADD])
    final = events[-1][2]
    released = "".join(d["content"] for _, e, d in events if e == "token")
    assert final["status"] == "ok" and final["stop_reason"] == "pause"
    assert released == "Adding. and then some"
    assert final["message"]["content"] == released == final["messages"][0]["content"]
    assert kinds(events).index("tool_result") > max(i for i, k in enumerate(kinds(events)) if k == "token")
