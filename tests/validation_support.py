"""Helpers for the validation gate tests: event builders, a driver, a recording validator."""

from __future__ import annotations

from collections.abc import Sequence

from app.core.events import StreamEvent, TokenEvent, ToolCallEvent
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


def call_events(call_id: str, fragments: list[str], arguments: dict, index: int = 0) -> list[ToolCallEvent]:
    out = [ToolCallEvent(id=call_id, name="add", index=index, args_fragment=f) for f in fragments[:-1]]
    out.append(ToolCallEvent(id=call_id, name="add", index=index, args_fragment=fragments[-1], is_final=True,
                             arguments=arguments))
    return out
