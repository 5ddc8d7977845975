"""The event-stream decoder (app/providers/eventstream.py) cross-checked against botocore's own
`EventStreamBuffer`: every recording and random frames, split anywhere, give the same frames;
what botocore refuses (a CRC, a length) is refused too; the bounds hold before a frame is held."""

from __future__ import annotations

import binascii
import struct

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st
from scripts.build_cloud_fixtures import encode_frame

from app.providers.eventstream import EventStreamDecoder, EventStreamError
from tests.cloud_support import cloud_recordings

RECORDINGS = [*cloud_recordings("bedrock"), *cloud_recordings("bedrock-invoke")]


def botocore_frames(body: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return [(m.headers, m.payload) for m in buffer]


def own_frames(chunks: list[bytes]) -> list[tuple[dict[str, object], bytes]]:
    decoder = EventStreamDecoder()
    frames = [f for chunk in chunks for f in decoder.feed(chunk)]
    decoder.flush()
    return [({k: v for k, v in {":event-type": f.event_type, ":message-type": f.message_type,
                                ":exception-type": f.exception_type}.items() if v}, f.payload) for f in frames]


def _strings(headers: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in headers.items() if k in (":event-type", ":message-type", ":exception-type")}


HEADER_NAMES = st.sampled_from([":event-type", ":message-type", ":exception-type"])


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_every_recording_decodes_as_botocore_decodes_it(rec: object) -> None:
    body = rec.body  # type: ignore[attr-defined]
    expected = [(_strings(h), p) for h, p in botocore_frames(body)]
    assert own_frames([body]) == expected
    assert own_frames([body[i:i + 7] for i in range(0, len(body), 7)]) == expected


@given(frames=st.lists(st.tuples(st.dictionaries(HEADER_NAMES, st.text(max_size=40)),
                                 st.binary(max_size=300)), min_size=1, max_size=8),
       cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=10))
def test_random_frames_split_anywhere_match_botocore(frames: list[tuple[dict[str, str], bytes]],
                                                     cuts: list[int]) -> None:
    body = b"".join(encode_frame(headers, payload) for headers, payload in frames)
    points = sorted({c % len(body) for c in cuts} - {0})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    expected = [({k: v for k, v in {":message-type": "event", **h}.items() if v}, p) for h, p in botocore_frames(body)]
    assert own_frames(chunks) == expected  # (a frame without `:message-type` is an event)


def _typed_header(name: str, kind: int, value: bytes) -> bytes:
    return bytes([len(name)]) + name.encode() + bytes([kind]) + value


def test_headers_of_every_type_are_skipped_or_read() -> None:
    headers = b"".join([_typed_header("flag", 0, b""), _typed_header("no", 1, b""), _typed_header("b", 2, b"\x05"),
                        _typed_header("s", 3, b"\x00\x07"), _typed_header("i", 4, b"\0\0\0\x09"),
                        _typed_header("l", 5, b"\0" * 8), _typed_header("blob", 6, b"\x00\x02hi"),
                        _typed_header("t", 8, b"\0" * 8), _typed_header("u", 9, b"\1" * 16),
                        _typed_header(":event-type", 7, b"\x00\x0cmessageStart")])
    payload = b'{"role":"assistant"}'
    prelude = struct.pack("!II", 16 + len(headers) + len(payload), len(headers))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + headers + payload
    body = message + struct.pack("!I", binascii.crc32(message))
    assert botocore_frames(body)[0][0]["i"] == 9  # botocore reads the same bytes as a valid frame
    (frame,) = EventStreamDecoder().feed(body)
    assert (frame.event_type, frame.payload) == ("messageStart", payload)


def test_a_bad_crc_is_refused_as_botocore_refuses_it() -> None:
    body = bytearray(encode_frame({":event-type": "messageStart"}, b"{}"))
    body[-1] ^= 1
    with pytest.raises(ChecksumMismatch):
        botocore_frames(bytes(body))
    with pytest.raises(EventStreamError, match="CRC"):
        EventStreamDecoder().feed(bytes(body))


def test_a_frame_past_the_bound_is_refused_from_its_prelude() -> None:
    prelude = struct.pack("!II", 20 << 20, 0)  # declares 20 MiB: refused before any of it is held
    with pytest.raises(EventStreamError, match="past the bounds"):
        EventStreamDecoder(max_frame_bytes=1 << 20).feed(prelude + struct.pack("!I", binascii.crc32(prelude)))


def test_a_body_cut_inside_a_frame_is_refused_at_its_end() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(encode_frame({":event-type": "messageStart"}, b"{}")[:-1]) == []
    with pytest.raises(EventStreamError, match="ended inside"):
        decoder.flush()
