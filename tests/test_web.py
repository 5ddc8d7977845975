"""The playground's files over HTTP (no browser): GET / and /web/ assets, self-contained, text only."""

import re

import httpx
import pytest

from app.api.routes.web import WEB_DIR
from app.main import create_app
from app.settings import Settings


@pytest.fixture
async def client():
    app = create_app(Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        yield c


async def test_root_serves_the_page_with_a_strict_policy(client):
    r = await client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/web/main.js">' in r.text
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"


async def test_every_asset_the_page_names_is_served(client):
    page = (await client.get("/")).text
    scripts = {p.name: p.read_text() for p in WEB_DIR.glob("*.js")}
    named = set(re.findall(r'(?:src|href)="(/web/[^"]+)"', page))
    named |= {f"/web/{m}" for text in scripts.values() for m in re.findall(r'from "\./([^"]+)"', text)}
    assert {"/web/main.js", "/web/playground.css", "/web/state.js", "/web/stream.js", "/web/view.js"} <= named
    for path in named:
        r = await client.get(path)
        assert r.status_code == 200, path
        expected = "text/css" if path.endswith(".css") else "text/javascript"
        assert r.headers["content-type"].startswith(expected), path
        assert r.headers["cache-control"] == "no-cache" and r.headers["x-content-type-options"] == "nosniff"
        again = await client.get(path, headers={"if-none-match": r.headers["etag"]})
        assert again.status_code == 304, path
    assert (await client.get("/web/nope.js")).status_code == 404


def test_the_page_needs_no_other_origin_and_never_writes_html():
    for path in (p for p in WEB_DIR.rglob("*") if p.is_file()):  # the console's files (web/admin/) too
        text = path.read_text().replace('"http://www.w3.org/2000/svg"', "")  # a namespace, not a fetch
        assert not re.search(r"https?://", text), f"{path.name} names another origin (no CDN)"
        if path.suffix == ".js":  # model, tool and error text goes in as text only
            assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", text), path.name


async def test_the_page_is_not_part_of_the_api_document(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert "/" not in paths and not any(p.startswith("/web") for p in paths)
