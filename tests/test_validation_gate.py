"""The gate: hold, validate, release (DESIGN.md section 5 and the reference's cases)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.events import AssistantMessage, StreamEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import ToolSpec
from app.validation import VALIDATORS, Blocked, ValidatorSpec, build_gate
from app.validation.validators.base import UNKNOWN, CheckContext, Validator, Verdict

ADD = ToolSpec(
    name="add",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]},
)


def spec(name: str, **config) -> ValidatorSpec:
    return ValidatorSpec(name=name, config=config)


def tokens(text: str, size: int = 4, first: int = 0) -> list[TokenEvent]:
    return [TokenEvent(index=first + n, content=text[i:i + size]) for n, i in enumerate(range(0, len(text), size))]


def text_of(events: Sequence[StreamEvent]) -> str:
    return "".join(e.content for e in events if isinstance(e, TokenEvent))


async def drive(gate, events: Sequence[StreamEvent]) -> tuple[list[StreamEvent], Blocked | None]:
    """Admit every event, then finish; what was released, and the Blocked if one came."""
    released: list[StreamEvent] = []
    try:
        for event in events:
            released += await gate.admit(event)
        released += await gate.finish()
    except Blocked as blocked:
        return released, blocked
    return released, None


def make_gate(*specs: ValidatorSpec, operator: Sequence[ValidatorSpec] = (), registry=None, **kw):
    kw.setdefault("chunking", None)
    kw.setdefault("tools", ())
    kw.setdefault("judge", None)
    return build_gate(request_specs=list(specs), operator_specs=list(operator), registry=registry, **kw)


class Recorder(Validator):
    """Says unknown to everything and logs what it was asked (log passed through the env-free class)."""

    name = "recorder"
    log: list[tuple[str, str, str]]

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        self.log.append(("chunk", ctx.lane, chunk))
        return UNKNOWN

    async def check_final(self, text: str, ctx: CheckContext) -> Verdict:
        self.log.append(("final", ctx.lane, text))
        return UNKNOWN


def recorder_registry(log: list) -> dict:
    cls = type("BoundRecorder", (Recorder,), {"log": log})
    return {**VALIDATORS, "recorder": cls}


async def test_no_validators_means_no_gate() -> None:
    assert make_gate() is None


async def test_normal_completion_all_unknown_and_final_checks_run() -> None:
    log: list = []
    gate = make_gate(spec("recorder"), registry=recorder_registry(log))
    events = tokens("First one. Second one! Third")
    released, blocked = await drive(gate, events)
    assert blocked is None
    assert released == events  # released whole, in order, unchanged
    assert log == [
        ("chunk", "text", "First one. "), ("chunk", "text", "Second one! "), ("chunk", "text", "Third"),
        ("final", "text", "First one. Second one! Third"),
    ]
    assert gate.summary()["validators"]["recorder"] == {
        "pass": 0, "fail": 0, "unknown": 4, "error": 0, "checks": 4,
        "seconds": gate.summary()["validators"]["recorder"]["seconds"],
    }


async def test_a_token_straddling_a_boundary_waits_for_the_next_chunk() -> None:
    gate = make_gate(spec("regex_deny", patterns=["nope"]))
    t0, t1, t2 = TokenEvent(index=0, content="Hello wor"), TokenEvent(index=1, content="ld. How"), \
        TokenEvent(index=2, content=" are you?")
    assert await gate.admit(t0) == []
    assert await gate.admit(t1) == [t0]  # "Hello world. " passed; t1 reaches into the next chunk
    assert await gate.admit(t2) == []
    assert await gate.finish() == [t1, t2]  # trailing fragment checked, then the rest goes out


async def test_early_exit_on_fail_never_releases_held_text() -> None:
    gate = make_gate(spec("regex_deny", patterns=["(?i)password"]))
    events = tokens("Fine. Still fine. The password is hunter2. Tail text. More.", size=3)
    released, blocked = await drive(gate, events)
    assert blocked is not None
    assert blocked.to_dict() == {
        "code": "validation_failed", "message": "validator regex_deny failed: matched '(?i)password': 'password'",
        "retryable": False, "validator": "regex_deny", "reason": "matched '(?i)password': 'password'",
    }
    assert "Fine. Still fine. ".startswith(text_of(released))
    assert "pass" not in text_of(released) and "hunter" not in text_of(released)
    with pytest.raises(Blocked):  # the gate stays shut: nothing more comes out
        await gate.admit(TokenEvent(index=99, content="x"))
    with pytest.raises(Blocked):
        await gate.finish()
    assert gate.summary()["blocked"] == {"validator": "regex_deny", "reason": "matched '(?i)password': 'password'"}
    assert gate.released_message(AssistantMessage(content="".join(e.content for e in events))).content == \
        text_of(released)


class Stateful(Validator):
    """Fails on the third chunk its instance sees: state that must not leak between requests."""

    name = "stateful"

    def __init__(self, config, env) -> None:
        super().__init__(config, env)
        self.seen = 0

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        self.seen += 1
        return Verdict.fail("third chunk") if self.seen >= 3 else UNKNOWN


async def test_state_never_leaks_between_two_requests() -> None:
    registry = {**VALIDATORS, "stateful": Stateful}
    specs = [spec("stateful")]
    for _ in range(2):  # two requests with the same specs: each gets fresh instances
        gate = make_gate(*specs, registry=registry)
        _, blocked = await drive(gate, tokens("One. Two. "))
        assert blocked is None
    _, blocked = await drive(make_gate(*specs, registry=registry), tokens("One. Two. Three. "))
    assert blocked is not None and blocked.reason == "third chunk"


async def test_quick_checks_go_to_the_judge_backend_named_in_config() -> None:
    asked: list[str] = []

    async def judge(model: str, prompt: str) -> str:
        asked.append(model)
        return "FAIL: shouting" if "LOUD" in prompt.rsplit("TEXT:", 1)[1] else "PASS"

    gate = make_gate(spec("llm_judge", model="cheapco/tiny-judge", policy="No shouting."), judge=judge)
    released, blocked = await drive(gate, tokens("Calm words. Still calm. LOUD NOISES. After."))
    assert blocked is not None and (blocked.validator, blocked.reason) == ("llm_judge", "shouting")
    assert asked == ["cheapco/tiny-judge"] * 3
    assert "LOUD" not in text_of(released)


async def test_llm_judge_without_a_judge_backend_is_refused() -> None:
    with pytest.raises(Exception) as info:
        make_gate(spec("llm_judge", model="mock/echo", policy="x"))
    assert info.value.status == 422 and info.value.details["field"] == "validators.0"


async def test_no_deadlock_when_the_gate_stops_with_the_upstream_queue_full() -> None:
    """The reference's deadlock case: a bounded queue between the upstream reader and the gate."""
    queue: asyncio.Queue[StreamEvent] = asyncio.Queue(maxsize=4)
    events = tokens("Good. Bad word here. " + "More text. " * 5000)

    async def upstream() -> None:
        for event in events:
            await queue.put(event)

    producer = asyncio.create_task(upstream())
    gate = make_gate(spec("banned_words", words=["bad word"]))
    released: list[StreamEvent] = []
    with pytest.raises(Blocked):
        while True:
            released += await gate.admit(await queue.get())
    producer.cancel()  # what the pipeline does: close the upstream
    done, _ = await asyncio.wait([producer], timeout=5)  # a guard only: it ends at once
    assert producer in done and producer.cancelled()
    assert queue.qsize() > 0  # the upstream had more queued (and more to send) when the gate stopped
    assert text_of(released) == "Good"  # ". Ba" straddles into the failed chunk: dropped whole


