"""Run records on real databases (SQLite always, PostgreSQL when reachable): migrations, a tool
run recorded and its transcript served after a restart and after expiry, listing with filters and
cursors, bad parameters, no-content mode, retention, a database cut off mid-run, a full queue."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.main import create_app
from app.records import RecordStore, RunQuery, decode_cursor, encode_cursor
from app.records.tables import metadata
from app.settings import Settings
from tests.records_support import proxied, record, utc
from tests.support import REPO, parse_sse, serve

TOOL_RUN = {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}]}


def settings_for(url: str, **kw) -> Settings:
    return Settings(database_url=url, **kw)


async def stream(client: httpx.AsyncClient, body: dict, **headers: str) -> tuple[str, list]:
    response = await client.post("/v1/stream", json=body, headers=headers)
    assert response.status_code == 200
    return response.headers["x-stream-id"], parse_sse(response.content)


# -- migrations -------------------------------------------------------------------------------


async def test_migrations_from_an_empty_database(database_url: str) -> None:
    store = RecordStore(database_url)
    try:
        await store.migrate()
        await store.migrate()  # at head: nothing to do

        def diff(connection: sa.Connection) -> list:
            return compare_metadata(MigrationContext.configure(connection), metadata)

        async with store.engine.connect() as conn:
            version = (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).scalar_one()
            # the migrated schema is what the code queries (tables.py and the revisions agree)
            assert await conn.run_sync(diff) == []
        assert version == "0011_mcp_calls"
    finally:
        await store.aclose()


async def test_a_run_is_recorded_once_whoever_writes_it_again(database_url: str) -> None:
    # A replica that claimed a lost owner's run records it; the owner, back, records it too: the
    # first record stays, the second is no error and does not fail the batch it travels in.
    store = RecordStore(database_url)
    try:
        await store.migrate()
        claimed = record("str_lost", created_at=utc(2026, 1, 1), status="error", transcript={"status": "error"})
        await store.insert([claimed])
        late = record("str_lost", created_at=utc(2026, 1, 1), transcript={"status": "ok"})
        await store.insert([late, record("str_other", created_at=utc(2026, 1, 2))])
        assert (await store.get("str_lost")).status == "error"
        assert await store.transcript("str_lost") == {"status": "error"}
        assert (await store.get("str_other")) is not None
    finally:
        await store.aclose()


def test_migrate_and_prune_command_line(tmp_path: Path) -> None:
    """`python -m app.records migrate` (what `make migrate` runs) and `prune`, from the installed package."""
    env = {**os.environ, "FOUNDRY_DATA_DIR": str(tmp_path / "var"), "FOUNDRY_RECORD_RETENTION_DAYS": "7"}
    env.pop("FOUNDRY_DATABASE_URL", None)

    def command(name: str) -> str:
        done = subprocess.run([sys.executable, "-m", "app.records", name], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "migrated" in command("migrate")
    database = tmp_path / "var" / "foundry.db"
    assert database.is_file()

    async def seed() -> None:
        store = RecordStore(f"sqlite+aiosqlite:///{database}")
        now = datetime.now(UTC)
        await store.insert([record("str_old", created_at=now - timedelta(days=8)), record("str_new", created_at=now)])
        await store.aclose()

    asyncio.run(seed())
    assert command("prune").startswith("deleted 1 records")


# -- a tool run, recorded, served after a restart -----------------------------------------------


async def test_tool_run_recorded_and_transcript_served_after_restart(database_url: str) -> None:
    app = create_app(settings_for(database_url))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        stream_id, events = await stream(client, TOOL_RUN, **{"x-request-id": "req-tool-run-1"})
        assert [e for _, e, _ in events].count("tool_result") == 1
        live = (await client.get(f"/v1/stream/{stream_id}/transcript")).json()
    # the first gateway is gone (shut down: its queue was written); a new one on the same database
    again = create_app(settings_for(database_url))
    async with serve(again) as url, httpx.AsyncClient(base_url=url) as client:
        assert again.state.gateway.store.get(stream_id) is None  # not live here: from the records
        stored = await client.get(f"/v1/stream/{stream_id}/transcript")
        run = await client.get(f"/v1/runs/{stream_id}")
    assert stored.status_code == 200
    # the record's time is the run's start (RunReport.started_at), a moment before its stream existed
    stored_at, live_at = stored.json().pop("created_at"), live.pop("created_at")
    assert stored_at <= live_at
    assert {k: v for k, v in stored.json().items() if k != "created_at"} == live
    assert [c["name"] for c in live["tool_calls"]] == ["calculator"]
    assert live["tool_calls"][0]["output"] == "4" and live["tool_calls"][0]["gateway"] is True
    assert run.status_code == 200
    body = run.json()
    assert body["id"] == stream_id and body["request_id"] == "req-tool-run-1"
    assert body["model"] == "mock/tool_call" and body["served_model"] == "tool_call"
    assert body["provider"] == "mock" and body["owner"] is None
    assert (body["status"], body["stop_reason"], body["error_code"]) == ("ok", "stop", None)
    assert body["steps"] == 2 and body["tools_run"] == 1
    final = events[-1][2]
    assert body["usage"] == final["usage"] and body["usage"]["total_tokens"] > 0
    assert body["ttft_ms"] is not None and body["duration_ms"] >= body["ttft_ms"]
    assert body["finished_at"] >= body["created_at"]
    assert body["transcript_url"] == f"/v1/stream/{stream_id}/transcript"


async def test_a_broken_run_is_recorded_with_its_error_and_unknown_output(database_url: str) -> None:
    app = create_app(settings_for(database_url))
    broken = {"model": "mock/lorem-50", "messages": [{"role": "user", "content": "hi"}],
              "provider_options": {"fail_after": 3}}
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        stream_id, events = await stream(client, broken)
        await app.state.records.flush()
        run = (await client.get(f"/v1/runs/{stream_id}")).json()
        errors = (await client.get("/v1/runs", params={"status": "error"})).json()["data"]
    final = events[-1][2]
    assert final["status"] == "error"
    assert (run["status"], run["stop_reason"], run["error_code"]) == ("error", "error", final["error"]["code"])
    assert run["usage"] == final["usage"]  # output unknown stays null, never a false 0
    assert [r["id"] for r in errors] == [stream_id]


async def test_a_run_no_target_served_is_recorded_with_its_error_but_a_caller_mistake_is_not(
        database_url: str) -> None:
    from app.core.errors import UpstreamError
    from tests.fakes import FakeAdapter

    adapter = FakeAdapter(open_error=UpstreamError("fake: the upstream is down", code="upstream_unavailable",
                                                   retryable=False))
    app = create_app(settings_for(database_url), adapters={"fake": adapter})
    ask = {"messages": [{"role": "user", "content": "anyone there?"}]}
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        refused = await client.post("/v1/stream", json={**ask, "model": "fake/m"},
                                    headers={"x-request-id": "req-refused-1"})
        unknown = await client.post("/v1/stream", json={**ask, "model": "nowhere/m"})  # no target: the caller's
        await app.state.records.flush()
        runs = (await client.get("/v1/runs")).json()["data"]
        by_request = (await client.get("/v1/runs", params={"request_id": "req-refused-1"})).json()["data"]
        by_other = (await client.get("/v1/runs", params={"request_id": "req-other"})).json()["data"]
        transcript = await client.get(f"/v1/stream/{runs[0]['id']}/transcript") if runs else None
        stream = await client.get(f"/v1/stream/{runs[0]['id']}") if runs else None
    assert refused.status_code == 502 and unknown.status_code == 404
    [run] = runs  # the refused run only
    assert by_request == runs and by_other == []  # found by the X-Request-ID its caller got
    assert (run["model"], run["provider"], run["request_id"]) == ("fake/m", "fake", "req-refused-1")
    assert (run["status"], run["stop_reason"], run["error_code"]) == ("error", "error", "upstream_unavailable")
    assert run["usage"]["output_tokens"] == 0 and run["ttft_ms"] is None and run["tools_run"] == 0
    assert transcript is not None and transcript.status_code == 200
    document = transcript.json()
    assert [m["content"] for m in document["request_messages"]] == ["anyone there?"]
    assert (document["status"], document["stop_reason"], document["steps"]) == ("error", "error", 1)
    assert stream is not None and stream.status_code == 404  # no stream ever existed


async def test_a_background_run_is_recorded_with_the_request_id_that_started_it(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        accepted = await client.post("/v1/generate", json={**TOOL_RUN, "stream": True},
                                     headers={"x-request-id": "req-background-1"})
        stream_id = accepted.json()["stream_id"]
        async with client.stream("GET", f"/v1/stream/{stream_id}") as response:
            events = parse_sse(await response.aread())
        await app.state.records.flush()
        run = (await client.get(f"/v1/runs/{stream_id}")).json()
    assert accepted.status_code == 202 and events[-1][1] == "final"
    assert run["request_id"] == "req-background-1" and run["tools_run"] == 1 and run["status"] == "ok"


async def test_transcript_served_from_records_once_the_stream_expired(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path), stream_ttl_seconds=0.001))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        stream_id, _ = await stream(client, TOOL_RUN)
        await app.state.records.flush()
        assert app.state.gateway.store.get(stream_id) is None  # expired
        assert (await client.get(f"/v1/stream/{stream_id}")).status_code == 404
        transcript = await client.get(f"/v1/stream/{stream_id}/transcript")
        unknown = await client.get("/v1/stream/str_nope/transcript")
    assert transcript.status_code == 200
    assert transcript.json()["stream_id"] == stream_id and transcript.json()["status"] == "ok"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "stream_not_found"


# -- listing ------------------------------------------------------------------------------------


async def seeded(database_url: str) -> list[str]:
    """Nine runs: three models, two statuses, two of them at the same instant (ids break the tie)."""
    store = RecordStore(database_url)
    await store.migrate()
    records = [
        record(f"str_{i:02d}", created_at=utc(2026, 1, 1 + i, 12), model="mock/a" if i % 3 else "mock/b",
               status="error" if i % 4 == 0 else "ok")
        for i in range(8)
    ]
    records.append(record("str_07b", created_at=utc(2026, 1, 8, 12), model="mock/a"))  # same time as str_07
    await store.insert(records)
    await store.aclose()
    return [r.stream_id for r in sorted(records, key=lambda r: (r.created_at, r.stream_id), reverse=True)]


async def test_list_newest_first_with_filters_and_cursor_pages(database_url: str) -> None:
    newest_first = await seeded(database_url)
    app = create_app(settings_for(database_url, record_retention_days=0))  # the seeds are old
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        pages, cursor = [], None
        while True:
            params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
            body = (await client.get("/v1/runs", params=params)).json()
            pages.append([r["id"] for r in body["data"]])
            cursor = body["next_cursor"]
            if cursor is None:
                break
        only_b = (await client.get("/v1/runs", params={"model": "mock/b"})).json()["data"]
        errors = (await client.get("/v1/runs", params={"status": "error"})).json()["data"]
        window = (await client.get("/v1/runs", params={"since": "2026-01-03T12:00:00Z",
                                                        "until": "2026-01-05T12:00:00+00:00"})).json()["data"]
        naive = (await client.get("/v1/runs", params={"since": "2026-01-08T12:00:00"})).json()["data"]
        combined = (await client.get("/v1/runs", params={"model": "mock/a", "status": "error",
                                                          "limit": 1})).json()
    assert [len(p) for p in pages] == [4, 4, 1]
    assert [i for p in pages for i in p] == newest_first
    assert [r["id"] for r in only_b] == ["str_06", "str_03", "str_00"]
    assert [r["id"] for r in errors] == ["str_04", "str_00"]
    assert [r["id"] for r in window] == ["str_03", "str_02"]  # since inclusive, until exclusive
    assert {r["id"] for r in naive} == {"str_07", "str_07b"}  # no zone: UTC
    assert [r["id"] for r in combined["data"]] == ["str_04"] and combined["next_cursor"] is None


@pytest.mark.parametrize(("params", "status", "field"), [
    ({"cursor": "not-a-cursor"}, 400, "cursor"),
    ({"cursor": encode_cursor(utc(2026, 1, 1), "x")[:-3] + "!!!"}, 400, "cursor"),
    ({"since": "yesterday"}, 422, "query.since"),
    ({"until": "2026-13-01"}, 422, "query.until"),
    ({"limit": 201}, 422, "query.limit"),
    ({"limit": 0}, 422, "query.limit"),
    ({"status": "finished"}, 422, "query.status"),
])
async def test_bad_list_parameters_name_the_parameter(tmp_path: Path, params: dict, status: int,
                                                       field: str) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/v1/runs", params=params)
    assert response.status_code == status
    assert response.json()["error"]["field"] == field


async def test_unknown_run_is_404(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/v1/runs/str_unknown")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "run_not_found"


def test_cursor_round_trip_and_refusal() -> None:
    at = utc(2026, 5, 1, 8, 30, 0)
    assert decode_cursor(encode_cursor(at, "str_1")) == (at, "str_1")
    for junk in ("", "e30", "W10", "eyJ0IjogMX0", "%%%"):
        with pytest.raises(ValueError):
            decode_cursor(junk)


# -- no content ---------------------------------------------------------------------------------

SECRET = "zebraquartz7781"


async def test_no_content_mode_stores_no_message_text(tmp_path: Path) -> None:
    data = tmp_path / "data"
    app = create_app(Settings(data_dir=str(data), record_content=False))
    echo = {"model": "mock/echo", "messages": [{"role": "user", "content": f"say {SECRET} twice {SECRET}"}]}
    blocked = {**echo, "validators": [{"name": "regex_deny", "config": {"patterns": [SECRET]}}]}
    tool = {"model": "mock/tool_call", "messages": [{"role": "system", "content": f"you are {SECRET}"},
                                                    {"role": "user", "content": "What is 2+2?"}]}
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        ids = [(await stream(client, body))[0] for body in (echo, blocked, tool)]
        await app.state.records.flush()
        runs = (await client.get("/v1/runs")).json()["data"]
        transcript = (await client.get(f"/v1/stream/{ids[2]}/transcript")).json()  # live: with content
    assert {r["id"] for r in runs} == set(ids)
    assert all(r["content_recorded"] is False for r in runs)
    assert {r["status"] for r in runs} == {"ok", "blocked"}
    assert SECRET in str(transcript)  # readers of the live stream still see it
    files = [p for p in data.iterdir() if p.is_file()]
    assert any(p.name == "foundry.db" for p in files)
    for needle in (SECRET, "Calling calculator", "Sum is 4", "2 + 2", "What is 2+2"):
        for path in files:  # the database, its WAL and shared memory
            assert needle.encode() not in path.read_bytes(), (needle, path.name)
    reader = RecordStore(f"sqlite+aiosqlite:///{data / 'foundry.db'}")
    try:
        stored = await reader.transcript(ids[2])
    finally:
        await reader.aclose()  # its aiosqlite connection closed on this loop, not collected after it
    assert stored["content_recorded"] is False
    assert [c["name"] for c in stored["tool_calls"]] == ["calculator"]  # structure kept, text gone
    assert stored["tool_calls"][0]["output"] is None and stored["tool_calls"][0]["fragments"] == []
    assert [m["role"] for m in stored["request_messages"]] == ["system", "user"]


# -- retention ----------------------------------------------------------------------------------


async def test_retention_deletes_old_records_at_start_and_on_demand(database_url: str) -> None:
    store = RecordStore(database_url)
    await store.migrate()
    now = datetime.now(UTC)
    await store.insert([
        record("str_old", created_at=now - timedelta(days=40), transcript={"stream_id": "str_old"}),
        record("str_recent", created_at=now - timedelta(days=10), transcript={"stream_id": "str_recent"}),
        record("str_new", created_at=now, transcript={"stream_id": "str_new"}),
    ])
    await store.aclose()
    app = create_app(settings_for(database_url, record_retention_days=30))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        ids = [r["id"] for r in (await client.get("/v1/runs")).json()["data"]]
        old = await client.get("/v1/stream/str_old/transcript")
        assert ids == ["str_new", "str_recent"]
        assert old.status_code == 404
        store = app.state.records.store
        assert await store.prune(now - timedelta(days=5)) == 1
        assert await store.transcript("str_recent") is None
        assert (await store.list(RunQuery())).runs[0].stream_id == "str_new"


# -- the database cut off mid-run; a full queue; records off ---------------------------------------


async def test_database_cut_off_mid_run_stream_ends_ok_and_the_drop_is_counted(postgres_url: str) -> None:
    proxy, url = await proxied(postgres_url)
    app = create_app(settings_for(url, records_write_timeout=2))
    body = {"model": "mock/lorem-40", "messages": [{"role": "user", "content": "hi"}],
            "provider_options": {"delay_ms": 5}}
    async with serve(app) as base, httpx.AsyncClient(base_url=base) as client:
        assert (await client.get("/readyz")).json()["records"] == "ok"
        frames = b""
        async with client.stream("POST", "/v1/stream", json=body) as response:
            async for chunk in response.aiter_bytes():
                if not frames:
                    await proxy.cut()  # the database goes away after the first event
                frames += chunk
        events = parse_sse(frames)
        await app.state.records.flush()
        metrics = (await client.get("/metrics")).text
        ready = await client.get("/readyz")
        listing = await client.get("/v1/runs")
    assert [e for _, e, _ in events].count("final") == 1
    assert events[-1][1] == "final" and events[-1][2]["status"] == "ok"
    assert 'foundry_records_dropped_total{reason="write_failed"} 1.0' in metrics
    assert ready.status_code == 200 and ready.json()["records"] == "unreachable"
    assert listing.status_code == 503 and listing.json()["error"]["code"] == "records_unavailable"


async def test_database_that_never_answers_delays_no_stream(postgres_url: str) -> None:
    proxy, url = await proxied(postgres_url)
    app = create_app(settings_for(url, records_write_timeout=0.5))
    async with serve(app) as base, httpx.AsyncClient(base_url=base) as client:
        proxy.stalled = True
        finals = [(await stream(client, TOOL_RUN))[1][-1] for _ in range(3)]
        await app.state.records.flush()  # each batch gave up after the write timeout
        metrics = (await client.get("/metrics")).text
        proxy.stalled = False
    assert all(f[1] == "final" and f[2]["status"] == "ok" for f in finals)
    assert re.search(r'foundry_records_dropped_total\{reason="write_failed"\} [1-3]\.0', metrics)
    await proxy.cut()


async def test_full_queue_drops_and_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # no lifespan (ASGI transport): the writer never runs, so the queue of one fills at once
    app = create_app(Settings(data_dir=str(tmp_path), records_queue_size=1))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        for _ in range(3):
            response = await client.post("/v1/generate", json={**TOOL_RUN, "model": "mock/simple"})
            assert response.status_code == 200 and response.json()["status"] == "ok"
        metrics = (await client.get("/metrics")).text
    assert 'foundry_records_dropped_total{reason="queue_full"} 2.0' in metrics
    logged = [line for line in capsys.readouterr().out.splitlines() if '"records_dropped"' in line]
    assert len(logged) == 2 and all('"reason": "queue_full"' in line for line in logged)
    await app.state.records.aclose()


async def test_records_off(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path / "data"), records=False))
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        stream_id, _ = await stream(client, TOOL_RUN)
        runs = await client.get("/v1/runs")
        ready = (await client.get("/readyz")).json()
    assert runs.status_code == 404 and runs.json()["error"]["code"] == "records_disabled"
    assert ready["records"] == "off"
    assert not (tmp_path / "data").exists()


def test_migrations_ship_inside_the_package() -> None:
    scripts = REPO / "app" / "records" / "migrations"
    assert (scripts / "env.py").is_file() and list((scripts / "versions").glob("0001_*.py"))



# -- batching ------------------------------------------------------------------------------------


class CountingStore(RecordStore):
    """A real store that remembers the size of each insert."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.batches: list[int] = []
        self.wrote = asyncio.Event()

    async def insert(self, records) -> None:  # type: ignore[no-untyped-def]
        self.batches.append(len(records))
        await super().insert(records)
        self.wrote.set()


async def test_records_linger_into_one_insert_and_a_flush_does_not_wait_out_the_linger(tmp_path: Path) -> None:
    from app.records.writer import RecordQueue, RecordWriter

    store = CountingStore(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    writer = RecordWriter(store, RecordQueue(batch_size=3), linger=3600.0)  # a linger no test could wait out
    await writer.start()
    try:
        now = datetime.now(UTC)
        for i in range(2):
            writer.submit(record(f"str_a{i}", created_at=now))
            await asyncio.sleep(0)  # a turn for the writer: it takes the first and lingers (or takes both)
        await asyncio.wait_for(writer.flush(), 60)  # would hang for an hour if flush waited out the linger
        for i in range(4):  # a full batch queued: written without a flush, the rest lingers
            writer.submit(record(f"str_b{i}", created_at=now))

        while sum(store.batches) < 5:
            store.wrote.clear()
            await asyncio.wait_for(store.wrote.wait(), 60)
        assert store.batches == [2, 3]
        await asyncio.wait_for(writer.flush(), 60)
        assert store.batches == [2, 3, 1]
        assert len((await store.list(RunQuery(limit=10))).runs) == 6
    finally:
        await writer.aclose()
