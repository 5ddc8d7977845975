"""Anthropic Messages normalizer: every recording against its expected outcome, re-split anyhow."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.events import FinalEvent, ReasoningEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.patches import MessageDelta, ReasoningDelta, ReasoningStart, TextDelta, ToolEnd, ToolStart
from app.providers.anthropic_stream import STOP_REASON_MAP, AnthropicNormalizer
from app.providers.sse import SSEEvent
from tests.support import Recording, final_of, recordings, run_bytes, split_at

RECORDINGS = recordings("anthropic")
# The wire's stop reasons seen in the recordings, and what the canonical stream must say.
EXPECTED_STOP = {"end_turn": "stop", "tool_use": "tool_calls", "stop_sequence": "stop"}
OVERLOADED = (
    b'event: error\ndata: {"type":"error","error":{"details":null,"type":"overloaded_error",'
    b'"message":"Overloaded"},"request_id":"req_011CTest"}\n\n'
)


def run(chunks: list[bytes]) -> tuple[list[Any], Any]:
    return run_bytes(chunks, AnthropicNormalizer(), model="requested", provider="anthropic")


def canonical_usage(expected: dict[str, Any]) -> dict[str, int]:
    """The documented usage rule, computed from the recording's own usage objects.

    Later report wins field by field; iterations (compaction) are summed; input counts cache
    reads and writes; total = input + output; reasoning = output_tokens_details.thinking_tokens.
    """
    fields: dict[str, int] = {}
    for usage in (expected["usage_message_start"], expected["usage_message_delta"]):
        usage = dict(usage)
        if usage.get("iterations"):
            for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
                usage[name] = sum(it.get(name, 0) for it in usage["iterations"])
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            if name in usage:
                fields[name] = usage[name]
        if "output_tokens_details" in usage:
            fields["thinking"] = usage["output_tokens_details"]["thinking_tokens"]
    inputs = fields["input_tokens"] + fields.get("cache_read_input_tokens", 0) + fields.get("cache_creation_input_tokens", 0)
    return {
        "input_tokens": inputs,
        "output_tokens": fields["output_tokens"],
        "total_tokens": inputs + fields["output_tokens"],
        "cache_read_tokens": fields.get("cache_read_input_tokens", 0),
        "cache_write_tokens": fields.get("cache_creation_input_tokens", 0),
        "reasoning_tokens": fields.get("thinking", 0),
    }


def expected_arguments(call: dict[str, Any]) -> dict[str, Any]:
    # Nothing streamed: the call's input is content_block_start's `input` ({} in every recording).
    return json.loads(call["arguments"]) if call["arguments_is_json"] else call["input_in_content_block_start"]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_recording_gives_expected_outcome(rec: Recording) -> None:
    exp = rec.expected
    events, _ = run([rec.body])
    final = final_of(events)
    assert final.status == "ok", final.error
    assert final.model == exp["model"]
    assert final.stop_reason == EXPECTED_STOP[exp["finish_reason"]]
    assert final.usage.to_dict() == canonical_usage(exp)

    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert "".join(e.content for e in tokens) == exp["text"]
    assert [e.index for e in tokens] == list(range(len(tokens)))
    reasoning = "".join(e.content for e in events if isinstance(e, ReasoningEvent))
    assert reasoning == (exp["reasoning"] or "")

    blocks = final.message.reasoning
    assert [bool(b.signature) for b in blocks if not b.redacted] == exp["thinking_signatures"]
    assert sum(1 for b in blocks if b.redacted) == exp["redacted_thinking_blocks"]
    assert all(b.provider == "anthropic" for b in blocks)

    finals = [e for e in events if isinstance(e, ToolCallEvent) and e.is_final]  # a call, past the accumulator
    client_calls = [c for c in finals if not c.server]
    assert [(c.id, c.name, c.arguments) for c in client_calls] == [
        (c["id"], c["name"], expected_arguments(c)) for c in exp["tool_calls"]
    ]
    assert [(c.id, c.name) for c in final.message.tool_calls] == [(c["id"], c["name"]) for c in exp["tool_calls"]]
    server_calls = [c for c in finals if c.server]
    assert [(c.id, c.name, c.arguments) for c in server_calls] == [
        (c["id"], c["name"], expected_arguments(c)) for c in exp["server_tool_calls"]
    ]
    started = list(dict.fromkeys(e.id for e in events if isinstance(e, ToolCallEvent)))
    assert [e.id for e in finals] == started  # one final event per call
    for call in finals:
        fragments = "".join(e.args_fragment for e in events if isinstance(e, ToolCallEvent) and e.id == call.id)
        assert json.loads(fragments) == call.arguments  # fragments join to the JSON

    results = [e for e in events if isinstance(e, ToolResultEvent)]
    names = {c["id"]: c["name"] for c in exp["server_tool_calls"]}
    assert [r.tool_call_id for r in results] == [r["tool_use_id"] for r in exp["server_tool_results"]]
    for result in results:
        assert result.name == names[result.tool_call_id]
        assert not result.is_error
        assert orjson.loads(result.content)  # the result block's content, serialised as JSON


def _cut_before(body: bytes, marker: bytes, occurrence: int = 1) -> bytes:
    at = -1
    for _ in range(occurrence):
        at = body.index(marker, at + 1)
    return body[:at]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_body_cut_before_message_stop_is_incomplete(rec: Recording) -> None:
    events, acc = run([_cut_before(rec.body, b"event: message_stop")])
    final = final_of(events)
    assert final.status == "error"
    assert final.error["code"] == "upstream_incomplete" and final.error["retryable"] is True
    assert final.message.content == rec.expected["text"]  # the text so far is kept
    assert not acc.completed


def test_mid_stream_overloaded_error_keeps_text_so_far() -> None:
    rec = next(r for r in RECORDINGS if r.name == "thinking-signature")
    tenth_text = _cut_before(rec.body, b'"text_delta"', occurrence=10)
    head = rec.body[: rec.body.index(b"\n\nevent:", len(tenth_text)) + 2]
    events, _ = run([head + OVERLOADED])
    final = final_of(events)
    text = "".join(e.content for e in events if isinstance(e, TokenEvent))
    assert text and rec.expected["text"].startswith(text)
    assert final.status == "error" and final.stop_reason == "error"
    assert final.message.content == text
    assert final.error["code"] == "upstream_overloaded"
    assert final.error["retryable"] is True
    assert final.error["upstream_type"] == "overloaded_error" and final.error["request_id"] == "req_011CTest"
    assert "Overloaded" in final.error["message"]
    assert final.usage.input_tokens == 43  # what message_start reported


@given(cuts=st.lists(st.integers(min_value=1), max_size=40))
def test_mid_stream_error_gives_the_same_events_however_split(cuts: list[int]) -> None:
    rec = next(r for r in RECORDINGS if r.name == "web-search-server-tool")
    body = _cut_before(rec.body, b"event: content_block_delta", occurrence=12) + OVERLOADED
    whole, _ = run([body])
    assert final_of(whole).error["code"] == "upstream_overloaded"
    assert final_of(whole).message.content
    assert run(split_at(body, [c % len(body) for c in cuts]))[0] == whole


@pytest.mark.parametrize(
    ("etype", "code", "retryable"),
    [("api_error", "upstream_error", True), ("invalid_request_error", "upstream_bad_request", False),
     ("something_new_error", "upstream_error", False)],
)
def test_error_event_types(etype: str, code: str, retryable: bool) -> None:
    body = b'event: error\ndata: {"type":"error","error":{"type":"%s","message":"m"}}\n\n' % etype.encode()
    final = final_of(run([body])[0])
    assert (final.error["code"], final.error["retryable"]) == (code, retryable)


def _feed(*payloads: dict[str, Any]) -> list[Any]:
    normalizer, out = AnthropicNormalizer(), []
    for payload in payloads:
        normalizer.feed(SSEEvent(payload["type"], orjson.dumps(payload).decode()), out)
    return out


def test_tool_input_from_content_block_start_is_used_without_deltas() -> None:
    out = _feed(
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}},
        {"type": "content_block_stop", "index": 0},
    )
    assert out == [ToolStart(key=0, id="toolu_1", name="add"), ToolEnd(key=0, arguments={"a": 1, "b": 2})]


def test_streamed_input_wins_over_the_start_input() -> None:
    out = _feed(
        {"type": "content_block_start", "index": 3,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": '{"a":'}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "content_block_stop", "index": 3},
    )
    assert out[-1] == ToolEnd(key=3, arguments=None)


def test_citations_and_unknown_blocks_are_dropped_but_text_is_kept() -> None:
    out = _feed(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": []}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "citations_delta", "citation": {"type": "web_search_result_location", "url": "u"}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "cited"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "compaction", "content": None}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "compaction_delta", "content": "summary"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "some_future_event"},
    )
    assert [p for p in out if isinstance(p, TextDelta)] == [TextDelta(key=0, text="cited")]
    assert len(out) == 2


def test_thinking_signature_and_redacted_payload_patches() -> None:
    out = _feed(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "opaque"}},
    )
    assert ReasoningDelta(key=0, signature="sig==") in out
    assert ReasoningStart(key=1, redacted="opaque") in out


def test_server_tool_error_result_is_an_error() -> None:
    events, _ = run([(
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
        b'{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,"content_block":'
        b'{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":'
        b'{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":1}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )])
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    assert call.server and call.is_final and call.arguments == {"query": "q"}
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.is_error and result.name == "web_search"
    assert orjson.loads(result.content)["error_code"] == "max_uses_exceeded"
    assert isinstance(events[-1], FinalEvent) and events[-1].status == "ok"


@pytest.mark.parametrize("reason", sorted(STOP_REASON_MAP))
def test_stop_reason_table(reason: str) -> None:
    out = _feed({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 1}})
    assert out[0].stop_reason == STOP_REASON_MAP[reason]
    assert STOP_REASON_MAP["refusal"] == "content_filter" and STOP_REASON_MAP["pause_turn"] == "pause"
    assert STOP_REASON_MAP["max_tokens"] == "length"


def test_message_delta_without_cache_fields_keeps_message_start_cache() -> None:
    out = _feed(
        {"type": "message_start", "message": {"id": "m", "model": "x", "usage": {
            "input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 10, "output_tokens": 1}}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
    )
    delta = out[-1]
    assert isinstance(delta, MessageDelta)
    assert (delta.usage.input_tokens, delta.usage.output_tokens, delta.usage.total_tokens) == (115, 7, 122)
    assert (delta.usage.cache_read_tokens, delta.usage.cache_write_tokens) == (100, 10)


def test_undecodable_event_is_a_protocol_error() -> None:
    final = final_of(run([b"event: message_start\ndata: {not json\n\n"])[0])
    assert final.error["code"] == "upstream_protocol_error"


def test_a_signature_delta_on_a_text_block_is_ignored_and_counted() -> None:
    """Liberal in what we accept (DESIGN.md 4): a delta that carries none of the answer, of an
    unexpected kind for its block, is dropped and counted; the answer is intact."""
    body = b"".join(
        b"event: %s\ndata: %s\n\n" % (p["type"].encode(), orjson.dumps(p)) for p in (
            {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 3}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
            {"type": "message_stop"},
        )
    )
    events, acc = run([body])
    final = final_of(events)
    assert final.status == "ok" and final.message.content == "Hello there" and final.stop_reason == "stop"
    assert acc.ignored == {"anthropic:signature_delta_on_text": 1}


def test_a_content_delta_on_a_block_of_another_kind_still_fails() -> None:
    """Text with nowhere to go would make the answer wrong: that stays a protocol error."""
    out: list[Any] = []
    normalizer = AnthropicNormalizer()
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}}
    normalizer.feed(SSEEvent("content_block_start", orjson.dumps(start).decode()), out)
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}
    with pytest.raises(Exception, match="thinking_delta for a tool block"):
        normalizer.feed(SSEEvent("content_block_delta", orjson.dumps(delta).decode()), out)
