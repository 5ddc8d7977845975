"""Chunkers: the cases table, finality, the size cap, and the same chunks however text is sliced."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.validation.chunking import CHUNKERS, build_chunker


def chunks_of(name: str, pieces: list[str], cap: int = 1000) -> list[str]:
    chunker = build_chunker(name, cap)
    out: list[str] = []
    for piece in pieces:
        out += chunker.feed(piece)
    return out + chunker.flush()


SENTENCE_CASES = [
    ("plain", "One. Two! Three? Four", ["One. ", "Two! ", "Three? ", "Four"]),
    ("abbreviation e.g.", "Use a tool, e.g. a hammer. Done.", ["Use a tool, e.g. a hammer. ", "Done."]),
    ("title Dr.", "Dr. Smith is in. Mrs. Jones is out.", ["Dr. Smith is in. ", "Mrs. Jones is out."]),
    ("initial", "J. R. Tolkien wrote it. Yes.", ["J. R. Tolkien wrote it. ", "Yes."]),
    ("decimal", "Pi is 3.14 or so. Right.", ["Pi is 3.14 or so. ", "Right."]),
    ("url", "See https://example.com/a.b?x=1. Then go.", ["See https://example.com/a.b?x=1. ", "Then go."]),
    ("email and file", "Mail a.b@example.org about report.pdf today. Ok.",
     ["Mail a.b@example.org about report.pdf today. ", "Ok."]),
    ("ellipsis continues", "Wait... what? Yes.", ["Wait... what? ", "Yes."]),
    ("ellipsis ends", "I see… The end.", ["I see… ", "The end."]),
    ("lowercase after stop", "It costs approx. five euros. Fine.", ["It costs approx. five euros. ", "Fine."]),
    ("closing quote", 'He said "Stop." Then he left.', ['He said "Stop." ', "Then he left."]),
    ("question in quote", "\u201cReally?\u201d she asked. Yes.", ["\u201cReally?\u201d she asked. ", "Yes."]),
    ("cjk", "你好。世界！好吗？是", ["你好。", "世界！", "好吗？", "是"]),
    ("cjk with closer", "他说「好。」然后走了。", ["他说「好。」", "然后走了。"]),
    ("lines", "Title\n- one\n- two", ["Title\n", "- one\n", "- two"]),
    ("numbered list", "Steps:\n1. Open it.\n2. Close it.", ["Steps:\n", "1. Open it.\n", "2. Close it."]),
    ("number ends sentence", "I have 2. Then more.", ["I have 2. ", "Then more."]),
    ("leading blank lines", "\n\nHi. There", ["\n\nHi. ", "There"]),
    ("whitespace stays with its chunk", "Ah.   Be.  ", ["Ah.   ", "Be.  "]),
    ("exclamations", "Wow!! Really?! Ok", ["Wow!! ", "Really?! ", "Ok"]),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in SENTENCE_CASES], ids=[c[0] for c in SENTENCE_CASES])
def test_sentence_cases(text: str, expected: list[str]) -> None:
    assert chunks_of("sentence", [text]) == expected
    assert chunks_of("sentence", list(text)) == expected  # one character at a time


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("word", "  Hello  big world", ["  Hello  ", "big ", "world"]),
        ("word", "a\nb\tc ", ["a\n", "b\t", "c "]),
        ("paragraph", "One\nstill one.\n\nTwo\n \nThree", ["One\nstill one.\n\n", "Two\n \n", "Three"]),
        ("paragraph", "\n\nLead\n\n", ["\n\nLead\n\n"]),
    ],
)
def test_word_and_paragraph_cases(name: str, text: str, expected: list[str]) -> None:
    assert chunks_of(name, [text]) == expected
    assert chunks_of(name, list(text)) == expected


def test_none_makes_every_token_a_chunk() -> None:
    assert chunks_of("none", ["Hel", "lo. ", "", "World"]) == ["Hel", "lo. ", "World"]


def test_a_chunk_is_final_only_once_text_after_it_began() -> None:
    chunker = build_chunker("sentence")
    assert chunker.feed("Hello.") == []
    assert chunker.feed("  ") == []  # more stops, quotes or spaces could still join it
    assert chunker.feed("W") == ["Hello.  "]
    assert chunker.flush() == ["W"]


def test_paragraph_waits_for_a_blank_line_across_feeds() -> None:
    chunker = build_chunker("paragraph")
    assert chunker.feed("One\n") == []
    assert chunker.feed("  ") == []
    assert chunker.feed("\n") == []
    assert chunker.feed("Two") == ["One\n  \n"]


@pytest.mark.parametrize("name", ["sentence", "word", "paragraph"])
def test_size_cap_force_flushes_at_whitespace(name: str) -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta"
    chunks = chunks_of(name, [text], cap=12)
    assert "".join(chunks) == text
    assert all(len(c) <= 12 for c in chunks)
    assert chunks_of(name, list(text), cap=12) == chunks


def test_size_cap_cuts_a_long_word_at_the_cap() -> None:
    assert chunks_of("sentence", ["x" * 25], cap=10) == ["x" * 10, "x" * 10, "x" * 5]


def test_held_text_never_exceeds_the_cap() -> None:
    chunker = build_chunker("sentence", 50)
    held = 0
    for _ in range(500):
        held += 3
        held -= sum(len(c) for c in chunker.feed("ab "))
        assert held <= 50


_ATOMS = [
    "a", "B", " ", "  ", ".", "!", "?", "...", "…", "\n", "\n\n", "。", "」", '"', "”", "e.g.", "Dr.", "3.14",
    "1.", "J.", "x@y.com", "https://a.b/c", "word", "Word", "你好", "\t",
]


@given(
    name=st.sampled_from(sorted(CHUNKERS)),
    atoms=st.lists(st.sampled_from(_ATOMS), max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    cap=st.sampled_from([8, 20, 1000]),
)
def test_same_text_gives_same_chunks_however_sliced(name: str, atoms: list[str], cuts: list[int], cap: int) -> None:
    text = "".join(atoms)
    points = sorted({c for c in cuts if 0 < c < len(text)})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    whole = chunks_of(name, [text], cap)
    assert "".join(whole) == text
    if name == "none":  # every token its own chunk, by definition
        assert chunks_of(name, pieces, cap) == [p for p in pieces if p]
        return
    assert all(len(c) <= cap for c in whole)
    assert chunks_of(name, pieces, cap) == whole
    assert chunks_of(name, list(text), cap) == whole
