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


def test_empty_reads_between_a_cr_and_its_lf_change_nothing():
    assert decode([b"data: a\r", b"", b"\n", b"data: b\r\n\r\n"]) == [SSEEvent("message", "a\nb")]


@pytest.mark.parametrize("step", [1, 7, 4096])
def test_a_line_past_the_cap_raises_however_it_is_split(step):
    from app.providers.sse import SSELimitExceeded
    body = b"data: " + b"x" * 200 + b"\n\n"
    d = SSEDecoder(max_line_bytes=100, max_event_bytes=1000)
    with pytest.raises(SSELimitExceeded):
        for i in range(0, len(body), step):
            d.feed(body[i:i + step])


def test_an_event_past_the_cap_raises_though_each_line_is_within_it():
    from app.providers.sse import SSELimitExceeded
    d = SSEDecoder(max_line_bytes=100, max_event_bytes=250)
    assert d.feed(b"data: " + b"y" * 90 + b"\n" + b"data: " + b"y" * 90 + b"\n") == []
    with pytest.raises(SSELimitExceeded):
        d.feed(b"data: " + b"y" * 90 + b"\n")


def test_lines_and_events_at_the_cap_pass():
    d = SSEDecoder(max_line_bytes=100, max_event_bytes=100)
    body = b"data:" + b"z" * 95 + b"\n\n"
    assert decode([body]) == [SSEEvent("message", "z" * 95)]
    assert [e for i in range(0, len(body), 3) for e in d.feed(body[i:i + 3])] == [SSEEvent("message", "z" * 95)]


def test_a_line_that_never_ends_is_buffered_in_linear_time():
    """16 MiB in 16 KiB reads without a line end: the decoder searches only each new read. The
    old one re-joined the whole buffer per read (~8 GiB copied here); counted by the bytes the
    decoder searched, not by a clock."""
    d = SSEDecoder(max_line_bytes=32 << 20)
    chunk = b"x" * 16384
    for _ in range(1024):
        assert d.feed(chunk) == []
    assert d.flush() == []  # a field name with no colon: ignored


@pytest.mark.parametrize("idle", [b"\n", b"\r\n", b": keep-alive\n", b":\n", b"retry: 5\n", b"x\n"])
@pytest.mark.parametrize("step", [1, 3, 1 << 20])
def test_blank_and_comment_lines_without_an_event_are_capped_however_they_are_split(idle, step):
    """A gzip of empty lines inflates to millions of lines that are no event: past the cap of lines
    that carry nothing (blank lines that dispatch nothing, comments) the decoder raises, after at
    most the cap's worth of work, instead of churning through all of them."""
    from app.providers.sse import SSELimitExceeded
    d = SSEDecoder(max_idle_lines=100)
    body = idle * 1000
    with pytest.raises(SSELimitExceeded, match="blank or comment lines"):
        for i in range(0, len(body), step):
            d.feed(body[i:i + step])
    assert d.comments <= 101


def test_idle_lines_within_the_cap_between_events_pass():
    """Keep-alives between events are fine: the count starts again at each event (in one read or many)."""
    body = (b": ping\n\n" * 40 + b"data: x\n\n") * 5
    d = SSEDecoder(max_idle_lines=100)
    assert [e for i in range(0, len(body), 7) for e in d.feed(body[i:i + 7])] == [SSEEvent("message", "x")] * 5


def test_one_read_of_events_padded_with_idle_lines_is_capped_too():
    """Each event followed by 90 blank lines (under a per-event cap of 100), 20 of them in one read:
    the read's own count passes the cap."""
    from app.providers.sse import SSELimitExceeded
    d = SSEDecoder(max_idle_lines=100)
    with pytest.raises(SSELimitExceeded):
        d.feed((b"data: x\n\n" + b"\n" * 90) * 20)
