"""Every route but the public probes refuses a request without a key (401), before anything else
about the request is checked. Routes name the caller's dependency themselves (no router carries
it, app/api/access.py): a route added without one would serve anyone, and this test would fail."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from app.main import create_app
from app.settings import Settings

PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}


def _operations(app: object) -> list[tuple[str, str]]:
    doc = app.openapi()  # type: ignore[attr-defined]
    return sorted((method.upper(), path) for path, ops in doc["paths"].items() for method in ops)


async def test_every_route_but_the_probes_answers_401_without_a_key(tmp_path):
    app = create_app(Settings(admin_key="admin-secret-for-tests-0123456789", records=False, data_dir=str(tmp_path)))
    operations = _operations(app)
    assert len(operations) > 20 and PUBLIC <= set(operations)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        for method, path in operations:
            if (method, path) in PUBLIC:
                continue
            url = re.sub(r"\{[^}]+\}", "x1", path)
            # a body of the wrong type: the 415 of a JSON route comes after the 401
            response = await client.request(method, url, content=json.dumps({}),
                                             headers={"content-type": "text/plain"})
            assert response.status_code == 401, (method, path, response.status_code, response.text)


def test_the_probes_take_no_key(tmp_path):
    app = create_app(Settings(admin_key="admin-secret-for-tests-0123456789", records=False, data_dir=str(tmp_path)))
    doc = app.openapi()
    for method, path in PUBLIC:
        assert "security" not in doc["paths"][path][method.lower()]


@pytest.fixture(autouse=True)
def _no_env_settings(monkeypatch):
    for name in ("FOUNDRY_REDIS_URL", "FOUNDRY_AUTH"):
        monkeypatch.delenv(name, raising=False)
