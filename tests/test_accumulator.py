"""The one accumulator: patches in, canonical events out, whatever the provider; the message and
the turns built from those events (app/core/released.py)."""

import pytest

from app.core.accumulator import Accumulator, StreamProtocolError
from app.core.errors import UpstreamError
from app.core.events import (
    FinalEvent,
    ReasoningBlockEnd,
    ReasoningEvent,
    StreamEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    MessageStart,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolDelta,
    ToolEnd,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    ToolStart,
    UsagePatch,
)
from app.core.released import Released


class Response:
    """The accumulator after the patches, with the message and turns built from its events."""

    def __init__(self, acc: Accumulator, events: list[StreamEvent]) -> None:
        self.acc = acc
        self.released = Released.of(events, provider="p")
        self.history = self.released.history

    def __getattr__(self, name):
        return getattr(self.acc, name)

    def final(self, status, **kw) -> FinalEvent:
        return self.released.final(self.acc, status, **kw)


def run(*patches):
    """The public events (no ReasoningBlockEnd marker: those never leave the pipeline) and the response."""
    acc = Accumulator(model="m", provider="p", block_ends=True)
    events = acc.push_all(list(patches))
    return [e for e in events if type(e) is not ReasoningBlockEnd], Response(acc, events)


def test_text_tokens_are_indexed_from_zero_and_empty_deltas_dropped():
    events, acc = run(MessageStart(id="r1", model="m-2024"), TextStart(), TextDelta(text="Hel"), TextDelta(text=""),
                      TextDelta(text="lo"), TextEnd(), MessageEnd())
    assert events == [TokenEvent(index=0, content="Hel"), TokenEvent(index=1, content="lo")]
    final = acc.final("ok")
    assert final.message.content == "Hello" and final.model == "m-2024" and acc.response_id == "r1"


@pytest.mark.parametrize("keys", [(0, 1), ("a", "b"), (1, 0)])
def test_interleaved_parallel_tool_calls_stay_apart(keys):
    k1, k2 = keys
    events, acc = run(
        ToolStart(key=k1, id="c1", name="f"), ToolStart(key=k2, id="c2", name="g"),
        ToolDelta(key=k1, fragment='{"a"'), ToolDelta(key=k2, fragment='{"b"'),
        ToolDelta(key=k1, fragment=": 1}"), ToolDelta(key=k2, fragment=": 2}"),
        ToolEnd(key=k2), ToolEnd(key=k1), MessageDelta(stop_reason="tool_calls"), MessageEnd(),
    )
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    by_id = {}
    for e in calls:
        by_id.setdefault(e.id, []).append(e)
    assert "".join(e.args_fragment for e in by_id["c1"]) == '{"a": 1}'
    assert "".join(e.args_fragment for e in by_id["c2"]) == '{"b": 2}'
    assert [e.is_final for e in by_id["c1"]] == [False, True]
    assert by_id["c1"][-1].arguments == {"a": 1} and by_id["c2"][-1].arguments == {"b": 2}
    assert {e.index for e in by_id["c1"]} == {0} and {e.index for e in by_id["c2"]} == {1}
    message = acc.final("ok").message
    assert [(c.id, dict(c.arguments)) for c in message.tool_calls] == [("c1", {"a": 1}), ("c2", {"b": 2})]


def test_tool_call_without_fragments_gives_one_final_event_with_empty_object():
    events, _ = run(ToolStart(key=0, id="c", name="now"), ToolEnd(key=0), MessageEnd())
    assert events == [ToolCallEvent(id="c", name="now", index=0, args_fragment="", is_final=True, arguments={})]


def test_whole_call_with_parsed_arguments_gives_its_json_as_the_fragment():
    events, _ = run(ToolStart(key="u", id="c", name="f"), ToolEnd(key="u", arguments={"q": "x"}), MessageEnd())
    assert events[0].args_fragment == '{"q":"x"}' and events[0].arguments == {"q": "x"}


def test_open_tool_calls_are_finished_at_message_end():
    events, _ = run(ToolStart(key=0, id="c", name="f"), ToolDelta(key=0, fragment="{}"), MessageEnd())
    assert events[-1].is_final and events[-1].arguments == {}


@pytest.mark.parametrize("raw", ['{"a": ', "[1, 2]"])
def test_bad_tool_arguments_raise_an_upstream_error(raw):
    with pytest.raises(UpstreamError) as err:
        run(ToolStart(key=0, id="c", name="f"), ToolDelta(key=0, fragment=raw), ToolEnd(key=0))
    assert err.value.code == "invalid_tool_arguments"


