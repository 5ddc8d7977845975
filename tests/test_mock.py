"""The mock provider keeps the reference's MockStreamIterator / replay_stream semantics."""

import pytest

from app.core.errors import UpstreamNotFound
from app.core.events import FinalEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import Message
from app.providers.reference import MockStreamIterator, replay_stream


async def test_simple():
    events = await replay_stream(MockStreamIterator("simple"))
    assert [e.content for e in events if isinstance(e, TokenEvent)] == ["Hello", ", world"]
    assert events[-1].message.content == "Hello, world" and events[-1].status == "ok"


async def test_tool_call_timeline_and_final_answer():
    events = await replay_stream(MockStreamIterator("tool_call"))
    assert [e.type for e in events] == ["token", "tool_call", "tool_call", "tool_result", "token", "final"]
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [c.is_final for c in calls] == [False, True] and calls[-1].arguments == {"expression": "2 + 2"}
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.tool_call_id == calls[0].id and result.content == "4"
    assert events[-1].message.content == "Sum is 4"


async def test_the_same_list_on_every_replay():
    first = await replay_stream(MockStreamIterator("tool_call"))
    second = await replay_stream(MockStreamIterator("tool_call"))
    assert first == second


async def test_iterator_closes_itself_after_the_final_event():
    it = MockStreamIterator("simple")
    async for event in it:
        if isinstance(event, FinalEvent):
            assert it.closed
    assert it.closed


async def test_echo_and_lorem():
    msgs = (Message(role="user", content="first"), Message(role="assistant", content="x"),
            Message(role="user", content="say  this back"))
    events = await replay_stream(MockStreamIterator("echo", msgs))
    assert [e.content for e in events if isinstance(e, TokenEvent)] == ["say  ", "this ", "back"]
    events = await replay_stream(MockStreamIterator("lorem-25"))
    assert sum(isinstance(e, TokenEvent) for e in events) == 25
    assert events[-1].usage.output_tokens == 25


def test_unknown_scenario_is_a_not_found():
    with pytest.raises(UpstreamNotFound):
        MockStreamIterator("nope")


def test_the_mock_has_its_own_arithmetic_or_takes_a_calculator():
    from app.providers.mock import arithmetic

    assert arithmetic("2 + 2") == "4" and arithmetic("-3 * 7") == "-21"
    assert "not" in arithmetic("2 ** 99")


async def test_a_calculator_passed_in_gives_the_result():
    events = await replay_stream(MockStreamIterator("tool_call", calculator=lambda expression: "five"))
    assert next(e for e in events if isinstance(e, ToolResultEvent)).content == "five"
    assert events[-1].message.content == "Sum is five"
