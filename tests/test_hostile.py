"""Hostile input (issue 10), at HTTP level under uvicorn: every request is refused with a 4xx JSON
body naming the field, or runs to a stream with exactly one `final`; nothing is fetched, no file
is read, no key is echoed or logged, and the process keeps answering while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tomllib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.core.patches import MessageDelta, MessageEnd, TextDelta
from app.main import create_app
from app.providers.mock import scenario_stream
from app.settings import Settings
from app.streams.log import BATCH_BYTES
from app.streams.memory import MemoryStreamStore
from tests.fakes import FakeAdapter
from tests.support import REPO, parse_sse, serve, until
from tests.upstream_fakes import FakeUpstream

USER = [{"role": "user", "content": '{"a": 1}'}]
DEADLINE = 60.0  # the tests' own bound on a hostile request: generous, not a performance claim


def ask(**extra: Any) -> dict[str, Any]:
    return {"model": "mock/echo", "messages": USER, **extra}


def schema_validator(schema: Any) -> dict[str, Any]:
    return {"validators": [{"name": "json_schema", "config": {"schema": schema}}]}


def one_final(body: bytes) -> dict[str, Any]:
    events = parse_sse(body)
    finals = [d for _, e, d in events if e == "final"]
    assert len(finals) == 1 and events[-1][1] == "final", [e for _, e, _ in events]
    return finals[0]


def refused(r: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    if field is not None:
        assert error["field"] == field, error
    return error


@contextlib.asynccontextmanager
async def gateway(settings: Settings | None = None, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings or Settings(), **kw)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=DEADLINE) as client:
        client.app = app  # type: ignore[attr-defined]
        yield client


@contextlib.asynccontextmanager
async def listener() -> AsyncIterator[tuple[int, list[int]]]:
    """A loopback server that counts connections (and never answers)."""
    seen: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], seen
    finally:
        server.close()
        await server.wait_closed()


async def healthy_while(client: httpx.AsyncClient, hostile: Any) -> Any:
    """Run the hostile request and, meanwhile, /healthz: both must be answered in the deadline."""
    task = asyncio.ensure_future(hostile)
    health = await asyncio.wait_for(client.get("/healthz"), DEADLINE)
    assert health.status_code == 200
    return await asyncio.wait_for(task, DEADLINE)


# -- 1. json_schema: no retrieval, bounded, checked at the edge -------------------------------


async def test_schema_references_outside_the_schema_are_refused_and_never_fetched(tmp_path):
    secret_file = tmp_path / "s.json"
    secret_file.write_text('{"type": "string", "enum": ["TOP-SECRET-FILE-CONTENT"]}')
    async with listener() as (port, seen), gateway() as c:
        for schema in (
            {"$ref": f"http://127.0.0.1:{port}/s.json"},
            {"properties": {"a": {"$ref": f"http://127.0.0.1:{port}/s.json#/x"}}},
            {"$ref": f"file://{secret_file}"},
            {"$ref": "file:///dev/zero"},
            {"$defs": {"x": {"$dynamicRef": f"http://127.0.0.1:{port}/d"}}},
            {"$id": f"http://127.0.0.1:{port}/base.json", "$ref": "#/$defs/x", "$defs": {"x": {}}},
        ):
            for path in ("/v1/generate", "/v1/stream"):
                r = await c.post(path, json=ask(**schema_validator(schema)))
                error = refused(r, 422, "validators.0.config.schema")
                assert "TOP-SECRET-FILE-CONTENT" not in r.text and error["code"] == "invalid_validator"
    assert seen == []  # nothing connected to the listener


async def test_deep_big_or_self_referencing_schemas_never_500(capsys):
    deep: dict[str, Any] = {}
    for _ in range(150):
        deep = {"not": deep}
    wide = {"properties": {f"p{i}": {"type": "string", "description": "x" * 10} for i in range(5000)}}
    async with gateway() as c:
        for schema in (deep, wide):
            refused(await c.post("/v1/generate", json=ask(**schema_validator(schema))), 422,
                    "validators.0.config.schema")
        # A local reference to itself is allowed, and judged without a crash: a schema that is only a
        # reference to itself never ends, a block naming why, not a 500; one whose reference ends at the
        # answer's leaves ({"a": 1}: `a` is not an object, so its `properties` say nothing) passes.
        r = await c.post("/v1/stream", json=ask(**schema_validator({"$ref": "#"})))
        final = one_final(r.content)
        assert final["status"] == "blocked" and "refers to itself" in final["error"]["reason"]
        r = await c.post("/v1/generate", json=ask(**schema_validator({"properties": {"a": {"$ref": "#"}}})))
        assert r.status_code == 200 and r.json()["status"] == "ok"
    assert "Traceback" not in capsys.readouterr().out


async def test_tool_parameters_are_caller_schemas_too():
    tool = {"name": "t", "parameters": {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/x"}}}}
    async with gateway() as c:
        r = await c.post("/v1/generate", json=ask(tools=[tool], validators=[{"name": "json_schema"}]))
        refused(r, 422, "tools")


# -- 2. regexes: linear time, refused when RE2 cannot do them ---------------------------------


@pytest.mark.parametrize(("pattern", "text"), [("(a|a)*b", "a" * 25), ("(.*a){9}b", "a" * 36),
                                               ("(.*a){12}b", "a" * 40), ("(a+)+$", "a" * 40 + "!")])
async def test_catastrophic_patterns_run_in_linear_time_and_the_loop_stays_free(pattern, text):
    # The answer is the text as a JSON string, so that the schema's `pattern` runs on it too (a text
    # that is not JSON is blocked before any pattern). No pattern matches its text: regex_deny lets it
    # through, and the schema's pattern, which the string must match, blocks it.
    async with gateway() as c:
        body = {"model": "mock/echo", "messages": [{"role": "user", "content": json.dumps(text)}],
                "validators": [{"name": "regex_deny", "config": {"patterns": [pattern]}}], "chunking": "none"}
        r = await healthy_while(c, c.post("/v1/stream", json=body))
        assert one_final(r.content)["status"] == "ok"
        schema_body = {**body, "validators": [{"name": "json_schema", "config": {"schema": {"pattern": pattern}}}]}
        r = await healthy_while(c, c.post("/v1/generate", json=schema_body))
        assert r.status_code == 200 and r.json()["status"] == "blocked"
        assert f"does not match {pattern!r}" in r.json()["error"]["reason"]


@pytest.mark.parametrize("pattern", [r"(?<=a)b", r"(a)\1", r"(?!x)y", "(", "a{1001}{1001}", "x" * 1001])
async def test_patterns_rre2_refuses_are_422_naming_the_field(pattern):
    async with gateway() as c:
        r = await c.post("/v1/generate", json=ask(validators=[{"name": "regex_deny",
                                                               "config": {"patterns": ["ok", pattern]}}]))
        refused(r, 422, "validators.0.config.patterns")
        r = await c.post("/v1/generate", json=ask(**schema_validator({"pattern": pattern})))
        refused(r, 422, "validators.0.config.schema")


# -- 3. invalid Unicode: 422 at the edge; one final whatever breaks -----------------------------


def raw(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()  # ensure_ascii: a lone surrogate goes out as its \\udXXX escape


@pytest.mark.parametrize(("body", "field"), [
    (ask(messages=[{"role": "user", "content": "hi \udfff there"}]), "messages.0.content"),
    (ask(messages=[{"role": "user", "content": "ok"}, {"role": "user", "content": "\ud800"}]), "messages.1.content"),
    (ask(tools=[{"name": "t", "description": "d\udc00"}]), "tools.0.description"),
    (ask(provider_options={"delay\udfffms": 1}), "provider_options"),
    (ask(validators=[{"name": "regex_deny", "config": {"patterns": ["\ud83d"]}}]), "validators.0.config.patterns.0"),
    ({"model": "mock/\udfff", "messages": USER}, "model"),
])
async def test_lone_surrogates_are_refused_naming_the_field(body, field):
    async with gateway() as c:
        for path in ("/v1/stream", "/v1/generate"):
            r = await c.post(path, content=raw(body), headers={"content-type": "application/json"})
            assert refused(r, 422, field)["code"] == "invalid_unicode"


async def test_invalid_unicode_from_the_provider_still_ends_with_one_final():
    adapter = FakeAdapter([[TextDelta(text="hi \udfff there")], [MessageDelta(stop_reason="stop"), MessageEnd()]])
    async with gateway(Settings(max_streams=3), adapters={"fake": adapter}) as c:
        for _ in range(5):  # more than max_streams: every run releases its slot
            r = await c.post("/v1/stream", json={"model": "fake/m", "messages": USER})
            final = one_final(r.content)
            assert final["status"] == "ok" and final["message"]["content"] == "hi \ufffd there"
            r = await c.post("/v1/generate", json={"model": "fake/m", "messages": USER})
            assert r.status_code == 200 and r.json()["message"]["content"] == "hi \ufffd there"
        assert "foundry_active_runs 0.0" in (await c.get("/metrics")).text


class _Unencodable:
    """A value no JSON encoder takes: the run's final is built from it and must still go out."""


