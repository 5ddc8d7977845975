"""The Chat Completions normalizer: unit cases, conformance over every recording, re-splits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.errors import UpstreamError
from app.core.events import FinalEvent, ReasoningEvent, TokenEvent, ToolCallEvent
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    MessageStart,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolDelta,
    ToolEnd,
    ToolStart,
)
from app.providers.openai_chat_stream import ChatChunkNormalizer
from app.providers.sse import SSEEvent
from tests.support import Recording, final_of, recordings, run_bytes

RECORDINGS = recordings("openai-chat")

# The wire's finish_reason -> the canonical stop reason this adapter promises.
EXPECTED_STOP = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", None: None}


def sse(*chunks: Any, done: bool = True) -> bytes:
    """SSE body from chunk dicts (or raw strings), ending in [DONE] unless told otherwise."""
    frames = [c if isinstance(c, str) else f"data: {json.dumps(c)}\n\n" for c in chunks]
    if done:
        frames.append("data: [DONE]\n\n")
    return "".join(frames).encode()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0, **extra: Any) -> dict:
    choice = {"index": index, "delta": delta or {}, "finish_reason": finish}
    return {"id": "chatcmpl-1", "model": "m-1", "choices": [choice], **extra}


def feed_all(body: bytes) -> list[Any]:
    """Patches for a whole body, finish() included."""
    from app.providers.sse import SSEDecoder

    normalizer, decoder, out = ChatChunkNormalizer(provider="p"), SSEDecoder(), []
    for event in decoder.feed(body) + decoder.flush():
        normalizer.feed(event, out)
    normalizer.finish(out)
    return out


def run(body: bytes) -> tuple[list[Any], FinalEvent]:
    events, _ = run_bytes([body], ChatChunkNormalizer(provider="p"))
    return events, final_of(events)


# -- unit cases ---------------------------------------------------------------------------


def test_text_deltas_finish_and_done() -> None:
    patches = feed_all(sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"}),
                           chunk({"content": " there"}), chunk(finish="stop")))
    assert patches == [
        MessageStart(id="chatcmpl-1", model="m-1"),
        TextDelta(key="content", text="Hi"),
        TextDelta(key="content", text=" there"),
        MessageDelta(stop_reason="stop"),
        MessageEnd(),
    ]


def test_tool_call_fragments_keyed_by_index_with_id_and_name_on_first_only() -> None:
    first = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}
    second = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}
    patches = feed_all(sse(
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        chunk({"tool_calls": [second]}),
        chunk(finish="tool_calls"),
    ))
    assert patches[1:] == [
        ToolStart(key=0, id="call_a", name="f"),
        ToolDelta(key=0, fragment='{"x":'),
        ToolDelta(key=0, fragment=" 1}"),
        ToolStart(key=1, id="call_b", name="g"),
        ToolDelta(key=1, fragment="{}"),
        ToolEnd(key=0),
        ToolEnd(key=1),
        MessageDelta(stop_reason="tool_calls"),
        MessageEnd(),
    ]
    _, final = run(sse(chunk({"tool_calls": [first]}),
                       chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]}),
                       chunk({"tool_calls": [second]}), chunk(finish="tool_calls")))
    assert [(c.id, c.name, dict(c.arguments)) for c in final.message.tool_calls] == [
        ("call_a", "f", {"x": 1}), ("call_b", "g", {})]


def test_interleaved_tool_calls_stay_apart() -> None:
    starts = [{"index": i, "id": f"call_{i}", "function": {"name": f"t{i}", "arguments": ""}} for i in (0, 1)]
    frags = [{"index": i, "function": {"arguments": part}} for part in ('{"a":', " 1}") for i in (0, 1)]
    events, final = run(sse(chunk({"tool_calls": starts}), chunk({"tool_calls": frags}), chunk(finish="tool_calls")))
    assert final.status == "ok"
    assert [dict(c.arguments) for c in final.message.tool_calls] == [{"a": 1}, {"a": 1}]
    assert [e.index for e in events if isinstance(e, ToolCallEvent) and e.is_final] == [0, 1]


def test_a_new_id_on_a_reused_index_starts_a_new_call() -> None:
    calls = [{"index": 0, "id": f"call_{n}", "function": {"name": "t", "arguments": "{}"}} for n in (1, 2)]
    _, final = run(sse(chunk({"tool_calls": [calls[0]]}), chunk({"tool_calls": [calls[1]]}), chunk(finish="tool_calls")))
    assert [c.id for c in final.message.tool_calls] == ["call_1", "call_2"]


def test_tool_call_without_id_or_index_is_still_usable() -> None:
    call = {"function": {"name": "t", "arguments": {"k": "v"}}}  # parsed object, no index, no id
    _, final = run(sse(chunk({"tool_calls": [call]}), chunk(finish="tool_calls")))
    assert [(c.id, c.name, dict(c.arguments)) for c in final.message.tool_calls] == [("call_0", "t", {"k": "v"})]


def test_tool_call_without_name_is_an_upstream_error() -> None:
    _, final = run(sse(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": "{}"}}]}),
                       chunk(finish="tool_calls")))
    assert final.status == "error" and final.error["code"] == "upstream_protocol_error"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields_become_reasoning(field: str) -> None:
    patches = feed_all(sse(chunk({field: "think"}), chunk({"content": "answer"}), chunk(finish="stop")))
    assert patches[1:4] == [ReasoningDelta(key="reasoning", text="think"), ReasoningEnd(key="reasoning"),
                            TextDelta(key="content", text="answer")]
    _, final = run(sse(chunk({field: "think"}), chunk({"content": "answer"}), chunk(finish="stop")))
    assert final.message.content == "answer"
    assert [b.text for b in final.message.reasoning] == ["think"]


def test_refusal_is_text_and_content_filter() -> None:
    events, final = run(sse(chunk({"role": "assistant", "content": None, "refusal": ""}),
                            chunk({"refusal": "I can't"}), chunk({"refusal": " help."}), chunk(finish="stop")))
    assert [e.content for e in events if isinstance(e, TokenEvent)] == ["I can't", " help."]
    assert final.status == "ok" and final.stop_reason == "content_filter"
    assert final.message.content == "I can't help."


@pytest.mark.parametrize(("wire", "canonical"), [
    ("stop", "stop"), ("length", "length"), ("tool_calls", "tool_calls"), ("function_call", "tool_calls"),
    ("content_filter", "content_filter"), ("something_new", "stop"),
])
def test_finish_reason_table(wire: str, canonical: str) -> None:
    assert feed_all(sse(chunk(finish=wire)))[-2] == MessageDelta(stop_reason=canonical)


def test_usage_chunk_with_empty_choices_and_cached_and_reasoning_tokens() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
             "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}}
    _, final = run(sse(chunk({"content": "x"}), chunk(finish="stop"),
                       {"id": "chatcmpl-1", "choices": [], "usage": usage},
                       {"id": "chatcmpl-1", "choices": [], "usage": None, "moderation": {}}))
    assert final.usage.to_dict() == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                     "cache_read_tokens": 4, "cache_write_tokens": 0, "reasoning_tokens": 2}


def test_other_choices_are_ignored() -> None:
    _, final = run(sse(chunk({"content": "zero"}), chunk({"content": "one"}, index=1),
                       chunk(finish="stop"), chunk(finish="length", index=1)))
    assert final.message.content == "zero" and final.stop_reason == "stop"


def test_finish_reason_without_done_completes() -> None:
    _, final = run(sse(chunk({"content": "x"}), chunk(finish="stop"), done=False))
    assert final.status == "ok" and final.stop_reason == "stop"


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_stream_ending_early_is_incomplete_never_a_fake_stop(cut: int) -> None:
    chunks = [chunk({"content": "a"}), chunk({"content": "b"})][: cut]
    events, final = run(sse(*chunks, done=False))
    assert final.status == "error" and final.stop_reason == "error"
    assert final.error["code"] == "upstream_incomplete" and final.error["retryable"] is True
    assert final.message.content == "ab"[:cut]


def test_body_cut_inside_an_event_is_incomplete_not_malformed() -> None:
    body = sse(chunk({"content": "so far"}), chunk({"content": "more"}), chunk(finish="stop"),
               {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 1}})
    _, final = run(body[:body.index(b'"more"')])  # cut inside the second chunk's JSON
    assert final.error["code"] == "upstream_incomplete" and final.error["message"] == "p: the stream ended inside an event"
    assert final.message.content == "so far"
    _, final = run(body[:body.index(b'"usage"')])  # cut inside the usage chunk, after the finish_reason
    assert final.error["code"] == "upstream_incomplete" and final.message.content == "so farmore"


def test_error_object_in_a_chunk_keeps_text_and_usage() -> None:
    bad = chunk({"content": ""}, error={"code": 503, "message": "overloaded"},
                usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
    _, final = run(sse(chunk({"content": "so far"}), bad))
    assert final.status == "error" and final.message.content == "so far"
    assert final.error["message"] == "p: overloaded" and final.error["retryable"] is True
    assert final.error["upstream_status"] == 503
    assert final.usage.input_tokens == 3


def test_error_event_frame() -> None:
    frame = 'event: error\ndata: {"error": {"message": "bad", "type": "invalid_request_error", "status_code": 400}}\n\n'
    _, final = run(sse(chunk({"content": "so far"}), frame, done=False))
    assert final.status == "error" and final.message.content == "so far"
    assert final.error["retryable"] is False and final.error["upstream_type"] == "invalid_request_error"


def test_error_event_with_non_json_data() -> None:
    _, final = run(sse("event: error\ndata: upstream exploded\n\n", done=False))
    assert final.error["message"] == "p: stream error: upstream exploded"


@pytest.mark.parametrize("data", ["not json", "[1, 2]", '{"choices": [7]}', '{"choices": [{"delta": {"tool_calls": 5}}]}'])
def test_malformed_chunks_are_protocol_errors(data: str) -> None:
    _, final = run(sse(chunk({"content": "ok"}), f"data: {data}\n\n"))
    assert final.status == "error" and final.error["code"] == "upstream_protocol_error"
    assert final.message.content == "ok"


def test_nothing_after_done_counts() -> None:
    out: list[Any] = []
    normalizer = ChatChunkNormalizer()
    normalizer.feed(SSEEvent("message", "[DONE]"), out)
    normalizer.feed(SSEEvent("message", json.dumps(chunk({"content": "late"}))), out)
    normalizer.feed(SSEEvent("error", '{"message": "late"}'), out)
    normalizer.finish(out)
    assert out == [MessageEnd()]


def test_unknown_event_types_are_ignored() -> None:
    _, final = run(sse("event: ping\ndata: {}\n\n", chunk({"content": "x"}), chunk(finish="stop")))
    assert final.status == "ok" and final.message.content == "x"


def test_finish_raises_the_recorded_error() -> None:
    normalizer = ChatChunkNormalizer(provider="p")
    normalizer.feed(SSEEvent("error", '{"message": "boom"}'), [])
    with pytest.raises(UpstreamError, match="boom"):
        normalizer.finish([])


# -- conformance over the recordings ------------------------------------------------------


def _usage_expected(usage: dict[str, Any] | None) -> dict[str, int]:
    usage = usage or {}
    return {
        "input_tokens": usage.get("prompt_tokens", 0),
        "output_tokens": usage.get("completion_tokens", 0),
        "total_tokens": usage.get("total_tokens", 0),
        "cache_read_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
        "cache_write_tokens": 0,
        "reasoning_tokens": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0),
    }


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_recording_gives_expected_outcome(rec: Recording) -> None:
    exp = rec.expected
    events, final = run(rec.body)
    # Decision 2: a refusal is surfaced as text (after any answer text).
    assert final.message.content == (exp["text"] or "") + (exp["refusal"] or "")
    assert "".join(e.content for e in events if isinstance(e, TokenEvent)) == final.message.content
    assert "".join(e.content for e in events if isinstance(e, ReasoningEvent)) == (exp["reasoning"] or "")
    assert "".join(b.text for b in final.message.reasoning) == (exp["reasoning"] or "")
    assert final.usage.to_dict() == _usage_expected(exp["usage"])
    if exp["errors"]:
        assert final.status == "error" and final.stop_reason == "error"
        payload = exp["errors"][0]["payload"]
        message = payload.get("error", payload)["message"]
        assert final.error["message"].endswith(message)
        return
    assert final.status == "ok"
    stop = EXPECTED_STOP[exp["finish_reason"]]
    assert final.stop_reason == ("content_filter" if exp["refusal"] else stop)
    assert final.model == exp["model"]
    calls = [(c.id, c.name, json.loads(json.dumps(dict(c.arguments)))) for c in final.message.tool_calls]
    assert calls == [(c["id"], c["name"], json.loads(c["arguments"] or "{}")) for c in exp["tool_calls"]]
    for call in exp["tool_calls"]:  # the fragments join to exactly the streamed arguments
        fragments = [e.args_fragment for e in events if isinstance(e, ToolCallEvent) and e.id == call["id"]]
        assert "".join(fragments) == call["arguments"]
        finals = [e for e in events if isinstance(e, ToolCallEvent) and e.id == call["id"] and e.is_final]
        assert len(finals) == 1


def test_cache_writes_reported_by_a_compatible_server_are_kept() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
             "prompt_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 60}}
    _, final = run(sse(chunk({"content": "x"}), chunk(finish="stop"), {"id": "chatcmpl-1", "choices": [], "usage": usage}))
    assert final.usage.cache_read_tokens == 40 and final.usage.cache_write_tokens == 60
