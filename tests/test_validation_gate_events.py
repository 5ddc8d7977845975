"""The gate over every kind of event: redaction, tool calls, reasoning, turns, policy, metrics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.events import (
    AssistantMessage,
    ReasoningBlockEnd,
    ReasoningEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from app.core.messages import ReasoningBlock
from app.core.released import Released
from app.validation import Blocked
from tests.validation_support import (
    ADD,
    call_events,
    drive,
    make_gate,
    recorder_registry,
    spec,
    text_of,
    tokens,
)

CARD = "4111 1111 1111 1111"


@given(cuts=st.lists(st.integers(min_value=1, max_value=80), max_size=15))
async def test_a_redacted_card_number_never_appears_in_any_event(cuts: list[int]) -> None:
    text = f"Pay with card {CARD} today. Thanks! Or {CARD.replace(' ', '-')}"
    points = sorted({c for c in cuts if c < len(text)})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    events = [TokenEvent(index=i, content=p) for i, p in enumerate(pieces)]
    gate = make_gate(spec("pii", action="redact"))
    released, blocked = await drive(gate, events)
    assert blocked is None
    assert all(not any(ch.isdigit() for ch in e.content) for e in released)
    assert [e.index for e in released] == list(range(len(released)))  # still sequential
    expected = "Pay with card [CARD] today. Thanks! Or [CARD]"
    assert text_of(released) == expected
    assert Released.of(released).message().content == expected
    assert gate.summary()["redactions"] == 2


async def test_a_tool_call_with_schema_invalid_arguments_is_blocked_before_any_fragment() -> None:
    gate = make_gate(spec("json_schema"), tools=(ADD,))
    events = [*tokens("Let me add."), *call_events("c1", ['{"a": 1, ', '"b": ', '"two"}'], {"a": 1, "b": "two"})]
    released, blocked = await drive(gate, events)
    assert blocked is not None and blocked.validator == "json_schema"
    assert "'two' is not of type 'integer'" in blocked.reason
    assert not any(isinstance(e, ToolCallEvent) for e in released)
    assert text_of(released) == "Let me add."  # the text before the call ended with it, and passed


async def test_a_valid_tool_call_goes_out_whole_once_complete() -> None:
    gate = make_gate(spec("json_schema"), tools=(ADD,))
    calls = call_events("c1", ['{"a": 1, ', '"b": 2}'], {"a": 1, "b": 2})
    result = ToolResultEvent(tool_call_id="c1", name="add", content="3", closes_turn=True)
    assert await gate.admit(calls[0]) == []
    assert await gate.admit(calls[1]) == calls
    assert await gate.admit(result) == [result]
    assert await gate.finish() == []
    message = AssistantMessage(content="", tool_calls=())
    assert Released.of([*calls, result]).message() == message


async def test_redacted_tool_arguments_go_out_whole_with_the_final_fragment() -> None:
    gate = make_gate(spec("pii", action="redact"))
    calls = call_events("c1", ['{"to": "a@b', '.io"}'], {"to": "a@b.io"})
    released, _ = await drive(gate, calls)
    assert len(released) == 1 and released[0].is_final
    assert released[0].args_fragment == '{"to":"[EMAIL]"}' and released[0].arguments == {"to": "[EMAIL]"}


async def test_only_released_tool_calls_are_in_the_released_message() -> None:
    gate = make_gate(spec("json_schema"), tools=(ADD,))
    events = [*call_events("ok", ['{"a": 1, "b": 2}'], {"a": 1, "b": 2}),
              *call_events("bad", ['{"a": "x", "b": 2}'], {"a": "x", "b": 2}, index=1)]
    released, blocked = await drive(gate, events)
    assert blocked is not None
    assert [c.id for c in Released.of(released).message().tool_calls] == ["ok"]


async def test_reasoning_is_a_lane_of_its_own() -> None:
    log: list = []
    gate = make_gate(spec("recorder"), spec("max_length", max=12), registry=recorder_registry(log))
    thinking = [ReasoningEvent(index=0, content="Think about "), ReasoningEvent(index=1, content="it. Done")]
    answer = tokens("Answer: 4.")
    released, blocked = await drive(gate, [*thinking, *answer])
    assert blocked is None  # max_length counts the answer only
    assert released == [*thinking, *answer]
    assert log == [
        ("chunk", "reasoning", "Think about it. "),
        ("chunk", "reasoning", "Done"),  # the answer began: the reasoning fragment is complete
        ("chunk", "text", "Answer: 4."),
        ("final", "text", "Answer: 4."),
        ("final", "reasoning", "Think about it. Done"),
    ]


async def test_a_banned_word_in_reasoning_blocks_too() -> None:
    gate = make_gate(spec("banned_words", words=["secret"]))
    _, blocked = await drive(gate, [ReasoningEvent(index=0, content="The secret is out."), *tokens("Hi.")])
    assert blocked is not None and blocked.reason == "banned word 'secret'"


async def test_redacted_reasoning_loses_its_signature() -> None:

    gate = make_gate(spec("pii", action="redact"))
    end = ReasoningBlockEnd(block=ReasoningBlock(text="Email a@b.io now.", signature="sig"))
    released, _ = await drive(gate, [ReasoningEvent(index=0, content="Email a@b.io now."), end, *tokens("Done.")])
    (block,) = Released.of(released).message().reasoning
    assert block.text == "Email [EMAIL] now." and block.signature is None


async def test_operator_validators_always_apply_and_request_ones_add() -> None:
    operator = [spec("regex_deny", patterns=["forbidden"])]
    gate = make_gate(spec("banned_words", words=["darn"]), spec("regex_deny", patterns=["other"]), operator=operator)
    assert list(gate.summary()["validators"]) == ["regex_deny", "banned_words", "regex_deny#2"]
    _, blocked = await drive(gate, tokens("This is forbidden. "))
    assert blocked is not None and blocked.validator == "regex_deny"
    assert make_gate(operator=operator) is not None  # a request with no validators still gets them


async def test_observer_sees_every_check() -> None:
    seen: list[tuple[str, str, str]] = []
    gate = make_gate(spec("regex_deny", patterns=["zzz"]), spec("json_schema"), tools=(ADD,),
                     observer=lambda name, phase, outcome, seconds: seen.append((name, phase, outcome)))
    await drive(gate, [*tokens("One. Two."), *call_events("c", ['{"a":1,"b":2}'], {"a": 1, "b": 2})])
    assert seen == [
        ("regex_deny", "chunk", "pass"), ("json_schema", "chunk", "unknown"),
        ("regex_deny", "chunk", "pass"), ("json_schema", "chunk", "unknown"),
        ("regex_deny", "tool_call", "pass"), ("json_schema", "tool_call", "pass"),
        ("regex_deny", "final", "unknown"), ("json_schema", "final", "unknown"),
    ]


async def test_none_chunking_releases_each_token_after_its_own_check() -> None:
    gate = make_gate(spec("banned_words", words=["bad"]), chunking="none")
    t0, t1, t2 = tokens("ok so ba", size=3)
    assert await gate.admit(t0) == [t0]
    assert await gate.admit(t1) == [t1]
    assert await gate.admit(t2) == [t2]
    with pytest.raises(Blocked):  # "ba" + "d" is caught across tokens through the released tail
        await gate.admit(TokenEvent(index=3, content="d "))


async def test_max_length_in_tokens_counts_token_events() -> None:
    gate = make_gate(spec("max_length", max=5, unit="tokens"))
    released, blocked = await drive(gate, tokens("a. b. c. d. e. f. g.", size=3))
    assert blocked is not None and blocked.reason == "answer longer than 5 tokens"
    assert len(released) <= 5


async def test_tool_results_pass_through_in_order() -> None:
    gate = make_gate(spec("regex_deny", patterns=["zzz"]))
    result = ToolResultEvent(tool_call_id="s1", name="web_search", content="zzz raw tool output")
    text = tokens("Before.")
    released, blocked = await drive(gate, [*text, result, *tokens(" After.", first=len(text))])
    assert blocked is None
    assert released[len(text)] == result and text_of(released) == "Before. After."


async def test_released_message_follows_the_turns() -> None:
    """Like mock/tool_call: text, a call, its result, then the answer (a new turn)."""
    gate = make_gate(spec("pii", action="redact"), spec("json_schema"), tools=(ADD,))
    first = tokens("Calling add for a@b.io")
    events = [*first, *call_events("c1", ['{"a": 1, "b": 2}'], {"a": 1, "b": 2}),
              ToolResultEvent(tool_call_id="c1", name="add", content="3", closes_turn=True),
              *tokens("Sum is 3, mail c@d.io", first=len(first))]
    released, blocked = await drive(gate, events)
    assert blocked is None
    assert text_of(released) == "Calling add for [EMAIL]Sum is 3, mail [EMAIL]"
    message = Released.of(released).message()
    assert message.content == "Sum is 3, mail [EMAIL]"


async def test_a_lane_no_validator_judges_passes_through_at_once() -> None:
    gate = make_gate(spec("max_length", max=100))  # judges the answer only
    thinking = ReasoningEvent(index=0, content="Unfinished thought")
    assert await gate.admit(thinking) == [thinking]
    assert gate.summary()["chunks"] == {"text": 0, "reasoning": 0}


async def test_final_checks_judge_the_last_turn_the_final_message_holds() -> None:
    schema = {"type": "object", "required": ["sum"]}
    gate = make_gate(spec("json_schema", schema=schema), tools=(ADD,))
    events = [*tokens("Let me add."), *call_events("c1", ['{"a": 1, "b": 2}'], {"a": 1, "b": 2}),
              ToolResultEvent(tool_call_id="c1", name="add", content="3", closes_turn=True), *tokens('{"sum": 3}', first=3)]
    released, blocked = await drive(gate, events)
    assert blocked is None and text_of(released) == 'Let me add.{"sum": 3}'