@pytest.mark.parametrize(
    "patches",
    [
        [ToolDelta(key=9, fragment="{}")],
        [ToolStart(key=0, id="c", name="f"), ToolEnd(key=0), ToolDelta(key=0, fragment="x")],
        [ToolStart(key=0, id="c", name="f"), TextDelta(key=0, text="x")],
        [ToolResultDelta(key=1, content="x")],
    ],
)
def test_patches_aimed_at_the_wrong_block_are_protocol_errors(patches):
    with pytest.raises(StreamProtocolError):
        run(*patches)


def test_reasoning_blocks_keep_text_and_signature_apart_from_the_answer():
    events, acc = run(
        ReasoningStart(key=0), ReasoningDelta(key=0, text="think "), ReasoningDelta(key=0, text="more"),
        ReasoningDelta(key=0, signature="sig"), ReasoningEnd(key=0),
        ReasoningStart(key=1, redacted="opaque"), ReasoningEnd(key=1),
        TextDelta(key=2, text="answer"), MessageEnd(),
    )
    assert [e for e in events if isinstance(e, ReasoningEvent)] == [
        ReasoningEvent(index=0, content="think "), ReasoningEvent(index=1, content="more")]
    message = acc.final("ok").message
    assert message.content == "answer"
    assert [(b.text, b.signature, b.redacted) for b in message.reasoning] == [
        ("think more", "sig", None), ("", None, "opaque")]


def test_usage_merges_field_by_field_and_totals_when_not_reported():
    _, acc = run(
        MessageStart(usage=UsagePatch(input_tokens=10, cache_read_tokens=4, cache_write_tokens=2)),
        MessageDelta(usage=UsagePatch(output_tokens=3)),
        MessageDelta(usage=UsagePatch(output_tokens=7, reasoning_tokens=5)),
        MessageEnd(),
    )
    assert acc.usage.to_dict() == {"input_tokens": 10, "output_tokens": 7, "total_tokens": 17,
                                   "cache_read_tokens": 4, "cache_write_tokens": 2, "reasoning_tokens": 5}
    _, acc = run(MessageDelta(usage=UsagePatch(input_tokens=1, output_tokens=1, total_tokens=5)))
    assert acc.usage.total_tokens == 5


def test_a_caller_tool_result_closes_the_turn_and_server_results_do_not():
    events, acc = run(
        TextDelta(text="Calling"), ToolStart(key="t", id="c1", name="calc"), ToolDelta(key="t", fragment="{}"),
        ToolEnd(key="t"), ToolResultStart(key="r", tool_call_id="c1", name="calc"),
        ToolResultDelta(key="r", content="4"), ToolResultEnd(key="r"), TextDelta(text="Sum is 4"),
        ToolStart(key="s", id="srv", name="web_search", server=True), ToolEnd(key="s", arguments={"q": "x"}),
        ToolResultStart(key="sr", tool_call_id="srv", name="web_search"), ToolResultEnd(key="sr"),
        TextDelta(text="!"), MessageEnd(),
    )
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert results == [ToolResultEvent(tool_call_id="c1", name="calc", content="4", closes_turn=True),
                       ToolResultEvent(tool_call_id="srv", name="web_search", content="")]
    message = acc.final("ok").message
    assert message.content == "Sum is 4!" and message.tool_calls == ()
    assert [m.role for m in acc.history] == ["assistant", "tool"]
    assert acc.history[0].tool_calls[0].id == "c1" and acc.history[1].content == "4"
    finals = [e for e in events if isinstance(e, ToolCallEvent) and e.is_final]
    assert [(c.id, c.server) for c in finals] == [("c1", False), ("srv", True)]


def test_only_a_result_for_a_completed_call_of_the_response_closes_the_turn():
    """A result for a call not (yet) complete, or not of this response, leaves the turn open."""
    events, _ = run(
        ToolStart(key="t", id="c1", name="calc"), ToolDelta(key="t", fragment="{"),
        ToolResultStart(key="early", tool_call_id="c1", name="calc"), ToolResultEnd(key="early"),
        ToolDelta(key="t", fragment="}"), ToolEnd(key="t"),
        ToolResultStart(key="other", tool_call_id="elsewhere", name="calc"), ToolResultEnd(key="other"),
        ToolResultStart(key="r", tool_call_id="c1", name="calc"), ToolResultEnd(key="r"), MessageEnd(),
    )
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [(e.tool_call_id, e.closes_turn) for e in results] == [("c1", False), ("elsewhere", False), ("c1", True)]


def test_final_is_honest_about_errors():
    _, acc = run(TextDelta(text="partial"), MessageDelta(stop_reason="stop"))
    final = acc.final("error", error={"code": "upstream_disconnected"})
    assert isinstance(final, FinalEvent)
    assert final.status == "error" and final.stop_reason == "error" and final.message.content == "partial"
    assert acc.final("cancelled").stop_reason == "cancelled"
    assert acc.completed is False
