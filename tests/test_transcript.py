"""The transcript (app/core/transcript.py): tool calls tracked by id, outputs matched by id in
any order, reasoning apart from responses, display processors, bounded memory."""

from __future__ import annotations

import itertools

import pytest

from app.core.events import ReasoningEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import Message, ToolCall
from app.core.processors import ProcessorRegistry
from app.core.transcript import Transcript, TranscriptLimits


def clock():
    ticks = itertools.count(1)
    return lambda: float(next(ticks))


def fragment(call_id, name, index, text, *, final=False, arguments=None, server=False):
    return ToolCallEvent(id=call_id, name=name, index=index, args_fragment=text, is_final=final,
                         arguments=arguments, server=server)


def result(call_id, name, content, *, error=False, closes_turn=False):
    return ToolResultEvent(tool_call_id=call_id, name=name, content=content, is_error=error, closes_turn=closes_turn)


def feed(transcript, *events):
    for event in events:
        transcript.observe(event)


def test_interleaved_parallel_calls_are_tracked_apart_with_states_and_timestamps():
    t = Transcript(clock=clock())
    feed(t, TokenEvent(index=0, content="Let me look"),
         fragment("c1", "weather", 0, '{"city": '), fragment("c2", "time", 1, '{"zone": '))
    assert t.get_tool_call("c1").state == "in_progress" and t.get_tool_call("c2").state == "in_progress"
    feed(t, fragment("c2", "time", 1, '"UTC"}', final=True, arguments={"zone": "UTC"}),
         fragment("c1", "weather", 0, '"Paris"}', final=True, arguments={"city": "Paris"}))
    c1, c2 = t.get_tool_call("c1"), t.get_tool_call("c2")
    assert (c1.state, c2.state) == ("complete", "complete")
    assert c1.fragments == ['{"city": ', '"Paris"}'] and c1.fragment_count == 2 and c1.input == {"city": "Paris"}
    assert c2.fragments == ['{"zone": ', '"UTC"}'] and c2.input == {"zone": "UTC"}
    assert c1.created_at < c2.created_at < c2.completed_at < c1.completed_at
    assert c1.output is None and c1.output_at is None
    assert list(t.get_tool_calls()) == ["c1", "c2"]


def test_outputs_are_matched_by_id_whatever_their_order():
    t = Transcript(clock=clock())
    feed(t, fragment("c1", "f", 0, "{}", final=True, arguments={}), fragment("c2", "g", 1, "{}", final=True, arguments={}))
    t.mark_gateway(["c1", "c2"])
    feed(t, result("c2", "g", "two", closes_turn=True), result("c1", "f", "one", error=True, closes_turn=True))
    c1, c2 = t.get_tool_call("c1"), t.get_tool_call("c2")
    assert (c1.output, c1.is_error, c1.state, c1.output_source) == ("one", True, "has_output", "gateway")
    assert (c2.output, c2.is_error, c2.state) == ("two", False, "has_output")
    assert c2.output_at < c1.output_at
    outputs = [m for m in t.get_reasoning_messages() if m.type == "tool_output"]
    assert [(m.id, m.content["output"]) for m in outputs] == [("c2", {"text": "two"}), ("c1", {"text": "one"})]


def test_an_output_before_its_call_waits_for_it_and_unknown_ones_are_listed():
    t = Transcript(clock=clock())
    feed(t, result("early", "f", '{"ok": true}'), result("ghost", "g", "boo"))
    assert t.get_tool_call("early") is None and set(t.unmatched_outputs) == {"early", "ghost"}
    feed(t, fragment("early", "f", 0, "{}", final=True, arguments={}))
    early = t.get_tool_call("early")
    assert early.output == '{"ok": true}' and early.state == "has_output"
    snap = t.snapshot()
    assert [o["tool_call_id"] for o in snap["unmatched_outputs"]] == ["ghost"]


def test_request_messages_are_kept_and_the_callers_outputs_matched_to_their_calls():
    messages = (
        Message(role="user", content="weather?"),
        Message(role="assistant", tool_calls=(ToolCall(id="r1", name="weather", arguments={"city": "Oslo"}),)),
        Message(role="tool", content="-3C", tool_call_id="r1", name="weather"),
    )
    t = Transcript(clock=clock())
    t.add_request(messages)
    r1 = t.get_tool_call("r1")
    assert (r1.origin, r1.state, r1.output, r1.output_source) == ("request", "has_output", "-3C", "caller")
    assert r1.input == {"city": "Oslo"} and r1.fragments == ['{"city":"Oslo"}']
    snap = t.snapshot()
    assert snap["request_messages"][0] == {"role": "user", "content": "weather?"}
    assert snap["reasoning_messages"] == [] and snap["response_messages"] == []  # the run's own, only


