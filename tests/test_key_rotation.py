"""Key rotation: POST /v1/admin/keys/{id}/rotate and `foundry-gateway keys rotate` give a key a new
secret; the old one is accepted until the overlap window ends (0: at once), the id, policy, runs
and spend stay the key's."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.auth.keys import hash_key
from app.auth.keystore import KeyStore
from app.cli import main
from app.records.store import RecordStore
from tests.auth_support import ADMIN, SIMPLE, bearer, gateway, make_key


async def _status(client, key: str) -> int:
    return (await client.post("/v1/generate", json=SIMPLE, headers=bearer(key))).status_code


async def test_rotate_gives_a_new_secret_and_the_old_one_works_for_the_overlap(database_url: str) -> None:
    async with gateway(database_url=database_url) as (app, client):
        created = await make_key(client, name="team-r", models=["mock/*"], rpm=50)
        old, key_id = created["key"], created["id"]
        response = await client.post(f"/v1/admin/keys/{key_id}/rotate", json={"overlap_seconds": 600},
                                     headers=bearer(ADMIN))
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "no-store"
        rotated = response.json()
        new = rotated["key"]
        assert new.startswith("fgw-") and new != old and rotated["id"] == key_id and rotated["rpm"] == 50
        until = datetime.fromisoformat(rotated["previous_expires_at"])
        assert timedelta(seconds=590) < until - datetime.now(UTC) <= timedelta(seconds=600)
        assert await _status(client, new) == 200 and await _status(client, old) == 200
        listed = (await client.get("/v1/admin/keys", headers=bearer(ADMIN))).json()["data"]
        assert listed[0]["previous_expires_at"] == rotated["previous_expires_at"]
        assert new not in json.dumps(listed) and old not in json.dumps(listed)
        # both secrets' runs are the one key's
        await app.state.records.flush()
        runs = (await client.get("/v1/runs", params={"key_id": key_id}, headers=bearer(ADMIN))).json()["data"]
        assert len(runs) == 2 and {r["owner"] for r in runs} == {key_id}
        # a second rotation, no overlap: only the newest secret works
        again = await client.post(f"/v1/admin/keys/{key_id}/rotate", json={"overlap_seconds": 0}, headers=bearer(ADMIN))
        newest = again.json()["key"]
        assert again.status_code == 200 and again.json()["previous_expires_at"] is None
        assert await _status(client, newest) == 200
        assert await _status(client, new) == 401 and await _status(client, old) == 401


async def test_rotate_refusals() -> None:
    configured = {"name": "ops", "hash": hash_key("fgw-" + "c" * 43), "id": "ops"}
    async with gateway(keys=[configured]) as (_, client):
        in_config = await client.post("/v1/admin/keys/ops/rotate", headers=bearer(ADMIN))
        assert in_config.status_code == 409 and in_config.json()["error"]["code"] == "key_in_config"
        created = await make_key(client, name="team-s")
        key_id = created["id"]
        for body, field in (({"overlap_seconds": -1}, "overlap_seconds"), ({"overlap_seconds": 10**9}, "overlap_seconds"),
                            ({"overlap": 5}, "overlap")):
            response = await client.post(f"/v1/admin/keys/{key_id}/rotate", json=body, headers=bearer(ADMIN))
            assert response.status_code == 422 and field in response.text
        refused = await client.post(f"/v1/admin/keys/{key_id}/rotate", headers=bearer(created["key"]))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_only"
        default = await client.post(f"/v1/admin/keys/{key_id}/rotate", headers=bearer(ADMIN))  # no body: an hour
        assert default.status_code == 200
        until = datetime.fromisoformat(default.json()["previous_expires_at"])
        assert timedelta(minutes=59) < until - datetime.now(UTC) <= timedelta(hours=1)
        assert (await client.delete(f"/v1/admin/keys/{key_id}", headers=bearer(ADMIN))).status_code == 204
        gone = await client.post(f"/v1/admin/keys/{key_id}/rotate", headers=bearer(ADMIN))
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "key_not_found"
        # a revoked key's secrets, current and previous, are both refused
        assert await _status(client, default.json()["key"]) == 401 and await _status(client, created["key"]) == 401


def test_cli_rotate(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("FOUNDRY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FOUNDRY_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "team-cli"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert main(["keys", "rotate", created["id"], "--overlap-seconds", "120"]) == 0
    out, err = capsys.readouterr()
    rotated = json.loads(out)
    assert rotated["id"] == created["id"] and rotated["key"] != created["key"] and "shown this once" in err
    assert rotated["previous_expires_at"] is not None

    async def lookup() -> list[str | None]:
        store = RecordStore(f"sqlite+aiosqlite:///{tmp_path}/foundry.db")
        try:
            keys = KeyStore(store.engine)
            found = [await keys.by_hash(hash_key(k)) for k in (created["key"], rotated["key"], "fgw-" + "x" * 43)]
            return [p.id if p is not None else None for p in found]
        finally:
            await store.aclose()

    assert asyncio.run(lookup()) == [created["id"], created["id"], None]
    assert main(["keys", "rotate", "key_nope"]) == 1
    assert main(["keys", "rotate", created["id"], "--overlap-seconds", "-5"]) == 2
    assert "no active key" in capsys.readouterr().err


async def test_the_previous_admin_key_works_beside_the_current_one_only() -> None:
    old, new = "admin-old-key-for-rotation-0123456789", "admin-new-key-for-rotation-0123456789"
    async with gateway(admin_key=new, admin_key_previous=old) as (_, client):
        for key in (new, old):
            assert (await client.get("/v1/admin/keys", headers=bearer(key))).status_code == 200
        assert (await client.get("/v1/admin/keys", headers=bearer("admin-someone-else-0123456789"))).status_code == 401
    async with gateway(admin_key=new) as (_, client):  # the rotation done: the old key is refused
        assert (await client.get("/v1/admin/keys", headers=bearer(old))).status_code == 401
    async with gateway(admin_key=None, admin_key_previous=old) as (_, client):  # alone it is no admin key
        refused = await client.get("/v1/admin/keys", headers=bearer(old))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_disabled"
