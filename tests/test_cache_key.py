"""The cache key covers everything that decides an answer, and nothing of how it is delivered;
a stored entry comes back whole or not at all."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.cache.entry import CorruptEntry, decode_entry, encode_entry
from app.cache.key import cache_key
from app.core.events import AssistantMessage, FinalEvent, StartEvent, TokenEvent, Usage
from app.core.messages import Message, ToolSpec
from app.providers.base import ProviderRequest
from app.providers.passthrough import Passthrough
from app.streams.frames import encode_frame
from app.validation import ValidatorSpec

REQUEST = ProviderRequest(model="openai/gpt", messages=(Message(role="user", content="hi"),))
BASE: dict[str, Any] = {"scope": "key:a", "targets": ["openai/gpt"], "request": REQUEST, "validators": [],
                        "chunking": "sentence"}


def key(**change: Any) -> str:
    return cache_key(**{**BASE, **change})


@pytest.mark.parametrize("change", [
    {"scope": "key:b"}, {"scope": "shared:team"}, {"targets": ["anthropic/claude"]},
    {"request": replace(REQUEST, messages=(Message(role="user", content="hi!"),))},
    {"request": replace(REQUEST, tools=(ToolSpec(name="add", description="", parameters={"type": "object"}),))},
    {"request": replace(REQUEST, tool_choice="required")}, {"request": replace(REQUEST, temperature=0.3)},
    {"request": replace(REQUEST, max_tokens=9)}, {"request": replace(REQUEST, options={"seed": 1})},
    {"request": replace(REQUEST, stop=("x",))}, {"request": replace(REQUEST, parallel_tool_calls=False)},
    {"request": replace(REQUEST, output_schema={"type": "object"})},
    {"request": replace(REQUEST, cache_control={"type": "ephemeral"})},
    {"validators": [ValidatorSpec(name="regex_deny", config={"patterns": ["x"]})]}, {"chunking": "word"},
    {"request": replace(REQUEST, passthrough=Passthrough(wire="openai", body={"logprobs": True}))},
], ids=repr)
def test_everything_that_decides_the_answer_changes_the_key(change: dict[str, Any]) -> None:
    assert key(**change) != key()


def test_how_an_answer_is_delivered_does_not() -> None:
    streamed = Passthrough(wire="openai", body={"logprobs": True, "stream": True, "stream_options": {"a": 1}})
    whole = Passthrough(wire="openai", body={"logprobs": True})
    assert key(request=replace(REQUEST, passthrough=streamed)) == key(request=replace(REQUEST, passthrough=whole))
    assert key(request=replace(REQUEST, trace_headers={"traceparent": "00-1-2-01"})) == key()


def _frames(status: str = "ok") -> bytes:
    final = FinalEvent(status=status, message=AssistantMessage(content="Hi."),  # type: ignore[arg-type]
                       usage=Usage(input_tokens=3, output_tokens=2, total_tokens=5, cost_usd=0.01),
                       stop_reason="stop", model="m", provider="p",
                       error=None if status == "ok" else {"code": "x", "message": "x", "retryable": False})
    events = [StartEvent(stream_id="s", model="m", provider="p"), TokenEvent(index=0, content="Hi."), final]
    return b"".join(encode_frame(i, e) for i, e in enumerate(events, 1))


def test_an_entry_comes_back_whole() -> None:
    cached = decode_entry(encode_entry(_frames(), created_at=1.0, ttft=0.1, duration=0.2))
    assert [e.type for e in cached.events] == ["token"]
    assert cached.final.message.content == "Hi." and cached.final.usage.total_tokens == 5
    assert cached.final.usage.cost_usd == 0.01 and (cached.ttft, cached.duration) == (0.1, 0.2)


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) - 10], lambda b: b[:40], lambda b: b.replace(b"Hi.", b"Ho."), lambda b: b"junk",
    lambda b: b"",
], ids=["truncated", "header only", "altered", "junk", "empty"])
def test_a_damaged_entry_is_refused(damage: Any) -> None:
    with pytest.raises(CorruptEntry):
        decode_entry(damage(encode_entry(_frames(), created_at=1.0, ttft=0.1, duration=0.2)))


def test_an_entry_of_a_run_that_did_not_end_ok_is_refused() -> None:
    with pytest.raises(CorruptEntry):
        decode_entry(encode_entry(_frames("error"), created_at=1.0, ttft=None, duration=0.2))