async def test_a_step_that_raises_still_gives_one_final_and_json():
    class Broken(FakeAdapter):
        async def open_stream(self, request):  # type: ignore[override]
            stream = await super().open_stream(request)
            stream.script.insert(1, [TextDelta(text=_Unencodable())])  # type: ignore[arg-type]
            return stream

    async with gateway(adapters={"fake": Broken()}) as c:
        r = await c.post("/v1/stream", json={"model": "fake/m", "messages": USER})
        assert one_final(r.content)["status"] == "error"
        r = await c.post("/v1/generate", json={"model": "fake/m", "messages": USER})
        assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
        assert "foundry_active_runs 0.0" in (await c.get("/metrics")).text


# -- 4. subscribers that never read --------------------------------------------------------------


async def test_replay_goes_out_in_bounded_batches():
    store = MemoryStreamStore(ttl=60, max_streams=10, max_events=100_000, max_bytes=8 << 20)
    log = await store.create(model="m", provider="p")
    from app.core.events import TokenEvent

    for i in range(5000):
        log.append(TokenEvent(index=i, content="lorem ipsum " * 4))
    sizes = [len(chunk) async for chunk in _until(log.follow(0), log.last_seq)]
    assert sum(sizes) == log.size_bytes and len(sizes) > 1
    assert max(sizes) < BATCH_BYTES + 200  # one batch and at most one frame more, never the whole log


