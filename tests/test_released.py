"""The released message and turns come from the released events alone (app/core/released.py)."""

from app.core.events import AssistantMessage, ReasoningBlockEnd, ReasoningEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import ReasoningBlock
from app.core.released import Released


def call(call_id: str, index: int, *, server: bool = False) -> ToolCallEvent:
    return ToolCallEvent(id=call_id, name="calculator", index=index, args_fragment="{}", is_final=True,
                         arguments={}, server=server)


def test_block_ends_carry_signatures_and_a_cut_block_loses_its_own() -> None:
    whole = ReasoningBlock(text="think", signature="sig", provider="anthropic")
    redacted = ReasoningBlock(text="", redacted="opaque", provider="anthropic")
    released = Released.of([ReasoningEvent(index=0, content="think"), ReasoningBlockEnd(block=whole),
                            ReasoningBlockEnd(block=redacted), ReasoningEvent(index=1, content="cut sh"),
                            ReasoningBlockEnd(block=ReasoningBlock(text="cut short", signature="s2")),
                            ReasoningEvent(index=2, content="never ended")], provider="anthropic")
    blocks = released.message().reasoning
    assert blocks[:2] == (whole, redacted)
    assert (blocks[2].text, blocks[2].signature) == ("cut sh", None)
    assert (blocks[3].text, blocks[3].signature, blocks[3].provider) == ("never ended", None, "anthropic")


def result(call_id: str, content: str, *, closes_turn: bool = True) -> ToolResultEvent:
    return ToolResultEvent(tool_call_id=call_id, name="calculator", content=content, closes_turn=closes_turn)


def test_a_result_that_closes_the_turn_ends_it_a_server_one_does_not() -> None:
    released = Released.of([TokenEvent(index=0, content="Calling"), call("c1", 0), result("c1", "4"),
                            TokenEvent(index=1, content="Sum is 4"), call("srv", 1, server=True),
                            result("srv", "x", closes_turn=False)])
    assert [(m.role, m.content) for m in released.history] == [("assistant", "Calling"), ("tool", "4")]
    assert released.message().content == "Sum is 4" and released.message().tool_calls == ()
    assert released.added == ()  # turns closed inside a response are not the gateway's additions


def test_the_gateways_results_close_the_turn_and_join_it_in_call_order() -> None:
    released = Released.of([TokenEvent(index=0, content="Two calls"), call("b", 1), call("a", 0)])
    assert [c.id for c in released.message().tool_calls] == ["a", "b"]  # by the calls' index
    released.observe(result("b", "2"))  # finished first: closes the turn
    assert released.message().content == "" and released.added == ()
    released.observe(result("a", "1"))
    released.end_turn()
    assert [(m.role, m.content, m.tool_call_id) for m in released.added] == [
        ("assistant", "Two calls", None), ("tool", "1", "a"), ("tool", "2", "b")]


def test_a_turn_that_said_nothing_stays_open() -> None:
    """A result closing a turn already closed (the second of a turn's results) leaves the thinking
    that came after it in the open turn, to go with the answer."""
    thinking = ReasoningBlock(text="hm", provider="p")
    released = Released.of([call("a", 0), call("b", 1), result("a", "1"), ReasoningEvent(index=0, content="hm"),
                            ReasoningBlockEnd(block=thinking), result("b", "2"), TokenEvent(index=0, content="3")])
    assert [m.role for m in released.history] == ["assistant", "tool", "tool"]
    assert released.message() == AssistantMessage(content="3", reasoning=(thinking,))
