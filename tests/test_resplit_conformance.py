"""Every recording gives the same canonical events however its bytes are split (DESIGN.md 8).

One test for the four wire formats, on the production path (`tests.support.run_bytes`:
FramePatchStream -> normalizer -> `drive()` -> the accumulator): split anywhere (hypothesis),
byte by byte, and, for one small recording per provider, in two at every offset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.providers.catalog import PROVIDERS
from app.providers.config import ReadLimits
from app.providers.framing import FrameDecoder, StreamNormalizer
from tests.support import Recording, recordings, run_bytes, split_at

# One entry per recordings folder of the catalog's providers (providers of one wire share theirs).
FORMATS: dict[str, tuple[Callable[[], StreamNormalizer[Any]], Callable[[], FrameDecoder[Any]]]] = {
    d.fixtures: (lambda d=d: d.normalizer(d.name), lambda d=d: d.framing(ReadLimits()))  # type: ignore[misc]
    for d in PROVIDERS if d.fixtures and d.normalizer and d.framing
}
SMALL = {"anthropic": "text", "gemini": "vertex-parallel-calls-partial-args", "openai-responses": "function-call"}
RECORDINGS = [rec for folder in FORMATS for rec in recordings(folder)]


def events(rec: Recording, chunks: list[bytes]) -> list[Any]:
    normalizer, decoder = FORMATS[rec.provider]
    return run_bytes(chunks, normalizer(), provider=rec.provider, decoder=decoder())[0]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
@given(cuts=st.lists(st.integers(min_value=1), max_size=40))
def test_same_events_however_the_bytes_are_split(rec: Recording, cuts: list[int]) -> None:
    assert events(rec, split_at(rec.body, [c % len(rec.body) for c in cuts])) == events(rec, [rec.body])


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_same_events_byte_by_byte(rec: Recording) -> None:
    assert events(rec, [rec.body[i:i + 1] for i in range(len(rec.body))]) == events(rec, [rec.body])


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if SMALL.get(r.provider) == r.name], ids=repr)
def test_same_events_in_two_pieces_at_every_offset(rec: Recording) -> None:
    whole = events(rec, [rec.body])
    for cut in range(1, len(rec.body)):
        assert events(rec, [rec.body[:cut], rec.body[cut:]]) == whole, cut
