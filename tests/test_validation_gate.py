"""The gate: hold, validate, release (DESIGN.md section 5 and the reference's cases)."""

from __future__ import annotations

import asyncio

import pytest

from app.core.events import StreamEvent, TokenEvent
from app.core.released import Released
from app.validation import VALIDATORS, Blocked, ValidatorSpec
from app.validation.validators.base import UNKNOWN, CheckContext, Validator, Verdict
from tests.validation_support import drive, make_gate, recorder_registry, spec, text_of, tokens


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
    assert Released.of(released).message().content == text_of(released)


async def test_text_validated_before_a_fail_in_the_same_batch_comes_out_before_the_final() -> None:
    """One upstream read can hold both a sentence that passes and the one that fails: the first
    was validated, so it goes out (in `Blocked.released`, which the run emits before its final),
    as it does when the two come in two reads."""
    text = "Fine. Still fine. The password is hunter2. Tail."
    for batches in ([tokens(text, size=3)], [[t] for t in tokens(text, size=3)]):
        gate = make_gate(spec("regex_deny", patterns=["(?i)password"]), chunking="sentence")
        released: list[StreamEvent] = []
        with pytest.raises(Blocked) as blocked:
            for batch in batches:
                released += await gate.admit_all(batch)
        released += blocked.value.released
        assert text_of(released) == "Fine. Still fine. ", (len(batches), text_of(released))


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
    assert info.value.status == 422 and info.value.field == "validators.0"


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
