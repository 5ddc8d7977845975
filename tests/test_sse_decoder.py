"""The shared SSE byte parser: the same events however the bytes are split."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.providers.sse import SSEDecoder, SSEEvent
from tests.support import split_at

BODY = (
    'data: {"a":1}\n\n'
    ": a comment\n"
    "event: delta\n"
    "id: 7\n"
    "retry: 1000\n"
    "unknown: field\n"
    'data: {"t":"héllo ✓ 𝄞"}\n\n'
    "data: line1\n"
    "data: line2\n\n"
    "data:nospace\n\n"
    "data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent("message", '{"a":1}'),
    SSEEvent("delta", '{"t":"héllo ✓ 𝄞"}', "7"),
    SSEEvent("message", "line1\nline2", "7"),
    SSEEvent("message", "nospace", "7"),
    SSEEvent("message", "[DONE]", "7"),
]


def decode(chunks):
    d = SSEDecoder()
    out = []
    for c in chunks:
        out += d.feed(c)
    return out + d.flush()


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_every_single_split_offset_every_line_ending(ending):
    body = BODY.replace("\n", ending).encode()
    assert decode([body]) == EXPECTED
    for cut in range(1, len(body)):
        assert decode([body[:cut], body[cut:]]) == EXPECTED, (ending, cut)


def test_byte_by_byte_splits_utf8_characters():
    body = BODY.replace("\n", "\r\n").encode()
    assert decode([body[i:i + 1] for i in range(len(body))]) == EXPECTED


@given(st.lists(st.integers(min_value=1, max_value=400), max_size=30), st.sampled_from(["\n", "\r\n", "\r"]))
def test_random_splits(cuts, ending):
    body = BODY.replace("\n", ending).encode()
    assert decode(split_at(body, cuts)) == EXPECTED


def test_comments_are_counted_not_dispatched():
    d = SSEDecoder()
    assert d.feed(b": OPENROUTER PROCESSING\n\n: ping\n\n") == []
    assert d.comments == 2


def test_flush_dispatches_an_unterminated_last_event():
    d = SSEDecoder()
    assert d.feed(b'data: {"x":1}') == []
    assert d.flush() == [SSEEvent("message", '{"x":1}')]


def test_blank_line_without_data_dispatches_nothing_and_resets_event_name():
    d = SSEDecoder()
    assert d.feed(b"event: ping\n\ndata: x\n\n") == [SSEEvent("message", "x")]


def test_invalid_utf8_is_replaced_not_fatal():
    assert decode([b"data: \xff\xfe\n\n"]) == [SSEEvent("message", "\ufffd\ufffd")]
