"""Honest endings: exactly one final whatever the provider does; resources always released."""

from unittest.mock import ANY

import httpx
import pytest

from app.core.errors import UpstreamRateLimited, UpstreamTimeout
from app.core.patches import MessageDelta, MessageEnd, TextDelta, ToolDelta
from app.main import create_app
from app.settings import Settings
from tests.fakes import FakeAdapter, ok_script
from tests.support import parse_sse

ASK = {"model": "fake/m", "messages": [{"role": "user", "content": "hi"}]}


async def post_stream(adapter, body=ASK):
    app = create_app(Settings(), adapters={"fake": adapter})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        r = await c.post("/v1/stream", json=body)
    return r, app


def finals(events):
    return [d for _, e, d in events if e == "final"]


async def test_ok_run_closes_the_upstream():
    adapter = FakeAdapter(ok_script("a", "b"))
    r, _ = await post_stream(adapter)
    events = parse_sse(r.content)
    assert finals(events)[0]["status"] == "ok" and events[-1][1] == "final" and len(finals(events)) == 1
    assert adapter.streams[0].closed.is_set()


@pytest.mark.parametrize(
    ("script", "code"),
    [
        ([[TextDelta(text="part")], UpstreamTimeout("read timed out")], "upstream_timeout"),
        ([[TextDelta(text="part")], RuntimeError("bug in a provider")], "internal_error"),
        ([[TextDelta(text="part")], [MessageDelta(stop_reason="stop")]], "upstream_incomplete"),  # no MessageEnd
    ],
)
async def test_failures_after_the_first_event_give_one_error_final_with_the_text_so_far(script, code):
    adapter = FakeAdapter(script)
    r, _ = await post_stream(adapter)
    assert r.status_code == 200
    events = parse_sse(r.content)
    [final] = finals(events)
    assert events[-1][1] == "final"
    assert final["status"] == "error" and final["error"]["code"] == code
    assert final["message"]["content"] == "part" and final["stop_reason"] == "error"
    assert adapter.streams[0].closed.is_set()


async def test_internal_errors_do_not_leak_details():
    r, _ = await post_stream(FakeAdapter([RuntimeError("secret sk-abcdefghijklmnopqrstuvwxyz")]))
    assert b"sk-abc" not in r.content and finals(parse_sse(r.content))[0]["error"]["message"] == "internal gateway error"


async def test_failures_before_the_first_event_are_http_errors_with_retry_after():
    adapter = FakeAdapter(open_error=UpstreamRateLimited("slow down", retry_after="7"))
    r, app = await post_stream(adapter)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"] == {"code": "rate_limited", "message": "slow down", "retryable": True, "retry_after": "7",
                                 "attempts": [{"target": "fake/m", "outcome": "rate_limited", "code": "rate_limited",
                                               "duration_ms": ANY}]}
    assert len(app.state.gateway.store) == 0  # no stream was created


async def test_request_fields_reach_the_provider_with_defaults():
    adapter = FakeAdapter()
    await post_stream(adapter, {**ASK, "tools": [{"name": "add"}], "tool_choice": "add", "max_tokens": 5,
                                "provider_options": {"top_p": 0.5}})
    req = adapter.requests[0]
    assert req.model == "m" and req.temperature == 0 and req.max_tokens == 5 and req.tool_choice == "add"
    assert req.tools[0].name == "add" and req.options == {"top_p": 0.5}


async def test_aliases_resolve_to_provider_models():
    app = create_app(Settings(aliases={"fast": "mock/simple"}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        r = await c.post("/v1/generate", json={**ASK, "model": "fast"})
    assert r.status_code == 200 and r.json()["message"]["content"] == "Hello, world"


@pytest.mark.parametrize("validators", [None, [{"name": "regex_deny", "config": {"patterns": ["forbidden"]}}]])
@pytest.mark.parametrize("script", [
    ok_script("a", "b"),  # start leaves with the first token (no validator) or alone (a gate)
    [[ToolDelta(key=7, fragment="{")]],  # content that breaks the accumulator before anything is released
    [[MessageDelta(stop_reason="stop"), MessageEnd()]],  # a response with nothing to release
    [[TextDelta(text="part")], UpstreamTimeout("read timed out")],
])
async def test_every_stream_begins_with_start_and_numbers_its_events_from_one(script, validators):
    body = ASK if validators is None else {**ASK, "validators": validators}
    r, _ = await post_stream(FakeAdapter(script), body)
    events = parse_sse(r.content)
    assert r.status_code == 200
    assert events[0][1] == "start" and events[-1][1] == "final" and len(finals(events)) == 1
    assert [event_id for event_id, _, _ in events] == list(range(1, len(events) + 1))
