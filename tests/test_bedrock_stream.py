"""Bedrock ConverseStream recordings (tests/fixtures/bedrock, AWS event-stream frames) through the
production path: EventStreamDecoder (botocore's EventStreamBuffer) -> ConverseNormalizer ->
accumulator, whole, byte by byte and cut in two at every offset; and the decoder's bounds."""

from __future__ import annotations

import json

import pytest
from botocore.eventstream import EventStreamBuffer
from scripts.build_cloud_fixtures import encode_frame

from app.core.events import ReasoningEvent, TokenEvent, ToolCallEvent
from app.providers.bedrock_stream import ConverseNormalizer
from app.providers.eventstream import EventStreamDecoder, EventStreamError
from tests.cloud_support import cloud_recordings, run_frames
from tests.support import Recording, final_of

RECORDINGS = cloud_recordings("bedrock")
SMALL = [r for r in RECORDINGS if r.name in ("text", "parallel-tool-use", "throttling-after-text")]
ERROR_CODES = {"throttling": ("rate_limited", True, 429), "validation": ("upstream_bad_request", False, 400),
               "model-stream-error": ("upstream_error", True, 502),
               "service-unavailable": ("upstream_error", True, 503), "internal-server": ("upstream_error", True, 500)}


def events_of(rec: Recording, chunks: list[bytes]) -> list[object]:
    return run_frames(chunks, ConverseNormalizer())[0]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_botocore_decodes_every_recording_with_valid_crcs(rec: Recording) -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(rec.body)
    messages = list(buffer)
    assert len(messages) == rec.expected["frames"]
    assert sum(m.prelude.total_length for m in messages) == len(rec.body)


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_recording_gives_its_expected_outcome(rec: Recording) -> None:
    events = events_of(rec, [rec.body])
    final = final_of(events)
    want = rec.expected
    assert "".join(e.content for e in events if isinstance(e, TokenEvent)) == want["text"]
    reasoning = "".join(e.content for e in events if type(e) is ReasoningEvent)
    assert reasoning == (want["reasoning"] or "")
    calls = [e for e in events if isinstance(e, ToolCallEvent) and e.is_final]
    assert [(c.id, c.name) for c in calls] == [(c["id"], c["name"]) for c in want["tool_calls"]]
    for call, expected in zip(calls, want["tool_calls"], strict=True):
        assert call.arguments == (json.loads(expected["arguments"]) if expected["arguments"] else {})
    if want["errors"]:
        kind = rec.name.removesuffix("-after-text").removesuffix("-before-output")
        code, retryable, status = ERROR_CODES[kind]
        assert final.status == "error" and final.error is not None
        assert (final.error["code"], final.error["retryable"], final.error.get("upstream_status")) == (code, retryable,
                                                                                                       status)
        assert want["errors"][0]["message"] in final.error["message"]
        return
    assert final.status == "ok", final.error
    usage = want["usage"]
    read, write = usage.get("cacheReadInputTokens", 0), usage.get("cacheWriteInputTokens", 0)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (usage["inputTokens"] + read + write,
                                                                     usage["outputTokens"])
    assert (final.usage.cache_read_tokens, final.usage.cache_write_tokens) == (read, write)
    assert final.stop_reason == {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length",
                                 "guardrail_intervened": "content_filter"}[want["finish_reason"]]


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.expected["reasoning_signatures"]], ids=repr)
def test_reasoning_signature_is_kept_for_the_round_trip(rec: Recording) -> None:
    final = final_of(run_frames([rec.body], ConverseNormalizer())[0])
    assert [bool(r.signature) for r in final.message.reasoning] == rec.expected["reasoning_signatures"]
    assert all(r.provider in (None, "bedrock") for r in final.message.reasoning)


def test_redacted_reasoning_keeps_its_payload() -> None:
    rec = next(r for r in RECORDINGS if r.name == "redacted-reasoning")
    final = final_of(run_frames([rec.body], ConverseNormalizer())[0])
    assert final.status == "ok" and final.message.content == "Here is my answer."
    assert [r.redacted for r in final.message.reasoning] == ["RXFJS0NrWUlBaEFCR0FJcVFNZVJhQg=="]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_same_events_byte_by_byte(rec: Recording) -> None:
    assert events_of(rec, [rec.body[i:i + 1] for i in range(len(rec.body))]) == events_of(rec, [rec.body])


@pytest.mark.parametrize("rec", SMALL, ids=repr)
def test_same_events_in_two_pieces_at_every_offset(rec: Recording) -> None:
    whole = events_of(rec, [rec.body])
    for cut in range(1, len(rec.body)):
        assert events_of(rec, [rec.body[:cut], rec.body[cut:]]) == whole, cut


def _frame(event: str, payload: dict[str, object]) -> bytes:
    return encode_frame({":event-type": event, ":content-type": "application/json", ":message-type": "event"},
                        json.dumps(payload).encode())


def test_a_corrupt_crc_is_a_protocol_error() -> None:
    frame = bytearray(_frame("messageStart", {"role": "assistant"}))
    frame[-1] ^= 0xFF
    with pytest.raises(EventStreamError, match="CRC"):
        EventStreamDecoder().feed(bytes(frame))
    final = final_of(run_frames([bytes(frame)], ConverseNormalizer())[0])
    assert final.status == "error" and final.error is not None
    assert final.error["code"] == "upstream_protocol_error"


def test_a_body_cut_inside_a_frame_is_an_error() -> None:
    body = _frame("messageStart", {"role": "assistant"}) + _frame("messageStop", {"stopReason": "end_turn"})
    final = final_of(run_frames([body[:-3]], ConverseNormalizer())[0])
    assert final.status == "error" and final.error is not None
    assert final.error["code"] == "upstream_protocol_error"


def test_a_stream_without_message_stop_is_incomplete() -> None:
    body = _frame("messageStart", {"role": "assistant"}) + _frame(
        "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})
    final = final_of(run_frames([body], ConverseNormalizer())[0])
    assert final.error is not None and final.error["code"] == "upstream_incomplete"


def test_message_stop_without_metadata_completes() -> None:
    body = _frame("messageStart", {"role": "assistant"}) + _frame(
        "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}}) + _frame(
        "messageStop", {"stopReason": "end_turn"})
    final = final_of(run_frames([body], ConverseNormalizer())[0])
    assert final.status == "ok" and final.message.content == "Hi"


@pytest.mark.parametrize("usage", [{"inputTokens": -1}, {"outputTokens": 1.5}, {"inputTokens": "12"}])
def test_untrusted_usage_is_a_protocol_error(usage: dict[str, object]) -> None:
    body = _frame("messageStart", {"role": "assistant"}) + _frame("messageStop", {"stopReason": "end_turn"}) + _frame(
        "metadata", {"usage": usage})
    final = final_of(run_frames([body], ConverseNormalizer())[0])
    assert final.error is not None and final.error["code"] == "upstream_protocol_error"


def test_unknown_events_and_deltas_are_ignored_and_counted() -> None:
    body = b"".join([
        _frame("messageStart", {"role": "assistant"}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"citation": {"x": 1}}}),
        _frame("newEventType", {"x": 1}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "ok"}}),
        _frame("messageStop", {"stopReason": "end_turn"}),
    ])
    events, acc = run_frames([body], ConverseNormalizer())
    assert final_of(events).message.content == "ok"
    assert sum(acc.ignored.values()) == 2