class Waiting(Validator):
    """An awaiting validator that stays inside its check until the test lets it go."""

    name = "waiting"
    inline = False
    entered: asyncio.Event
    release: asyncio.Event

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        self.entered.set()
        await self.release.wait()
        return Verdict(kind="pass")


async def test_a_slow_validator_stalls_the_upstream_read() -> None:
    entered, release, full = asyncio.Event(), asyncio.Event(), asyncio.Event()
    cls = type("W", (Waiting,), {"entered": entered, "release": release})
    gate = make_gate(spec("waiting"), registry={**VALIDATORS, "waiting": cls})
    queue: asyncio.Queue[StreamEvent] = asyncio.Queue(maxsize=2)
    events = tokens("One. Two. Three. ", size=5)
    produced = 0

    async def upstream() -> None:
        nonlocal produced
        for event in events:
            if queue.full():
                full.set()
            await queue.put(event)
            produced += 1

    async def consume() -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for _ in events:
            out += await gate.admit(await queue.get())
        return out + await gate.finish()

    producer = asyncio.create_task(upstream())
    consumer = asyncio.create_task(consume())
    await entered.wait()  # the first chunk is being checked...
    await full.wait()  # ...and the upstream read is stalled behind it, with a bounded queue
    assert produced == 2 + queue.maxsize  # "One. Two" read (the second token decided "One. ")
    release.set()
    assert text_of(await consumer) == "One. Two. Three. "
    await producer