def test_messages_are_classified_as_the_reference_does():
    t = Transcript(clock=clock())
    feed(t, ReasoningEvent(index=0, content="think"), TokenEvent(index=0, content="Calling "),
         TokenEvent(index=1, content="add"), fragment("c1", "add", 0, '{"a": 1}', final=True, arguments={"a": 1}))
    t.step = 2
    feed(t, result("c1", "add", "3", closes_turn=True), TokenEvent(index=2, content="It is 3"))
    reasoning = [(m.type, m.step, m.content) for m in t.get_reasoning_messages()]
    assert reasoning == [
        ("thinking", 1, "think"),
        ("assistant_text", 1, "Calling add"),  # the text of a turn that calls a tool is reasoning
        ("tool_call", 1, {"name": "add", "input": {"a": 1}, "server": False}),
        ("tool_output", 2, {"name": "add", "output": 3, "is_error": False, "source": "provider"}),
    ]
    assert [(m.type, m.content) for m in t.get_response_messages()] == [("response", "It is 3")]


def test_server_tools_do_not_turn_the_answer_into_reasoning_and_an_answered_call_closes_the_turn():
    t = Transcript(clock=clock())
    feed(t, TokenEvent(index=0, content="Searching. "),
         fragment("s1", "web_search", 0, '{"q": "x"}', final=True, arguments={"q": "x"}, server=True),
         result("s1", "web_search", "results"), TokenEvent(index=1, content="Found it."))
    snap = t.snapshot()  # the open turn is shown as if it ended now
    assert [m["content"] for m in snap["response_messages"]] == ["Searching. ", "Found it."]
    assert [m["type"] for m in snap["reasoning_messages"]] == ["tool_call", "tool_output"]
    assert t.get_tool_call("s1").output_source == "provider" and t.get_tool_call("s1").server
    # A call the model does not run, answered inside the provider's stream: the answer after it is a new turn.
    feed(t, fragment("c1", "calc", 1, "{}", final=True, arguments={}), result("c1", "calc", "4", closes_turn=True),
         TokenEvent(index=2, content="Sum is 4"))
    assert [m.content for m in t.get_response_messages()][-1] == "Sum is 4"
    assert [m.type for m in t.get_reasoning_messages()][-2:] == ["tool_call", "tool_output"]


class Shouting:
    def process_input(self, arguments):
        return {"title": f"Looking up {arguments['city'].upper()}"}

    def process_output(self, content):
        raise RuntimeError("cannot render")


def test_registered_processors_shape_display_and_never_break_the_record():
    processors = ProcessorRegistry()
    processors.register_processor("weather", Shouting())
    assert isinstance(processors.get_processor_for_tool("weather"), Shouting)
    t = Transcript(processors=processors, clock=clock())
    feed(t, fragment("c1", "weather", 0, '{"city": "oslo"}', final=True, arguments={"city": "oslo"}))
    feed(t, result("c1", "weather", "cold", closes_turn=True))
    call, output = t.get_reasoning_messages()
    assert call.content["input"] == {"title": "Looking up OSLO"}
    assert output.content["output"]["text"] == "cold" and "cannot render" in output.content["output"]["processor_error"]
    assert t.get_tool_call("c1").input == {"city": "oslo"}  # the record keeps the raw input


@pytest.mark.parametrize("kind", ["tokens", "calls"])
def test_memory_stays_bounded_on_a_long_stream(kind):
    limits = TranscriptLimits(max_chars=5_000, max_items=50)
    t = Transcript(limits=limits)
    for n in range(20_000):
        if kind == "tokens":
            t.observe(TokenEvent(index=n, content="word "))
            if n % 100 == 99:  # a call answered: the turn ends
                t.observe(fragment(f"c{n}", "f", n, "{}", final=True, arguments={}))
                t.observe(result(f"c{n}", "f", "x", closes_turn=True))
        else:
            call = f"call_{n}"
            t.observe(fragment(call, "f", n, '{"n": 1}', final=True, arguments={"n": 1}))
            t.observe(result(call, "f", "x" * 50))
        chars, items = t.size
        assert chars <= limits.max_chars and items <= limits.max_items
    assert t.truncated
    snap = t.snapshot()
    assert len(snap["tool_calls"]) + len(snap["reasoning_messages"]) + len(snap["response_messages"]) <= 2 * 50
