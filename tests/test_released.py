"""The released message and turns come from the released events alone (app/core/released.py)."""

from app.core.events import ReasoningBlockEnd, ReasoningEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import ReasoningBlock, ToolCall
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


def test_a_result_for_a_step_call_closes_the_turn_a_server_one_does_not() -> None:
    released = Released.of([TokenEvent(index=0, content="Calling"), call("c1", 0),
                            ToolResultEvent(tool_call_id="c1", name="calculator", content="4"),
                            TokenEvent(index=1, content="Sum is 4"), call("srv", 1, server=True),
                            ToolResultEvent(tool_call_id="srv", name="calculator", content="x")])
    assert [(m.role, m.content) for m in released.history] == [("assistant", "Calling"), ("tool", "4")]
    assert released.message().content == "Sum is 4" and released.message().tool_calls == ()
    assert released.added == ()  # turns closed inside a response are not the gateway's additions


def test_the_gateway_ends_a_step_turn_with_its_results_in_call_order() -> None:
    released = Released.of([TokenEvent(index=0, content="Two calls"), call("b", 1), call("a", 0)])
    message = released.end_step()
    assert [c.id for c in message.tool_calls] == ["a", "b"]  # by the calls' index
    released.observe(ToolResultEvent(tool_call_id="b", name="calculator", content="2"))  # the gateway's: no effect
    released.end_turn([(ToolCall(id="a", name="calculator", arguments={}), "1"),
                       (ToolCall(id="b", name="calculator", arguments={}), "2")])
    assert [(m.role, m.content, m.tool_call_id) for m in released.added] == [
        ("assistant", "Two calls", None), ("tool", "1", "a"), ("tool", "2", "b")]
    assert released.message().content == ""