class Hanging(Validator):
    name = "hanging"
    inline = False
    started: asyncio.Event
    cancelled: list[str]

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(chunk)
            raise
        return UNKNOWN


class FailsOnceHangingStarted(Validator):
    name = "fails"
    inline = False
    started: asyncio.Event

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        await self.started.wait()  # only possible if the other check runs at the same time
        return Verdict.fail("no")


def hanging(cancelled: list[str] | None = None, started: asyncio.Event | None = None) -> type[Validator]:
    return type("H", (Hanging,), {"cancelled": [] if cancelled is None else cancelled,
                                  "started": started or asyncio.Event()})


async def test_a_chunks_checks_run_concurrently_and_the_first_fail_cancels_the_rest() -> None:
    cancelled: list[str] = []
    started = asyncio.Event()
    registry = {**VALIDATORS, "hanging": hanging(cancelled, started),
                "fails": type("F", (FailsOnceHangingStarted,), {"started": started})}
    gate = make_gate(spec("hanging"), spec("fails"), registry=registry)
    _, blocked = await drive(gate, tokens("Some text. More"))
    assert blocked is not None and blocked.validator == "fails"
    assert cancelled == ["Some text. "]


@pytest.mark.parametrize(("on_error", "blocked_reason"), [("fail", "check timed out after 0.01s"), ("ignore", None)])
async def test_a_check_that_times_out_follows_on_error(on_error: str, blocked_reason: str | None) -> None:
    registry = {**VALIDATORS, "hanging": hanging()}
    gate = make_gate(ValidatorSpec(name="hanging", config={"timeout": 0.01, "on_error": on_error}), registry=registry)
    released, blocked = await drive(gate, tokens("Text. "))
    assert (blocked.reason if blocked else None) == blocked_reason
    assert gate.summary()["validators"]["hanging"]["error"] == 1
    assert text_of(released) == ("" if blocked else "Text. ")


class Broken(Validator):
    name = "broken"

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        raise RuntimeError("bug")


@pytest.mark.parametrize("on_error", ["fail", "ignore"])
async def test_a_validator_error_fails_closed_by_default(on_error: str) -> None:
    gate = make_gate(ValidatorSpec(name="broken", config={"on_error": on_error}),
                     registry={**VALIDATORS, "broken": Broken})
    released, blocked = await drive(gate, tokens("Text. "))
    if on_error == "fail":
        assert blocked is not None and blocked.reason == "check failed: RuntimeError: bug" and released == []
    else:
        assert blocked is None and text_of(released) == "Text. "


CARD = "4111 1111 1111 1111"


@given(cuts=st.lists(st.integers(min_value=1, max_value=80), max_size=15))
async def test_a_redacted_card_number_never_appears_in_any_event(cuts: list[int]) -> None:
    text = f"Pay with card {CARD} today. Thanks! Or {CARD.replace(' ', '-')}"
    points = sorted({c for c in cuts if c < len(text)})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    events = [TokenEvent(index=i, content=p) for i, p in enumerate(pieces)]
    gate = make_gate(spec("pii", action="redact"))
    released, blocked = await drive(gate, events)
    assert blocked is None
    assert all(not any(ch.isdigit() for ch in e.content) for e in released)
    assert [e.index for e in released] == list(range(len(released)))  # still sequential
    expected = "Pay with card [CARD] today. Thanks! Or [CARD]"
    assert text_of(released) == expected
    assert gate.released_message(AssistantMessage(content=text)).content == expected
    assert gate.summary()["redactions"] == 2