async def _until(frames: AsyncIterator[bytes], last: int) -> AsyncIterator[bytes]:
    total = 0
    async for chunk in frames:
        yield chunk
        total += chunk.count(b"\nevent: ")
        if total >= last:
            return


async def test_a_subscriber_that_never_reads_is_dropped():
    settings = Settings(send_timeout_seconds=0.5, ping_seconds=0.2)
    async with gateway(settings) as c:
        r = await c.post("/v1/generate", json={"model": "mock/lorem-20000", "messages": USER})
        stream_id = r.headers["x-stream-id"]
        host, port = c.base_url.host, c.base_url.port
        readers = []
        for _ in range(3):  # connections that send the request and never read a byte
            reader, writer = await asyncio.open_connection(host, port, limit=1024)
            writer.transport.set_write_buffer_limits(0)
            sock = writer.get_extra_info("socket")
            import socket as _socket

            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVBUF, 4096)
            writer.write(f"GET /v1/stream/{stream_id}?after=0 HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            await writer.drain()
            readers.append((reader, writer))
        route = 'route="/v1/stream/{stream_id}",status="200"'

        async def dropped() -> bool:
            return f'foundry_requests_total{{method="GET",{route}}} 3.0' in (await c.get("/metrics")).text

        await until(dropped, "the server ending all three responses", DEADLINE)
        for _, writer in readers:
            writer.close()


# -- 5. oversized mock runs, the store's budget --------------------------------------------------


async def test_lorem_past_the_cap_is_422_naming_model():
    async with gateway() as c:
        for model in ("mock/lorem-100001", "mock/lorem-1000000", "mock/lorem-999999999999"):
            refused(await c.post("/v1/generate", json={"model": model, "messages": USER}), 422, "model")


def test_lorem_is_made_lazily():
    chunks = scenario_stream("lorem-100000")
    assert not isinstance(chunks, list)
    assert [type(p).__name__ for p in next(chunks)] == ["MessageStart"]


async def test_the_store_keeps_within_its_byte_budget_evicting_finished_streams_first():
    async with gateway(Settings(max_store_bytes=200_000, max_stream_bytes=100_000)) as c:
        ids = []
        for _ in range(6):
            r = await c.post("/v1/generate", json={"model": "mock/lorem-1000", "messages": USER})
            assert r.status_code == 200
            ids.append(r.headers["x-stream-id"])
        store = c.app.state.gateway.store  # type: ignore[attr-defined]
        assert store.total_bytes <= 200_000
        assert store.get(ids[0]) is None and store.get(ids[-1]) is not None  # oldest went first
        metrics = (await c.get("/metrics")).text
        assert 'foundry_streams_evicted_total{reason="budget"}' in metrics and "foundry_store_bytes" in metrics


# -- 6. the gateway's credentials are never echoed or logged -------------------------------------

KEY = "sk-proj-LIVEKEY0123456789abcdefABCDEF"


@pytest.mark.parametrize(("status", "answered", "code"), [
    (400, 400, "upstream_bad_request"), (401, 502, "upstream_auth"), (404, 404, "model_not_found"),
    (429, 429, "rate_limited"), (500, 502, "upstream_error"),
])
async def test_upstream_errors_quoting_the_key_are_scrubbed(status, answered, code, capsys):
    message = (f"Incorrect API key provided: {KEY}. Other: sk-ant-api03-abcdefghijklmnop, "
               "AIzaSyA1234567890abcdefghijklmnopqrstu")
    fake = FakeUpstream("/v1/chat/completions", [(status, {"error": {"message": message, "type": "x"}}, {})] * 2)
    async with serve(fake.app()) as upstream:
        settings = Settings(openai_api_key=KEY, openai_base_url=f"{upstream}/v1", upstream_max_retries=0)
        async with gateway(settings) as c:
            for path in ("/v1/generate", "/v1/stream"):
                r = await c.post(path, json={"model": "openai/gpt-x", "messages": USER})
                assert (r.status_code, r.json()["error"]["code"]) == (answered, code)
                for token in (KEY, "sk-ant-api03", "AIzaSy", "LIVEKEY"):
                    assert token not in r.text
    assert len(fake.requests) == 2  # the key did go upstream
    log = capsys.readouterr().out
    assert KEY not in log and "LIVEKEY" not in log


# -- 7. provider_options -----------------------------------------------------------------------


@pytest.mark.parametrize(("model", "options", "field"), [
    ("openai/gpt-x", {"n": 128}, "provider_options.n"),
    ("openai/gpt-x", {"n": 2}, "provider_options.n"),
    ("openai/gpt-x", {"max_completion_tokens": 100_000_000}, "provider_options.max_completion_tokens"),
    ("openai/gpt-x", {"max_completion_tokens": "10"}, "provider_options.max_completion_tokens"),
    ("openai/gpt-x", {"modalities": ["audio"]}, "provider_options.modalities"),  # (service_tier is carried now)
    ("anthropic/claude", {"mcp_servers": [{"url": "http://x"}]}, "provider_options.mcp_servers"),
    ("anthropic/claude", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "provider_options.tools"),
    ("openai-responses/gpt-x", {"builtin_tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]},
     "provider_options.builtin_tools"),
    ("openai-responses/gpt-x", {"max_output_tokens": 10**9}, "provider_options.max_output_tokens"),
    ("gemini/g", {"generationConfig": {"candidateCount": 8}}, "provider_options.generationConfig.candidateCount"),
    ("gemini/g", {"generationConfig": {"maxOutputTokens": 10**8}}, "provider_options.generationConfig.maxOutputTokens"),
    ("mock/simple", {"temperature": 1}, "provider_options.temperature"),
])
async def test_provider_options_outside_the_allow_list_or_caps_are_422(model, options, field):
    async with listener() as (port, seen):
        upstream = f"http://127.0.0.1:{port}"
        settings = Settings(openai_api_key="k" * 20, openai_base_url=upstream, anthropic_api_key="k" * 20,
                            anthropic_base_url=upstream, gemini_api_key="k" * 20, gemini_base_url=upstream,
                            upstream_max_retries=0)
        async with gateway(settings) as c:
            r = await c.post("/v1/generate", json={"model": model, "messages": USER, "provider_options": options})
            refused(r, 422, field)
    assert seen == []  # refused before anything went upstream


async def test_the_operator_allow_list_opens_an_option():
    settings = Settings(provider_options_allow={"mock": ["delay_ms"]})
    async with gateway(settings) as c:
        assert (await c.post("/v1/generate", json=ask(provider_options={"delay_ms": 1}))).status_code == 200
        refused(await c.post("/v1/generate", json=ask(provider_options={"fail_after": 1})), 422,
                "provider_options.fail_after")


# -- 9. no content in logs ----------------------------------------------------------------------


async def test_a_block_logs_the_validator_and_code_never_the_matched_text(capsys):
    card = "4111111111111111"
    async with gateway() as c:
        body = {"model": "mock/echo", "messages": [{"role": "user", "content": f"card {card} please"}],
                "validators": [{"name": "regex_deny", "config": {"patterns": [r"\d{16}"]}},
                               {"name": "pii"}]}
        r = await c.post("/v1/generate", json=body)
        assert r.json()["status"] == "blocked"
    log = capsys.readouterr().out
    assert '"code": "validation_failed"' in log and card not in log and "please" not in log


# -- 10. the low items ------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "field"), [({"max_tokens": "10"}, "max_tokens"), ({"temperature": True}, "temperature"),
                                              ({"stream": 0}, "stream"), ({"max_steps": "2"}, "max_steps"),
                                              ({"validators": [{"name": "max_length", "config": {"max": "5"}}]},
                                               "validators.0.config.max")])
