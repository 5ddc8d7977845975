"""The HTTP contract, in process: JSON answers, SSE frames, bad input, request ids, metrics."""

import pytest

from app.main import create_app
from app.settings import Settings
from tests.support import in_process, parse_sse

# An app's connection collected unclosed fails the test that sees it (aiosqlite warns in its finalizer).
pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")

ASK = {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}]}


@pytest.fixture
def app():
    return create_app(Settings(max_body_bytes=4096))


@pytest.fixture
async def client(app):
    async with in_process(app) as c:  # with its lifespan: an unclosed engine failed a later test's loop
        yield c


async def test_stream_gives_the_canonical_events_in_order(client):
    r = await client.post("/v1/stream", json=ASK)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.content)
    assert [e for _, e, _ in events] == ["start", "token", "tool_call", "tool_call", "tool_result", "token", "final"]
    assert [i for i, _, _ in events] == list(range(1, 8))
    start, final = events[0][2], events[-1][2]
    assert start == {"stream_id": r.headers["x-stream-id"], "model": "mock/tool_call", "provider": "mock"}
    assert final["status"] == "ok" and final["message"]["content"] == "Sum is 4"
    assert set(final["usage"]) == {"input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
                                   "cache_write_tokens", "reasoning_tokens"}


async def test_generate_answers_the_final_payload(client):
    r = await client.post("/v1/generate", json={**ASK, "model": "mock/simple"})
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["message"]["content"] == "Hello, world" and body["stop_reason"] == "stop"


async def test_generate_stream_true_runs_in_the_background_for_subscribers(client):
    r = await client.post("/v1/generate", json={**ASK, "stream": True})
    assert r.status_code == 202
    body = r.json()
    assert body["stream_url"] == f"/v1/stream/{body['stream_id']}" == r.headers["location"]
    sub = await client.get(body["stream_url"])
    assert [e for _, e, _ in parse_sse(sub.content)][-1] == "final"
    replay = await client.get(body["stream_url"], headers={"Last-Event-ID": "3"})
    assert [i for i, _, _ in parse_sse(replay.content)] == [4, 5, 6, 7]
    after = await client.get(body["stream_url"], params={"after": 5})
    assert [i for i, _, _ in parse_sse(after.content)] == [6, 7]


async def test_a_stream_broken_mid_way_ends_with_an_honest_error_final(client):
    r = await client.post("/v1/stream", json={**ASK, "model": "mock/simple", "provider_options": {"fail_after": 2}})
    events = parse_sse(r.content)
    assert [e for _, e, _ in events] == ["start", "token", "final"]
    final = events[-1][2]
    assert final["status"] == "error" and final["stop_reason"] == "error"
    assert final["message"]["content"] == "Hello"  # what was known, never a fake success
    assert final["error"]["code"] == "upstream_disconnected" and final["error"]["retryable"] is True
    r = await client.post("/v1/generate", json={**ASK, "model": "mock/simple", "provider_options": {"fail_after": 2}})
    assert r.status_code == 502 and r.json()["status"] == "error" and r.json()["message"]["content"] == "Hello"


def _big_body():
    return {**ASK, "messages": [{"role": "user", "content": "x" * 5000}]}


