"""One turn rule: a tool result that closes the turn (`ToolResultEvent.closes_turn`, decided where
the result is made) ends the assistant's turn, and the gate's final checks, the released message
and history (app/core/released.py) and the transcript all follow it, none with a rule of its own.

Driven from one event sequence made by the production pieces: the accumulator (server calls, a
caller-visible call answered in the provider's stream), the gateway's tools (a call it runs), the
validation gate (a validator that records what its final check judged, and one that blocks)."""

from __future__ import annotations

import pytest

from app.core.accumulator import Accumulator
from app.core.events import EVENT_SCHEMAS, StreamEvent, TokenEvent, ToolCallEvent, ToolResultEvent, Usage
from app.core.messages import ToolCall
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    Patch,
    TextDelta,
    ToolDelta,
    ToolEnd,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    ToolStart,
)
from app.core.released import Released
from app.core.transcript import Transcript
from app.streams.frames import encode_frame
from app.tools import ToolRegistry
from app.tools.calculator import CalculatorTool
from app.validation import Blocked
from tests.validation_support import drive, make_gate, recorder_registry, spec


def in_stream_result(call_id: str, content: str) -> list[Patch]:
    key = f"result-{call_id}"
    return [ToolResultStart(key=key, tool_call_id=call_id, name="tool"), ToolResultDelta(key=key, content=content),
            ToolResultEnd(key=key)]


STEP_1: list[Patch] = [
    TextDelta(text="Searching. "),
    ToolStart(key="s", id="srv", name="web_search", server=True), ToolEnd(key="s", arguments={"q": "sum"}),
    *in_stream_result("srv", "found"),  # a server tool's result: the turn goes on
    TextDelta(text="Calling add. "),
    ToolStart(key="c", id="c1", name="add"), ToolDelta(key="c", fragment='{"a": 2, '), ToolDelta(key="c", fragment='"b": 2}'),
    ToolEnd(key="c"),
    *in_stream_result("c1", "4"),  # answered in the provider's stream (as mock/tool_call plays it): a new turn
    TextDelta(text="Now I multiply. "), TextDelta(text="The calculator runs it."),
    ToolStart(key="g", id="g1", name="calculator"), ToolDelta(key="g", fragment='{"expression": "2 * 3"}'), ToolEnd(key="g"),
    MessageDelta(stop_reason="tool_calls"), MessageEnd(),
]
STEP_2: list[Patch] = [TextDelta(text="It is 6."), MessageDelta(stop_reason="stop"), MessageEnd()]


async def run_events() -> list[StreamEvent]:
    """Step 1 from the provider, the gateway's result for its call, step 2: as a run makes them."""
    first = Accumulator(model="m", provider="p")
    events = first.push_all(STEP_1)
    tools = ToolRegistry({"calculator": CalculatorTool(timeout=5)}).for_run("p", ())
    gateway_calls = [ToolCall(id=e.id, name=e.name, arguments=e.arguments or {}) for e in events
                     if isinstance(e, ToolCallEvent) and e.is_final and tools.runs(e.name)]
    execution = tools.start(gateway_calls)
    results = await execution.wait()
    second = Accumulator(model="m", provider="p")
    second.continue_from(first)
    return [*events, *results, *second.push_all(STEP_2)]


async def through(events: list[StreamEvent], *specs, log: list) -> tuple[list[StreamEvent], Blocked | None]:
    """The events through a gate whose recorder logs what its final check judged."""
    return await drive(make_gate(spec("recorder"), *specs, registry=recorder_registry(log)), events)


def transcript_turns(transcript: Transcript) -> list[str]:
    """The answer text of each turn, as the transcript cut them."""
    texts: dict[int, str] = {}
    for m in [*transcript.get_reasoning_messages(), *transcript.get_response_messages()]:
        if m.type in ("assistant_text", "response"):
            texts[m.turn] = texts.get(m.turn, "") + m.content
    return [texts.get(turn, "") for turn in range(1, max(texts, default=0) + 1)]


def observe(events: list[StreamEvent]) -> tuple[Released, Transcript]:
    released, transcript = Released(provider="p"), Transcript()
    for event in events:
        released.observe(event)
        transcript.observe(event)
    return released, transcript


async def test_the_gate_the_released_message_and_the_transcript_cut_the_same_turns() -> None:
    events = await run_events()
    results = {e.tool_call_id: e.closes_turn for e in events if isinstance(e, ToolResultEvent)}
    assert results == {"srv": False, "c1": True, "g1": True}  # decided once, where each result was made

    log: list = []
    out, blocked = await through(events, log=log)
    assert blocked is None
    released, transcript = observe(out)
    released.end_turn()
    transcript.finish(status="ok", stop_reason="stop", usage=Usage(), steps=2)

    turns = [m.content for m in released.history if m.role == "assistant"] + [released.message().content]
    assert turns == ["Searching. Calling add. ", "Now I multiply. The calculator runs it.", "It is 6."]
    assert [(m.role, m.tool_call_id) for m in released.history] == [
        ("assistant", None), ("tool", "c1"), ("assistant", None), ("tool", "g1")]
    assert transcript_turns(transcript) == turns
    assert [m.content for m in transcript.get_response_messages()] == ["It is 6."]  # turns that call nothing
    assert [text for phase, lane, text in log if phase == "final"] == ["It is 6."]  # the last turn, judged


async def test_a_block_mid_turn_leaves_the_same_open_turn_everywhere() -> None:
    events = await run_events()
    log: list = []
    out, blocked = await through(events, spec("regex_deny", patterns=["calculator"]), log=log)
    assert blocked is not None
    released, transcript = observe(out)
    assert [m.content for m in released.history if m.role == "assistant"] == ["Searching. Calling add. "]
    assert released.message().content == "Now I multiply. "  # released before the block, in the open turn
    assert transcript_turns(transcript) == ["Searching. Calling add. ", "Now I multiply. "]
    assert "".join(e.content for e in out if isinstance(e, TokenEvent)).endswith("Now I multiply. ")


@pytest.mark.parametrize(("closes_turn", "turns"), [
    (False, ["A calls c1. B."]),  # a caller-visible call's result that does not say so: one turn
    (True, ["A calls c1. ", "B."]),
])
async def test_every_reader_follows_the_flag_not_a_set_of_ids_of_its_own(closes_turn: bool, turns: list[str]) -> None:
    events: list[StreamEvent] = [
        TokenEvent(index=0, content="A calls c1. "),
        ToolCallEvent(id="c1", name="add", index=0, args_fragment="{}", is_final=True, arguments={}),
        ToolResultEvent(tool_call_id="c1", name="add", content="1", closes_turn=closes_turn),
        TokenEvent(index=1, content="B."),
    ]
    log: list = []
    out, blocked = await through(events, log=log)
    assert blocked is None and out == events
    released, transcript = observe(out)
    assert [m.content for m in released.history if m.role == "assistant"] + [released.message().content] == turns
    assert transcript_turns(transcript) == turns
    assert [text for phase, lane, text in log if phase == "final"] == [turns[-1]]



def test_the_flag_never_reaches_the_wire() -> None:
    result = ToolResultEvent(tool_call_id="c1", name="add", content="1")
    closing = ToolResultEvent(tool_call_id="c1", name="add", content="1", closes_turn=True)
    assert closing.data() == result.data() and encode_frame(7, closing) == encode_frame(7, result)
    assert set(result.data()) == set(EVENT_SCHEMAS["tool_result"].__annotations__)  # what the OpenAPI document says