async def test_loose_types_are_refused(extra, field):
    async with gateway() as c:
        refused(await c.post("/v1/generate", json=ask(**extra)), 422, field)


async def test_bodies_that_are_not_json_are_400_invalid_json_or_415():
    async with gateway() as c:
        headers = {"content-type": "application/json"}
        for body in (b'{"model": "mock/echo", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
                     b"[" * 10_000 + b"]" * 10_000, b"{not json"):
            r = await c.post("/v1/generate", content=body, headers=headers)
            assert refused(r, 400, "body")["code"] == "invalid_json"
        for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            for path in ("/v1/generate", "/v1/stream"):
                r = await c.post(path, content=raw(ask()), headers={"content-type": media})
                assert refused(r, 415, "content-type")["code"] == "unsupported_media_type"


async def test_a_cursor_ahead_of_the_stream_is_400():
    async with gateway() as c:
        r = await c.post("/v1/generate", json={"model": "mock/lorem-30", "messages": USER})
        stream_id = r.headers["x-stream-id"]
        refused(await c.get(f"/v1/stream/{stream_id}", headers={"Last-Event-ID": "100"}), 400, "Last-Event-ID")
        refused(await c.get(f"/v1/stream/{stream_id}", params={"after": 33}), 400, "after")
        assert one_final((await c.get(f"/v1/stream/{stream_id}", params={"after": 31})).content)