@pytest.mark.parametrize(
    ("kwargs", "status", "code", "field"),
    [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "invalid_json", "body"),
        ({"json": {**ASK, "temprature": 0.5}}, 422, "invalid_request", "temprature"),
        ({"json": {**ASK, "messages": []}}, 422, "invalid_request", "messages"),
        ({"json": {**ASK, "messages": [{"role": "robot", "content": "x"}]}}, 422, "invalid_request", "messages.0.role"),
        ({"json": {**ASK, "messages": [{"role": "user", "content": ""}]}}, 422, "invalid_request", "messages.0"),
        ({"json": {**ASK, "tools": [{"name": "add", "parameters": {"type": "object", "properties": {},
                                                                    "required": ["a"]}}]}},
         422, "invalid_request", "tools.0.parameters"),
        ({"json": {**ASK, "tools": [{"name": "add"}, {"name": "add"}]}}, 422, "invalid_request", "tools"),
        ({"json": {**ASK, "tool_choice": "missing"}}, 422, "invalid_request", "tool_choice"),
        ({"json": {**ASK, "model": "nope/x"}}, 404, "model_not_found", "model"),
        ({"json": {**ASK, "model": "no-slash"}}, 422, "invalid_model", "model"),
        ({"json": {**ASK, "model": "mock/unknown-scenario"}}, 404, "model_not_found", None),
        ({"json": {**ASK, "provider_options": {"delay_ms": -1}}}, 400, "invalid_request", "provider_options.delay_ms"),
        ({"json": _big_body()}, 413, "payload_too_large", "body"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/generate", "/v1/stream"])
async def test_bad_input_gets_a_clear_4xx_naming_the_problem(client, route, kwargs, status, code, field):
    r = await client.post(route, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["message"]
    if field is not None:
        assert error["field"] == field


async def test_unknown_stream_and_garbage_last_event_id(client):
    r = await client.get("/v1/stream/str_missing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "stream_not_found"
    stream_id = (await client.post("/v1/generate", json={**ASK, "stream": True})).json()["stream_id"]
    r = await client.get(f"/v1/stream/{stream_id}", headers={"Last-Event-ID": "banana"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "Last-Event-ID"
    r = await client.get(f"/v1/stream/{stream_id}", params={"after": "-2"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "query.after"


@pytest.mark.parametrize("raw", [b"\xb2", b"\xb3", b"\xb9", b"1\xb2", b" \xb9 "])
async def test_a_last_event_id_of_latin1_superscripts_is_a_400_not_a_500(client, raw):
    """Header bytes are Latin-1 (RFC 9110): `\xb2` is `²`, which `str.isdigit()` takes and `int()` refuses."""
    stream_id = (await client.post("/v1/generate", json={**ASK, "stream": True})).json()["stream_id"]
    r = await client.get(f"/v1/stream/{stream_id}", headers={"Last-Event-ID": raw})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_last_event_id" and r.json()["error"]["field"] == "Last-Event-ID"


async def test_request_id_is_accepted_and_returned(client):
    r = await client.post("/v1/generate", json={**ASK, "model": "mock/simple"}, headers={"X-Request-ID": "req-42"})
    assert r.headers["x-request-id"] == "req-42"
    r = await client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert r.headers["x-request-id"] != "bad id with spaces" and len(r.headers["x-request-id"]) == 32


async def test_health_readiness_and_metrics(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = (await client.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["providers"]["mock"] is True
    await client.post("/v1/stream", json=ASK)
    await client.post("/v1/generate", json={**ASK, "model": "nope/x"})
    text = (await client.get("/metrics")).text
    assert 'foundry_requests_total{method="POST",route="/v1/stream",status="200"} 1.0' in text
    assert 'foundry_requests_total{method="POST",route="/v1/generate",status="404"} 1.0' in text
    assert 'foundry_events_total{type="tool_call"} 2.0' in text
    assert 'foundry_events_total{type="final"} 1.0' in text
    assert "gen_ai_server_time_to_first_token_seconds_count" in text
    assert 'foundry_runs_finished_total{provider="mock",status="ok"} 1.0' in text
    assert "foundry_active_runs 0.0" in text
    assert "_created" not in text  # a timestamp per labelled series that no dashboard reads
    # A second request to each run route: the labels stay the route's.
    await client.post("/v1/stream", json=ASK)
    await client.post("/v1/generate", json={**ASK, "model": "nope/x"})
    text = (await client.get("/metrics")).text
    assert 'foundry_requests_total{method="POST",route="/v1/stream",status="200"} 2.0' in text
    assert 'foundry_requests_total{method="POST",route="/v1/generate",status="404"} 2.0' in text


async def test_unknown_route_is_json(client):
    r = await client.get("/v2/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
