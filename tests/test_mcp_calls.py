"""Every tool call through /mcp recorded durably (the `mcp_calls` table, app/records/mcp_calls.py)
and read back with GET /v1/mcp/calls: the admin every key's, a key its own, filtered and paginated;
kept across a restart; the writer bounded (a full queue drops and counts, never waits)."""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from datetime import UTC, datetime

import httpx

from app.records import RecordStore, RecordWriter
from app.records.mcp_calls import McpCall, McpCallLog, McpCallQuery
from tests.auth_support import ADMIN
from tests.records_support import database_url, postgres  # noqa: F401 - fixtures
from tests.support import HANG_GUARD
from tests.test_mcp import BASIC, TOKEN, _token  # noqa: F401 - fixture
from tests.test_mcp_endpoint import LIMITED, OTHER, gateway, rpc, session


def admin() -> dict[str, str]:
    return {"authorization": f"Bearer {ADMIN}"}


async def test_calls_through_mcp_are_recorded_and_the_admin_reads_them_across_a_restart():
    data_dir = tempfile.mkdtemp(prefix="foundry-mcp-calls-")
    async with gateway(data_dir=data_dir) as (app, url), httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as c:
        sid = await session(c, LIMITED)
        await rpc(c, LIMITED, sid, "tools/call", {"name": "basic__echo", "arguments": {"text": "hi"}})
        await rpc(c, LIMITED, sid, "tools/call", {"name": "basic__add", "arguments": {"b": 2, "a": 1}}, rid=3)
        admin_sid = await session(c, ADMIN)
        await rpc(c, ADMIN, admin_sid, "tools/call", {"name": "basic__broken", "arguments": {}})
        unknown = await rpc(c, LIMITED, sid, "tools/call", {"name": "basic__leak", "arguments": {}}, rid=4)
        assert "error" in unknown.json()  # refused before any call: nothing to record
        await app.state.mcp.journal.flush()
        mine = (await c.get("/v1/mcp/calls", headers={"authorization": f"Bearer {LIMITED}"})).json()
        assert [call["tool"] for call in mine["data"]] == ["add", "echo"]  # a key sees its own, newest first
        denied = await c.get("/v1/mcp/calls", params={"key_id": "limited"},
                             headers={"authorization": f"Bearer {OTHER}"})
        assert denied.status_code == 403 and denied.json()["error"]["field"] == "key_id"
        assert (await c.get("/v1/mcp/calls")).status_code == 401
    # The gateway stopped and a new one on the same database: the calls are durable.
    async with gateway(data_dir=data_dir) as (_, url), httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as c:
        every = (await c.get("/v1/mcp/calls", headers=admin())).json()
        assert [(x["key_id"], x["tool"], x["status"]) for x in every["data"]] == [
            ("admin", "broken", "error"), ("limited", "add", "ok"), ("limited", "echo", "ok")]
        echo = every["data"][2]
        assert echo["server"] == "basic" and echo["bytes"] > 0 and echo["duration_ms"] >= 0
        assert echo["args_sha256"] == hashlib.sha256(b'{"text":"hi"}').hexdigest()
        add = every["data"][1]
        assert add["args_sha256"] == hashlib.sha256(b'{"a":1,"b":2}').hexdigest()  # sorted keys
        assert TOKEN not in str(every)
        limited = (await c.get("/v1/mcp/calls", params={"key_id": "limited", "limit": 1}, headers=admin())).json()
        assert [x["tool"] for x in limited["data"]] == ["add"] and limited["next_cursor"]
        rest = (await c.get("/v1/mcp/calls", params={"key_id": "limited", "cursor": limited["next_cursor"]},
                            headers=admin())).json()
        assert [x["tool"] for x in rest["data"]] == ["echo"] and rest["next_cursor"] is None
        assert (await c.get("/v1/mcp/calls", params={"server": "other"}, headers=admin())).json()["data"] == []
        later = (await c.get("/v1/mcp/calls", params={"since": "2999-01-01T00:00:00Z"}, headers=admin())).json()
        assert later["data"] == []
        bad = await c.get("/v1/mcp/calls", params={"cursor": "nope"}, headers=admin())
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "cursor"
        assert (await c.get("/v1/mcp/calls", params={"since": "yesterday"}, headers=admin())).status_code == 422


async def test_with_records_off_calls_are_not_kept_and_the_listing_says_so():
    async with gateway(records=False) as (_, url), httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as c:
        sid = await session(c, LIMITED)
        called = await rpc(c, LIMITED, sid, "tools/call", {"name": "basic__echo", "arguments": {"text": "x"}})
        assert called.json()["result"]["content"][0]["text"] == "echo: x"
        off = await c.get("/v1/mcp/calls", headers=admin())
    assert off.status_code == 404 and off.json()["error"]["code"] == "records_disabled"


async def test_the_writer_is_bounded_a_full_queue_drops_and_counts_without_waiting(database_url: str):  # noqa: F811
    writer = RecordWriter(RecordStore(database_url))
    dropped: list[tuple[str, int]] = []
    journal = McpCallLog(writer, queue_size=2, on_drop=lambda reason, n: dropped.append((reason, n)))
    now = datetime.now(UTC)
    for n in range(5):  # no await in between: the writer cannot have taken any yet
        journal.submit(McpCall(id=f"c{n}", key_id="k", server="s", tool="t", args_sha256="0" * 64, status="ok",
                               duration_ms=1.0, bytes=2, created_at=now))
    assert dropped == [("mcp_queue_full", 1)] * 3
    await asyncio.wait_for(journal.flush(), HANG_GUARD)
    page = await journal.list(McpCallQuery())
    assert sorted(call.id for call in page.calls) == ["c0", "c1"]
    await journal.aclose()
    journal.submit(McpCall(id="late", key_id="k", server="s", tool="t", args_sha256="0" * 64, status="ok",
                           duration_ms=1.0, bytes=2, created_at=now))
    assert dropped[-1] == ("mcp_shutting_down", 1)
    await writer.aclose()
