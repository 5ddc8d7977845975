"""The hot path's token events (`token_event`, no dataclass `__init__` per token) are the same
frozen `TokenEvent`s the dataclass builds: equal, hashed alike, frozen, encoded alike."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.events import TokenEvent, token_event
from app.streams.frames import encode_frame


@pytest.mark.parametrize("refusal", [False, True])
def test_token_event_is_the_dataclass(refusal: bool) -> None:
    fast = token_event(7, "hé\n", refusal)
    slow = TokenEvent(index=7, content="hé\n", refusal=refusal)
    assert fast.__class__ is TokenEvent
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.data() == slow.data()
    assert encode_frame(3, fast) == encode_frame(3, slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.content = "x"  # type: ignore[misc]


def test_token_event_defaults() -> None:
    assert token_event(0, "a") == TokenEvent(index=0, content="a")
