"""Gemini normalizer: every recording gives its expected outcome, however its bytes are split."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.events import FinalEvent, ReasoningEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import thaw
from app.providers.gemini_stream import GeminiNormalizer
from tests.support import Recording, final_of, recordings, run_bytes, split_at

RECORDINGS = recordings("gemini")
BY_NAME = {r.name: r for r in RECORDINGS}


def run(chunks: list[bytes]) -> tuple[list[Any], FinalEvent]:
    events, _ = run_bytes(chunks, GeminiNormalizer(), provider="gemini")
    return events, final_of(events)


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: %s\r\n\r\n" % orjson.dumps(c) for c in chunks)


def canonical_usage(usage: dict[str, Any]) -> dict[str, int]:
    thoughts = usage.get("thoughtsTokenCount", 0)
    return {
        "input_tokens": usage["promptTokenCount"] + usage.get("toolUsePromptTokenCount", 0),
        "output_tokens": usage["candidatesTokenCount"] + thoughts,
        "total_tokens": usage["totalTokenCount"],
        "cache_read_tokens": usage.get("cachedContentTokenCount", 0),
        "cache_write_tokens": 0,
        "reasoning_tokens": thoughts,
    }


def expected_arguments(call: dict[str, Any]) -> dict[str, Any]:
    return call["args"] if "args" in call else call["args_assembled_from_partial_args"]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_recording_gives_expected_outcome(rec: Recording) -> None:
    exp = rec.expected
    events, final = run([rec.body])
    assert final.status == "ok" and final.model == exp["model"]
    assert final.message.content == exp["text"] == "".join(e.content for e in events if isinstance(e, TokenEvent))
    assert "".join(e.content for e in events if isinstance(e, ReasoningEvent)) == (exp["reasoning"] or "")
    # Calls arrive whole: one final tool_call event each, with gateway-assigned stable ids.
    calls = final.message.tool_calls
    assert [(c.name, thaw(c.arguments)) for c in calls] == [(t["name"], expected_arguments(t)) for t in exp["tool_calls"]]
    assert [c.id for c in calls] == [f"call_{exp['response_ids'][0]}_{n}" for n in range(len(calls))]
    client_events = [e for e in events if isinstance(e, ToolCallEvent) and not e.server]
    assert [e.is_final for e in client_events] == [True] * len(calls)
    assert all(orjson.loads(e.args_fragment) == thaw(e.arguments) for e in client_events)
    # Code execution and search grounding are server calls with their results.
    server = [e for e in events if isinstance(e, ToolCallEvent) and e.server]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    expected_server = [(c["id"], "code_execution", {"language": c["language"], "code": c["code"]})
                       for c in exp["server_tool_calls"]]
    expected_results = [(r["id"], r["output"]) for r in exp["server_tool_results"]]
    if exp["grounding"]:
        search_id = f"search_{exp['response_ids'][0]}"
        expected_server.append((search_id, "google_search", {"queries": exp["grounding"]["webSearchQueries"]}))
        assert len(orjson.loads(results[-1].content)["sources"]) == exp["grounding"]["groundingChunks"]
        results = results[:-1]
    assert [(e.id, e.name, thaw(e.arguments)) for e in server] == expected_server
    assert [(r.tool_call_id, r.content) for r in results] == expected_results
    assert not any(r.is_error for r in results)
    # Every thought signature is kept for the round trip, in order.
    signatures = [b.signature for b in final.message.reasoning if b.signature]
    assert len(signatures) == exp["thought_signatures"] and all(b.provider == "gemini" for b in final.message.reasoning)
    assert final.usage.to_dict() == canonical_usage(exp["usage"])
    assert exp["finish_reason"] == "STOP"
    assert final.stop_reason == ("tool_calls" if exp["tool_calls"] else "stop")


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_body_without_its_finish_chunk_is_incomplete(rec: Recording) -> None:
    frames = rec.body.split(b"\r\n\r\n")[:-1]
    events, final = run([b"\r\n\r\n".join(frames[:-1]) + b"\r\n\r\n"])
    assert final.status == "error" and final.error is not None
    assert final.error["code"] == "upstream_incomplete" and final.error["retryable"] is True
    assert rec.expected["text"].startswith(final.message.content)  # the text so far is kept


def chunk(*parts: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-x", "responseId": "r1", **extra}


@pytest.mark.parametrize(
    ("reason", "stop"),
    [("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
     ("PROHIBITED_CONTENT", "content_filter"), ("OTHER", "stop"), ("SOMETHING_NEW", "stop")],
)
def test_finish_reason_table(reason: str, stop: str) -> None:
    _, final = run([sse(chunk({"text": "Hi"}), chunk({"text": "!"}, finish=reason))])
    assert (final.status, final.stop_reason, final.message.content) == ("ok", stop, "Hi!")


def test_blocked_prompt_ends_blocked() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
               "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7}, "responseId": "r1"}
    events, _ = run_bytes([sse(blocked)], GeminiNormalizer(), provider="gemini")
    error = final_of(events).error
    assert error is not None and (error["code"], error["block_reason"]) == ("upstream_blocked", "SAFETY")


@pytest.mark.parametrize("reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"])
def test_failed_tool_call_finish_is_an_error(reason: str) -> None:
    _, final = run([sse(chunk({"text": "Let me"}, finish=reason))])
    assert final.status == "error" and final.error is not None
    assert (final.error["code"], final.error["upstream_code"]) == ("upstream_tool_call_failed", reason)
    assert final.message.content == "Let me"


@pytest.mark.parametrize(("status", "code", "retryable"), [("UNAVAILABLE", 503, True), ("INVALID_ARGUMENT", 400, False)])
def test_error_object_in_the_stream(status: str, code: int, retryable: bool) -> None:
    error = {"error": {"code": code, "message": "went wrong", "status": status}}
    _, final = run([sse(chunk({"text": "partial"}), error, chunk({"text": " ignored"}, finish="STOP"))])
    assert final.status == "error" and final.error is not None
    assert (final.error["retryable"], final.error["upstream_code"]) == (retryable, status)
    assert final.message.content == "partial"


@given(cuts=st.lists(st.integers(min_value=1), max_size=20))
def test_an_error_gives_the_same_events_however_split(cuts: list[int]) -> None:
    body = sse(chunk({"text": "a"}), chunk({"text": "b"}), {"error": {"code": 500, "message": "x", "status": "INTERNAL"}})
    assert run(split_at(body, [c % len(body) for c in cuts]))[0] == run([body])[0]


def test_parallel_whole_calls_and_a_provider_id() -> None:
    body = sse(chunk({"functionCall": {"name": "a", "args": {"x": 1}}, "thoughtSignature": "sig"},
                     {"functionCall": {"name": "b", "args": {}, "id": "given-id"}}, finish="STOP"))
    _, final = run([body])
    assert [(c.id, c.name, thaw(c.arguments)) for c in final.message.tool_calls] == [
        ("call_r1_0", "a", {"x": 1}), ("given-id", "b", {})]
    assert [b.signature for b in final.message.reasoning] == ["sig"]


def test_partial_args_of_every_kind_are_assembled() -> None:
    start = {"functionCall": {"name": "f", "willContinue": True}}
    pieces = {"functionCall": {"willContinue": True, "partialArgs": [
        {"jsonPath": "$.n", "numberValue": 2.5}, {"jsonPath": "$.ok", "boolValue": False},
        {"jsonPath": "$.none", "nullValue": None}, {"jsonPath": "$.tags[1]", "stringValue": "b"},
        {"jsonPath": "$.where.city", "stringValue": "Par", "willContinue": True},
        {"jsonPath": "$.where.city", "stringValue": "is"}]}}
    _, final = run([sse(chunk(start), chunk(pieces), chunk({"functionCall": {}}, finish="STOP"))])
    (call,) = final.message.tool_calls
    assert thaw(call.arguments) == {"n": 2.5, "ok": False, "none": None, "tags": [None, "b"], "where": {"city": "Paris"}}


def test_unsupported_json_path_is_a_protocol_error() -> None:
    bad = {"functionCall": {"name": "f", "partialArgs": [{"jsonPath": "location", "stringValue": "x"}]}}
    _, final = run([sse(chunk(bad, finish="STOP"))])
    assert final.error is not None and final.error["code"] == "upstream_protocol_error"


def test_thoughts_then_text_are_separate_blocks() -> None:
    body = sse(chunk({"text": "hmm", "thought": True}), chunk({"text": "Answer", "thoughtSignature": "s1"}),
               chunk({"text": "later thought", "thought": True}, finish="STOP"))
    _, final = run([body])
    assert final.message.content == "Answer"
    assert [(b.text, b.signature) for b in final.message.reasoning] == [("hmm", None), ("", "s1"), ("later thought", None)]


def test_code_result_without_id_matches_the_last_code_call() -> None:
    body = sse(chunk({"executableCode": {"language": "PYTHON", "code": "1/0"}}),
               chunk({"codeExecutionResult": {"outcome": "OUTCOME_FAILED", "output": "ZeroDivisionError"}},
                     finish="STOP"))
    events, _ = run([body])
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert (call.server, call.id, result.tool_call_id, result.is_error) == (True, "code_r1_0", "code_r1_0", True)


def test_chunk_that_is_not_json_is_a_protocol_error() -> None:
    _, final = run([sse(chunk({"text": "a"})) + b"data: {oops\r\n\r\n" + sse(chunk(finish="STOP"))])
    assert final.error is not None and final.error["code"] == "upstream_protocol_error"