def call_events(call_id: str, fragments: list[str], arguments: dict, index: int = 0) -> list[ToolCallEvent]:
    out = [ToolCallEvent(id=call_id, name="add", index=index, args_fragment=f) for f in fragments[:-1]]
    out.append(ToolCallEvent(id=call_id, name="add", index=index, args_fragment=fragments[-1], is_final=True,
                             arguments=arguments))
    return out


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
    result = ToolResultEvent(tool_call_id="c1", name="add", content="3")
    assert await gate.admit(calls[0]) == []
    assert await gate.admit(calls[1]) == calls
    assert await gate.admit(result) == [result]
    assert await gate.finish() == []
    message = AssistantMessage(content="", tool_calls=())
    assert gate.released_message(message) == message


async def test_redacted_tool_arguments_go_out_whole_with_the_final_fragment() -> None:
    gate = make_gate(spec("pii", action="redact"))
    calls = call_events("c1", ['{"to": "a@b', '.io"}'], {"to": "a@b.io"})
    released, _ = await drive(gate, calls)
    assert len(released) == 1 and released[0].is_final
    assert released[0].args_fragment == '{"to":"[EMAIL]"}' and released[0].arguments == {"to": "[EMAIL]"}


async def test_only_released_tool_calls_are_in_the_released_message() -> None:
    from app.core.messages import ToolCall

    gate = make_gate(spec("json_schema"), tools=(ADD,))
    events = [*call_events("ok", ['{"a": 1, "b": 2}'], {"a": 1, "b": 2}),
              *call_events("bad", ['{"a": "x", "b": 2}'], {"a": "x", "b": 2}, index=1)]
    _, blocked = await drive(gate, events)
    assert blocked is not None
    message = AssistantMessage(tool_calls=(ToolCall(id="ok", name="add", arguments={"a": 1, "b": 2}),
                                           ToolCall(id="bad", name="add", arguments={"a": "x", "b": 2})))
    assert [c.id for c in gate.released_message(message).tool_calls] == ["ok"]


async def test_reasoning_is_a_lane_of_its_own() -> None:
    from app.core.events import ReasoningEvent

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
    from app.core.events import ReasoningEvent

    gate = make_gate(spec("banned_words", words=["secret"]))
    _, blocked = await drive(gate, [ReasoningEvent(index=0, content="The secret is out."), *tokens("Hi.")])
    assert blocked is not None and blocked.reason == "banned word 'secret'"


async def test_redacted_reasoning_loses_its_signature() -> None:
    from app.core.events import ReasoningEvent
    from app.core.messages import ReasoningBlock

    gate = make_gate(spec("pii", action="redact"))
    await drive(gate, [ReasoningEvent(index=0, content="Email a@b.io now."), *tokens("Done.")])
    message = AssistantMessage(content="Done.", reasoning=(ReasoningBlock(text="Email a@b.io now.", signature="sig"),))
    (block,) = gate.released_message(message).reasoning
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


async def test_released_message_follows_the_accumulators_turns() -> None:
    """Like mock/tool_call: text, a call, its result, then the answer (a new turn)."""
    gate = make_gate(spec("pii", action="redact"), spec("json_schema"), tools=(ADD,))
    first = tokens("Calling add for a@b.io")
    events = [*first, *call_events("c1", ['{"a": 1, "b": 2}'], {"a": 1, "b": 2}),
              ToolResultEvent(tool_call_id="c1", name="add", content="3"),
              *tokens("Sum is 3, mail c@d.io", first=len(first))]
    released, blocked = await drive(gate, events)
    assert blocked is None
    assert text_of(released) == "Calling add for [EMAIL]Sum is 3, mail [EMAIL]"
    message = gate.released_message(AssistantMessage(content="Sum is 3, mail c@d.io"))
    assert message.content == "Sum is 3, mail [EMAIL]"
