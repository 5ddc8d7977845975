"""Responses API normalizer: every recording gives its expected outcome, however it is split."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.events import FinalEvent, ReasoningEvent, TokenEvent, ToolCallEvent, ToolResultEvent
from app.core.messages import thaw
from app.providers.openai_responses_stream import SERVER_TOOL_NAMES, SUMMARY_PART_SEPARATOR, ResponsesNormalizer
from tests.support import Recording, final_of, recordings, run_bytes, split_at

RECORDINGS = recordings("openai-responses")
BY_NAME = {r.name: r for r in RECORDINGS}


def run(chunks: list[bytes]) -> tuple[list[Any], FinalEvent]:
    events, _ = run_bytes(chunks, ResponsesNormalizer(), provider="openai-responses")
    return events, final_of(events)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events)


def canonical_usage(usage: dict[str, Any] | None) -> dict[str, int]:
    if usage is None:
        return {k: 0 for k in ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
                               "cache_write_tokens", "reasoning_tokens")}
    return {
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "total_tokens": usage["total_tokens"],
        "cache_read_tokens": usage["input_tokens_details"]["cached_tokens"],
        "cache_write_tokens": usage["input_tokens_details"].get("cache_write_tokens", 0),
        "reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"],
    }


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_recording_gives_expected_outcome(rec: Recording) -> None:
    exp = rec.expected
    events, final = run([rec.body])
    assert final.model == exp["model"]
    assert final.message.content == exp["text"] == "".join(e.content for e in events if isinstance(e, TokenEvent))
    reasoning = "".join(e.content for e in events if isinstance(e, ReasoningEvent))
    assert reasoning == SUMMARY_PART_SEPARATOR.join(exp["reasoning_summary_parts"])
    assert [b.text for b in final.message.reasoning if b.text] == (
        [reasoning] if exp["reasoning_summary_parts"] else []
    )
    # An item with only encrypted content is a block of its own: no text, the signature.
    assert all(b.signature for b in final.message.reasoning if not b.text)
    # Client function calls: id is the call_id, fragments join to the exact wire arguments.
    calls = [(c.id, c.name, dict(c.arguments)) for c in final.message.tool_calls]
    assert calls == [(t["id"], t["name"], orjson.loads(t["arguments"])) for t in exp["tool_calls"]]
    tool_events = [e for e in events if isinstance(e, ToolCallEvent)]
    for t in exp["tool_calls"]:
        mine = [e for e in tool_events if e.id == t["id"]]
        assert "".join(e.args_fragment for e in mine) == t["arguments"]
        assert [e.is_final for e in mine].count(True) == 1 and mine[-1].is_final
    # Built-in tools: server calls, each followed by its result.
    server = [e for e in tool_events if e.server and e.is_final]
    assert [(e.id, e.name) for e in server] == [(s["id"], SERVER_TOOL_NAMES[s["type"]]) for s in exp["server_tool_calls"]]
    for event, s in zip(server, exp["server_tool_calls"], strict=True):
        if "code" in s:
            assert event.arguments == {"code": s["code"]}
            assert "".join(e.args_fragment for e in tool_events if e.id == s["id"]) == orjson.dumps(event.arguments).decode()
        if "action" in s:
            assert event.arguments == {k: v for k, v in s["action"].items() if k != "sources"}
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.tool_call_id for r in results] == [s["id"] for s in exp["server_tool_calls"]]
    for result, s in zip(results, exp["server_tool_calls"], strict=True):
        assert orjson.loads(result.content)["status"] == s["status"] and not result.is_error
    assert final.usage.to_dict() == canonical_usage(exp["usage"])
    terminal = exp["finish_reason"]["terminal_event"]
    if terminal == "response.completed":
        assert final.status == "ok"
        assert final.stop_reason == ("tool_calls" if exp["tool_calls"] else "stop")
    else:
        assert terminal == "response.failed" and exp["errors"]
        assert final.status == "error"
        assert final.error is not None
        assert final.error["upstream_code"] == exp["finish_reason"]["error"]["code"]
        assert final.error["retryable"] is False  # insufficient_quota: retrying will not help


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if not r.expected["errors"]], ids=repr)
def test_body_cut_before_the_terminal_event_is_incomplete(rec: Recording) -> None:
    body = rec.body[: rec.body.rindex(b"event: response.completed")]
    events, final = run([body])
    assert final.status == "error" and final.error is not None
    assert final.error["code"] == "upstream_incomplete" and final.error["retryable"] is True
    assert final.message.content == rec.expected["text"]  # the text so far is kept


CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-x", "status": "in_progress"}}


def completed(status: str = "completed", **response: Any) -> dict[str, Any]:
    return {"type": f"response.{status}", "response": {"id": "resp_1", "status": status, **response}}


def text(index: int, delta: str) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "output_index": index, "item_id": f"msg_{index}", "delta": delta}


@pytest.mark.parametrize(
    ("reason", "stop"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter"), ("max_messages", "length"),
     ("something_new", "length")],
)
def test_incomplete_response_maps_its_reason(reason: str, stop: str) -> None:
    usage = {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12,
             "input_tokens_details": {"cached_tokens": 1}, "output_tokens_details": {"reasoning_tokens": 3}}
    _, final = run([sse(CREATED, text(0, "Hel"), completed("incomplete", incomplete_details={"reason": reason},
                                                           usage=usage))])
    assert (final.status, final.stop_reason, final.message.content) == ("ok", stop, "Hel")
    assert (final.usage.cache_read_tokens, final.usage.reasoning_tokens, final.usage.total_tokens) == (1, 3, 12)


def test_refusal_is_surfaced_as_text_with_content_filter() -> None:
    refusal = {"type": "response.refusal.delta", "output_index": 0, "item_id": "msg_0", "delta": "I can't help."}
    _, final = run([sse(CREATED, refusal, completed())])
    assert (final.message.content, final.stop_reason) == ("I can't help.", "content_filter")


@pytest.mark.parametrize(
    ("event", "code", "retryable"),
    [
        ({"type": "error", "code": "server_error", "message": "boom", "param": None}, "server_error", True),
        ({"type": "error", "error": {"type": "invalid_request_error", "code": "bad", "message": "no"}}, "bad", False),
        (completed("failed", error={"code": "server_error", "message": "oops"}), "server_error", True),
        (completed("failed", error={"code": "rate_limit_exceeded", "message": "slow"}), "rate_limit_exceeded", False),
    ],
)
def test_error_events_end_with_an_error_and_keep_the_text(event: dict[str, Any], code: str, retryable: bool) -> None:
    body = sse(CREATED, text(0, "partial"), event, text(0, " ignored"))
    _, final = run([body])
    assert final.status == "error" and final.error is not None
    assert final.error["upstream_code"] == code
    assert final.message.content == "partial"


@given(cuts=st.lists(st.integers(min_value=1), max_size=20))
def test_an_error_gives_the_same_events_however_split(cuts: list[int]) -> None:
    body = sse(CREATED, text(0, "a"), text(0, "b"), {"type": "error", "code": "server_error", "message": "x"})
    assert run(split_at(body, [c % len(body) for c in cuts]))[0] == run([body])[0]


def function_call(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index,
            "item": {"type": "function_call", "id": f"fc_{index}", "call_id": call_id, "name": name,
                     "arguments": arguments, "status": "in_progress"}}


def args_delta(index: int, delta: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "output_index": index, "item_id": f"fc_{index}",
            "delta": delta}


def args_done(index: int, arguments: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.done", "output_index": index, "item_id": f"fc_{index}",
            "arguments": arguments}


def test_interleaved_parallel_function_calls_stay_apart() -> None:
    body = sse(
        CREATED, function_call(0, "call_a", "add"), function_call(1, "call_b", "mul"),
        args_delta(0, '{"a":'), args_delta(1, '{"x":'), args_delta(1, "2}"), args_delta(0, "1}"),
        args_done(1, '{"x":2}'), args_done(0, '{"a":1}'), completed(),
    )
    _, final = run([body])
    assert [(c.id, c.name, dict(c.arguments)) for c in final.message.tool_calls] == [
        ("call_a", "add", {"a": 1}), ("call_b", "mul", {"x": 2})]
    assert final.stop_reason == "tool_calls"


def test_arguments_given_only_whole_are_used() -> None:
    done_item = {"type": "response.output_item.done", "output_index": 0,
                 "item": {"type": "function_call", "id": "fc_0", "call_id": "call_z", "name": "f",
                          "arguments": '{"k":true}', "status": "completed"}}
    # No added event and no deltas at all: the done item alone is a complete call.
    _, final = run([sse(CREATED, done_item, completed())])
    assert [(c.id, dict(c.arguments)) for c in final.message.tool_calls] == [("call_z", {"k": True})]
    _, final = run([sse(CREATED, function_call(0, "call_z", "f"), args_done(0, '{"k":true}'), done_item, completed())])
    assert [(c.id, dict(c.arguments)) for c in final.message.tool_calls] == [("call_z", {"k": True})]


def test_file_search_is_a_server_call_with_its_result() -> None:
    item = {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"],
            "results": [{"file_id": "f1", "text": "hit"}]}
    body = sse(CREATED, {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress"}},
               {"type": "response.output_item.done", "output_index": 0, "item": item}, completed())
    events, final = run([body])
    call = next(e for e in events if isinstance(e, ToolCallEvent) and e.is_final)
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert (call.name, call.server, thaw(call.arguments)) == ("file_search", True, {"queries": ["q"]})
    assert (result.tool_call_id, orjson.loads(result.content)["results"]) == ("fs_1", item["results"])
    assert final.message.tool_calls == () and final.stop_reason == "stop"


def test_failed_server_call_result_is_an_error() -> None:
    item = {"type": "web_search_call", "id": "ws_1", "status": "failed"}
    events, _ = run([sse(CREATED, {"type": "response.output_item.done", "output_index": 0, "item": item}, completed())])
    assert next(e for e in events if isinstance(e, ToolResultEvent)).is_error


def test_event_that_is_not_json_is_a_protocol_error() -> None:
    _, final = run([sse(CREATED) + b"event: response.output_text.delta\ndata: {nope\n\n" + sse(completed())])
    assert final.error is not None and final.error["code"] == "upstream_protocol_error"


CODE = 'const r = await tools.exec_command({cmd: "echo \\"hi\\""});\ntext(r.output);'


def custom_call(index: int, *, added: bool = True, deltas: tuple[str, ...] = (), done: bool = True) -> list[dict[str, Any]]:
    item = {"type": "custom_tool_call", "id": f"ctc_{index}", "call_id": f"call_{index}", "name": "exec",
            "input": "", "status": "in_progress"}
    events = [{"type": "response.output_item.added", "output_index": index, "item": item}] if added else []
    events += [{"type": "response.custom_tool_call_input.delta", "output_index": index, "item_id": f"ctc_{index}",
                "delta": d} for d in deltas]
    if done:
        events += [{"type": "response.custom_tool_call_input.done", "output_index": index, "item_id": f"ctc_{index}",
                    "input": CODE},
                   {"type": "response.output_item.done", "output_index": index,
                    "item": {**item, "input": CODE, "status": "completed"}}]
    return events


@pytest.mark.parametrize("deltas", [(CODE[:10], CODE[10:]), ()], ids=["streamed", "whole"])
def test_a_custom_tool_call_is_a_tool_call_with_its_input(deltas: tuple[str, ...]) -> None:
    """Codex's `custom_tool_call` (free-form input, `custom_tool_call_input.delta`s): a tool call
    whose arguments are `{"input": <the text>}`, its fragments streamed as they arrive."""
    events, final = run([sse(CREATED, *custom_call(0, deltas=deltas), completed())])
    assert [(c.id, c.name, thaw(c.arguments)) for c in final.message.tool_calls] == [
        ("call_0", "exec", {"input": CODE})]
    assert final.stop_reason == "tool_calls"
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert "".join(e.args_fragment or "" for e in calls) == orjson.dumps({"input": CODE}).decode()
    if deltas:  # the first fragment is out before the call ends
        assert any(e.args_fragment and not e.is_final for e in calls)


def test_a_custom_tool_call_given_only_whole_is_used() -> None:
    done_only = custom_call(0, added=False)[1:]
    _, final = run([sse(CREATED, *done_only, completed())])
    assert [(c.name, thaw(c.arguments)) for c in final.message.tool_calls] == [("exec", {"input": CODE})]


def reasoning_item(index: int, summary: str | None, encrypted: str | None) -> list[dict[str, Any]]:
    item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{index}", "summary": []}
    events: list[dict[str, Any]] = [{"type": "response.output_item.added", "output_index": index, "item": item}]
    if summary:
        events.append({"type": "response.reasoning_summary_text.delta", "output_index": index, "summary_index": 0,
                       "item_id": f"rs_{index}", "delta": summary})
        item = {**item, "summary": [{"type": "summary_text", "text": summary}]}
    if encrypted:
        item = {**item, "encrypted_content": encrypted}
    return [*events, {"type": "response.output_item.done", "output_index": index, "item": item}]


@pytest.mark.parametrize("summary", ["Thinking it over.", None])
def test_encrypted_reasoning_is_kept_as_the_blocks_signature(summary: str | None) -> None:
    """`encrypted_content` (with the item's id, which the API wants back with it) is the block's
    signature, so a later turn to the same provider can send the reasoning item back."""
    _, final = run([sse(CREATED, *reasoning_item(0, summary, "gAAAA-opaque"), text(1, "Hi"), completed())])
    [block] = final.message.reasoning
    assert (block.text, block.provider) == (summary or "", "openai-responses")
    assert orjson.loads(block.signature or "") == {"id": "rs_0", "encrypted_content": "gAAAA-opaque"}
    _, plain = run([sse(CREATED, *reasoning_item(0, summary, None), text(1, "Hi"), completed())])
    assert all(b.signature is None for b in plain.message.reasoning)