async def test_openapi_documents_sse_errors_as_json_and_docs_are_gone():
    async with gateway() as c:
        doc = (await c.get("/openapi.json")).json()
        for path, method in (("/v1/stream", "post"), ("/v1/stream/{stream_id}", "get")):
            for status, response in doc["paths"][path][method]["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response["content"]) == ["application/json"], (path, status)
        assert (await c.get("/docs")).status_code == 404  # no CDN page that is blank offline


def test_license_is_an_spdx_string():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"


async def test_a_cancelled_stream_reports_unknown_output_usage_as_null():
    adapter = FakeAdapter([[TextDelta(text=f"t{i} ")] for i in range(20)], block=True)  # never finishes
    async with gateway(adapters={"fake": adapter}) as c:
        async with c.stream("POST", "/v1/stream", json={"model": "fake/m", "messages": USER}) as r:
            stream_id = r.headers["x-stream-id"]
            async for line in r.aiter_lines():
                if line.startswith("event: token"):
                    break
        log = c.app.state.gateway.store.get(stream_id)  # type: ignore[attr-defined]
        await asyncio.wait_for(adapter.streams[0].closed.wait(), DEADLINE)
        final = one_final((await c.get(f"/v1/stream/{stream_id}", params={"after": log.last_seq - 1})).content)
        assert final["status"] == "cancelled"
        assert final["usage"]["output_tokens"] is None and final["usage"]["total_tokens"] is None
