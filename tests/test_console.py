"""The admin console (GET /admin) in a real browser: headless system Chromium driven by Playwright,
as tests/test_playground.py does (never a browser download; without Chromium these tests skip
locally and fail under CI=true).

The gateway runs under uvicorn on loopback in a thread with its own event loop (so a test can
run a coroutine on it: flush the records writer, insert records directly), keys required. The
documentation's screenshots (docs/img/console-*.png) are taken here: into docs/img/ with
FOUNDRY_DOCS_SCREENSHOTS=1, else into artifacts/playwright/ (gitignored), so a test run leaves
the checkout as it was.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import uvicorn

from app.core.events import Usage
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolDelta,
    ToolEnd,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    ToolStart,
)
from app.main import create_app
from app.records import RunRecord
from app.records.tables import api_keys
from app.settings import Settings
from tests.fakes import FakeAdapter
from tests.support import REPO
from tests.test_playground import (
    CHROMIUM_ARGS,
    CONTRAST_FAILURES,
    HAVE_PLAYWRIGHT,
    WAIT_MS,
    DropOnce,
    _chromium,
    _unavailable,
)

if HAVE_PLAYWRIGHT:
    from playwright.sync_api import expect, sync_playwright

ADMIN = "console-admin-key-for-tests-0123456789"
SHOTS = REPO / "docs" / "img" if os.environ.get("FOUNDRY_DOCS_SCREENSHOTS") == "1" else REPO / "artifacts" / "playwright"
AXE = REPO / "tests" / "vendor" / "axe.min.js"
HOSTILE_TOOL_OUTPUT = '<img src=x onerror="window.__pwned=1">sunny'
# `fake/*`: thinks, runs a provider-side tool (HTML in its output), answers, then says what a
# regex_deny validator blocks.
THINK_TOOL_BLOCK = [
    [ReasoningDelta(text="The user wants the weather.")],
    [ReasoningDelta(text=" I will search first."), ReasoningEnd()],
    [ToolStart(key="s", id="srv_1", name="web_search", server=True), ToolDelta(key="s", fragment='{"q": ')],
    [ToolDelta(key="s", fragment='"weather"}'), ToolEnd(key="s")],
    [ToolResultStart(key="r", tool_call_id="srv_1", name="web_search"),
     ToolResultDelta(key="r", content=HOSTILE_TOOL_OUTPUT), ToolResultEnd(key="r")],
    [TextDelta(text="It is sunny. ")],
    [TextDelta(text="The password is hunter2.")],
    [MessageDelta(stop_reason="stop"), MessageEnd()],
]
HOLD_WORDS = [f"word{i} " for i in range(12)]
# `hold/*`: twelve tokens, then nothing until cancelled: a run that is still running.
HOLD = [[TextDelta(text=w)] for w in HOLD_WORDS]
PAGES = ("keys", "runs", "spend", "health")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium (or FOUNDRY_CHROMIUM), as the playground's tests find it."""
    if not HAVE_PLAYWRIGHT:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    path = _chromium()
    if path is None:
        _unavailable("no system Chromium found (apt-get install chromium, or set FOUNDRY_CHROMIUM)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@dataclass
class Console:
    url: str
    app: Any
    loop: asyncio.AbstractEventLoop
    dropper: DropOnce
    http: httpx.Client

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the gateway's own loop (its database engine lives there)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def flush(self) -> None:
        self.call(self.app.state.records.flush())

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, headers={"Authorization": f"Bearer {ADMIN}"}, **kwargs)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    data = tmp_path_factory.mktemp("console")
    app = create_app(Settings(admin_key=ADMIN, data_dir=str(data)),
                     adapters={"fake": FakeAdapter(THINK_TOOL_BLOCK), "hold": FakeAdapter(HOLD, block=True, name="hold")})
    dropper = DropOnce(app, keep=6)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(dropper, log_level="warning", access_log=False, lifespan="on"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/healthz").status_code == 200  # served: the lifespan ran (the kernel queued us)
        try:
            yield Console(url=url, app=app, loop=loop, dropper=dropper, http=http)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            loop.close()
            sock.close()


def _open(browser: Any, console: Console, viewport: dict[str, int] | None = None, *, signed_in: bool = True,
          bypass_csp: bool = False) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(base_url=console.url, viewport=viewport or {"width": 1280, "height": 800},
                                  bypass_csp=bypass_csp)
    if signed_in:  # as the sign-in form leaves it (test_sign_in covers the form itself)
        context.add_init_script(f"sessionStorage.setItem('foundry.console.admin_key', {json.dumps(ADMIN)})")
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, errors


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    context, page, errors = _open(browser, console)
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"script errors on the page: {errors}"


def _goto(page: Any, route: str) -> None:
    page.goto(f"/admin#/{route}")
    page.wait_for_selector("html[data-ready=true]")
    expect(page.locator("#page")).to_have_attribute("data-loaded", "true")


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _run(console: Console, body: dict[str, Any]) -> dict[str, Any]:
    response = console.admin("POST", "/v1/generate", json=body)
    assert response.status_code == (202 if body.get("stream") else 200), response.text  # 202: started, not awaited
    return response.json()


def _record(i: int, *, model: str, at: datetime, owner: str | None = None, cost: float = 0.001,
            transcript: dict[str, Any] | None = None) -> RunRecord:
    return RunRecord(
        stream_id=f"str_bulk_{i:06d}", request_id=None, owner=owner, created_at=at, finished_at=at + timedelta(seconds=2),
        model=model, served_model=model, provider=model.split("/")[0], status="ok", stop_reason="stop", error_code=None,
        usage=Usage(input_tokens=100, output_tokens=40, total_tokens=140, cache_read_tokens=10, cache_write_tokens=5,
                    reasoning_tokens=7, cost_usd=cost),
        steps=1, tools_run=0, validation=None, ttft_ms=120.0, duration_ms=2000.0, content_recorded=True,
        cost_usd=cost, transcript=transcript)


# -- sign-in and the page itself --------------------------------------------------------------------


def test_console_headers_and_links_both_ways(console: Console) -> None:
    page = console.http.get("/admin")
    csp = page.headers["content-security-policy"]
    assert page.status_code == 200 and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "unsafe-eval" not in csp and "frame-ancestors 'none'" in csp
    assert 'href="/"' in page.text  # to the playground
    assert 'href="/admin"' in console.http.get("/").text  # and back
    for asset in ("console.js", "api.js", "dom.js", "keys.js", "runs.js", "run.js", "spend.js", "health.js", "console.css"):
        assert console.http.get(f"/web/admin/{asset}").status_code == 200, asset


def test_sign_in_only_with_the_admin_key_kept_in_session_storage(browser: Any, console: Console) -> None:
    key = console.admin("POST", "/v1/admin/keys", json={"name": "signin-test"}).json()["key"]
    context, page, errors = _open(browser, console, signed_in=False)
    try:
        page.goto("/admin")
        page.wait_for_selector("html[data-ready=true]")
        expect(page.locator("#signin-panel")).to_be_visible()
        page.fill("#admin-key", key)  # a gateway key: refused, as documented
        page.click("#signin-button")
        expect(page.locator("#signin-error")).to_contain_text("not the admin key")
        page.fill("#admin-key", "fgw-" + "x" * 43)
        page.click("#signin-button")
        expect(page.locator("#signin-error")).to_contain_text("401")
        assert page.evaluate("sessionStorage.length") == 0
        page.fill("#admin-key", ADMIN)
        page.keyboard.press("Enter")
        expect(page.locator("#keys-title")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('foundry.console.admin_key')") == ADMIN
        assert page.evaluate("localStorage.length") == 0 and page.evaluate("document.cookie") == ""
        assert ADMIN not in page.url and page.input_value("#admin-key") == ""
        page.reload()  # the tab keeps it
        expect(page.locator("#keys-title")).to_be_visible()
        page.click("#sign-out")
        expect(page.locator("#signin-panel")).to_be_visible()
        assert page.evaluate("sessionStorage.length") == 0
    finally:
        context.close()
    assert not errors


# -- keys -------------------------------------------------------------------------------------------


def test_keys_create_copy_edit_rotate_revoke_and_expired(browser: Any, console: Console) -> None:
    context, page, errors = _open(browser, console)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    try:
        _goto(page, "keys")
        page.fill("#create-name", "team-console")
        page.fill("#create-models", "mock/*, fake/*")
        page.fill("#create-rpm", "120")
        page.click("#create-button")
        secret = page.text_content("#new-secret")
        assert secret.startswith("fgw-") and len(secret) == 47
        page.click("#copy-secret")
        assert page.evaluate("navigator.clipboard.readText()") == secret
        simple = {"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}
        assert console.http.post("/v1/generate", json=simple, headers={"Authorization": f"Bearer {secret}"}).status_code == 200
        row = page.locator("#keys-table tr", has_text="team-console")
        expect(row).to_contain_text("rpm 120")
        expect(row).to_contain_text("mock/*, fake/*")
        key_id = row.locator("td").first.text_content()
        _shot(page, "console-keys")

        row.locator("[data-action=edit]").click()  # edit limits
        page.fill("#edit-tpm", "5000")
        page.fill("#edit-rpm", "")
        page.click("#edit-form button[type=submit]")
        expect(row).to_contain_text("tpm 5000")
        expect(row).not_to_contain_text("rpm 120")
        assert console.admin("GET", f"/v1/admin/keys/{key_id}").json()["rpm"] is None

        row.locator("[data-action=rotate]").click()
        page.fill("#rotate-overlap", "600")
        page.click("#rotate-form button[type=submit]")
        expect(page.locator("#new-secret")).not_to_have_text(secret)
        rotated = page.text_content("#new-secret")
        expect(row).to_contain_text("old secret until")
        for k in (secret, rotated):  # both work during the overlap
            assert console.http.post("/v1/generate", json=simple, headers={"Authorization": f"Bearer {k}"}).status_code == 200

        revoke = row.locator("[data-action=revoke]")
        revoke.click()
        expect(revoke).to_have_text("Confirm revoke")
        revoke.click()
        expect(row.locator(".badge")).to_have_text("revoked")
        for k in (secret, rotated):
            assert console.http.post("/v1/generate", json=simple, headers={"Authorization": f"Bearer {k}"}).status_code == 401

        # an expiry already past (set in the database: how a key ages) is shown as expired
        other = console.admin("POST", "/v1/admin/keys", json={"name": "team-aged"}).json()
        past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
        engine = console.app.state.records.store.engine

        async def age() -> None:
            async with engine.begin() as conn:
                await conn.execute(sa.update(api_keys).where(api_keys.c.id == other["id"]).values(policy={"expires_at": past}))

        console.call(age())
        console.app.state.auth.forget()
        page.reload()
        expect(page.locator("#keys-table tr", has_text="team-aged").locator(".badge")).to_have_text("expired")
    finally:
        context.close()
    assert not errors


# -- runs -------------------------------------------------------------------------------------------


def test_run_redisplay_reasoning_tool_calls_validator_block_attempts_and_usage(page: Any, console: Console) -> None:
    final = _run(console, {"model": "fake/thinker", "messages": [{"role": "user", "content": "Weather?"}],
                           "validators": [{"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]})
    assert final["status"] == "blocked"
    console.flush()
    _goto(page, "runs")
    page.select_option("#f-status", "blocked")
    page.click("#runs-filter button[type=submit]")
    link = page.locator("#runs-table a", has_text="str_").first
    expect(page.locator("#runs-table")).to_have_attribute("data-rows", "1")
    expect(page.locator("#runs-table tbody tr")).to_contain_text("fake/thinker")
    link.click()
    expect(page.locator("#run-title")).to_be_visible()
    expect(page.locator("#page")).to_have_attribute("data-status", "blocked")
    turns = page.locator("#turns > li")
    kinds = [c.split()[0] for c in turns.evaluate_all("els => els.map(e => e.className)")]
    assert kinds == ["k-request", "k-thinking", "k-tool_call", "k-tool_output", "k-response"]
    reasoning = page.locator("details.reasoning")
    assert reasoning.get_attribute("open") is None  # collapsed, apart from the answer
    assert "The user wants the weather. I will search first." in reasoning.text_content()
    expect(turns.nth(2)).to_contain_text("web_search")
    expect(turns.nth(2)).to_contain_text('"q": "weather"')
    expect(turns.nth(2)).to_contain_text("run by the provider")
    expect(turns.nth(3)).to_contain_text(HOSTILE_TOOL_OUTPUT)  # as text
    assert page.locator("#page img").count() == 0 and page.evaluate("window.__pwned") is None
    expect(turns.nth(4)).to_have_text("step 1 · answerIt is sunny. ")
    assert "hunter2" not in page.text_content("#run-conversation")  # held and dropped
    expect(page.locator("#blocked")).to_contain_text("regex_deny")
    expect(page.locator("#blocked")).to_contain_text("password")
    expect(page.locator("#run-validation tbody tr", has_text="regex_deny")).to_contain_text("1")
    attempts = page.locator("#run-attempts tbody tr")
    expect(attempts).to_have_count(1)
    expect(attempts.first).to_contain_text("fake/thinker")
    expect(attempts.first).to_contain_text(" ms")
    expect(page.locator("#run-tools tbody tr")).to_have_count(1)
    expect(page.locator("#run-usage")).to_contain_text("Cost")
    _shot(page, "console-run")


def test_gateway_tool_call_in_order_with_its_result(page: Any, console: Console) -> None:
    final = _run(console, {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}]})
    console.flush()
    run_id = console.admin("GET", "/v1/runs", params={"model": "mock/tool_call"}).json()["data"][0]["id"]
    assert final["status"] == "ok"
    _goto(page, f"runs/{run_id}")
    turns = page.locator("#turns > li")
    expect(turns).to_have_count(5)
    texts = turns.all_text_contents()
    assert "Calling calculator" in texts[1] and "calculator" in texts[2] and '"expression": "2 + 2"' in texts[2]
    assert "run by the gateway" in texts[2] and texts[3].endswith("4") and texts[4].endswith("Sum is 4")


def test_live_follow_resumes_after_a_dropped_connection(page: Any, console: Console) -> None:
    started = _run(console, {"model": "hold/slow", "messages": [{"role": "user", "content": "go"}], "stream": True})
    stream_id = started["stream_id"]
    _goto(page, "runs")  # running, not recorded yet: listed apart
    link = page.locator(f"#running a[href='#/runs/{stream_id}']")
    expect(link).to_be_visible()
    console.dropper.armed.set()  # the console's subscription is cut after event 6: it must resume
    link.click()
    expect(page.locator("#page")).to_have_attribute("data-live", "true")
    expect(page.locator("#live-answer")).to_have_text("".join(HOLD_WORDS))
    expect(page.locator("#page")).to_have_attribute("data-reconnects", "1")
    assert page.locator("#live-answer").text_content() == "".join(HOLD_WORDS)  # nothing twice
    _shot(page, "console-live")
    cancelled = console.admin("POST", f"/v1/stream/{stream_id}/cancel")
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled"), cancelled.text
    expect(page.locator("#page")).to_have_attribute("data-live", "ended")
    expect(page.locator("#page")).to_have_attribute("data-status", "cancelled")
    expect(page.locator("#turns")).to_contain_text("word11")


def test_hostile_transcript_renders_as_text(page: Any, console: Console) -> None:
    hostile = ('<img src=x onerror="window.__pwned=2"> <script>window.__pwned=3</script> '
               '<a href="javascript:window.__pwned=4">click</a> javascript:alert(1) '
               '\u202eevil\u202c \u2066isolated\u2069 ' + "A" * 60_000)
    _run(console, {"model": "mock/echo", "messages": [{"role": "user", "content": hostile}]})
    console.flush()
    run_id = console.admin("GET", "/v1/runs", params={"model": "mock/echo"}).json()["data"][0]["id"]
    _goto(page, f"runs/{run_id}")
    conversation = page.locator("#run-conversation")
    expect(conversation).to_contain_text('<img src=x onerror="window.__pwned=2">')
    expect(conversation).to_contain_text("<script>window.__pwned=3</script>")
    expect(conversation).to_contain_text("[U+202E]evil[U+202C]")  # bidi controls shown, not obeyed
    assert page.locator("#page img, #page script, #page a[href^='javascript']").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # a huge word wraps
    expect(page.locator("#run-conversation button", has_text="Show all")).to_have_count(2)  # request and answer


# -- large data -------------------------------------------------------------------------------------


def test_ten_thousand_runs_paged_by_the_gateway(page: Any, console: Console) -> None:
    start = datetime.now(UTC) - timedelta(days=3)
    records = [_record(i, model=f"bulk/m{i % 7}", at=start + timedelta(seconds=i)) for i in range(10_000)]
    for n in range(0, len(records), 1000):
        console.call(console.app.state.records.store.insert(records[n:n + 1000]))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/v1/runs" in r.url else None)
    _goto(page, "runs")
    table = page.locator("#runs-table")
    expect(table).to_have_attribute("data-rows", "50")
    first = page.locator("#runs-table tbody tr").first.text_content()
    for n in (2, 3):
        page.click("#runs-next")
        expect(table).to_have_attribute("data-page", str(n))
    expect(table).to_have_attribute("data-rows", "50")
    assert page.locator("#runs-table tbody tr").first.text_content() != first
    page.click("#runs-prev")
    expect(table).to_have_attribute("data-page", "2")
    listed = [u for u in requests if "/v1/runs?" in u or u.endswith("/v1/runs")]
    assert sum("cursor=" in u for u in listed) >= 3  # each page asked of the gateway, by cursor
    page.fill("#f-model", "bulk/m3")
    page.select_option("#f-limit", "200")
    page.click("#runs-filter button[type=submit]")
    expect(table).to_have_attribute("data-rows", "200")
    assert set(page.locator("#runs-table tbody tr td:nth-child(4)").all_text_contents()) == {"bulk/m3"}
    assert page.locator("#runs-table tbody tr").count() == 200  # never more than a page in the tab


def test_a_two_megabyte_transcript_renders(page: Any, console: Console, capsys: pytest.CaptureFixture[str]) -> None:
    answer = ("lorem ipsum dolor sit amet " * 80_000)[:2_000_000]
    calls = [{"id": f"call_{i}", "name": "lookup", "state": "has_output", "step": 1, "origin": "stream", "server": False,
              "gateway": True, "input": {"i": i}, "fragments": [], "fragment_count": 1, "output": f"result {i}",
              "is_error": False, "output_source": "gateway", "created_at": 1.0, "completed_at": 1.0, "output_at": 1.0}
             for i in range(200)]
    transcript = {"stream_id": "str_big_0001", "model": "bulk/big", "provider": "bulk", "created_at": 1.0, "status": "ok",
                  "stop_reason": "stop", "steps": 1, "usage": {}, "request_messages": [{"role": "user", "content": "all"}],
                  "reasoning_messages": [{"id": "msg_1", "type": "thinking", "step": 1, "turn": 1, "content": "x" * 200_000,
                                          "timestamp": 1.0}],
                  "response_messages": [{"id": "msg_2", "type": "response", "step": 1, "turn": 1, "content": answer,
                                         "timestamp": 2.0}],
                  "tool_calls": calls, "unmatched_outputs": [], "truncated": False, "content_recorded": True}
    record = _record(999_999, model="bulk/big", at=datetime.now(UTC), transcript=transcript)
    record.stream_id = "str_big_0001"
    console.call(console.app.state.records.store.insert([record]))
    _goto(page, "runs/str_big_0001")
    expect(page.locator("#run-title")).to_be_visible()
    render_ms = int(page.get_attribute("#page", "data-render-ms"))
    show = page.locator("#turns button", has_text="Show all 2,000,000 characters")
    shown_ms = page.evaluate("""() => {
      const t = performance.now();
      [...document.querySelectorAll('#turns button')].find(b => b.textContent.includes('2,000,000')).click();
      document.body.offsetHeight;  // the layout of the 2 MB text node included
      return performance.now() - t;
    }""")
    expect(show).to_have_count(0)
    end_ms = page.evaluate("""() => {
      const t = performance.now();
      [...document.querySelectorAll('#turns .chunk')].at(-1).scrollIntoView();
      document.body.offsetHeight;
      return performance.now() - t;
    }""")
    assert page.evaluate("Math.max(...[...document.querySelectorAll('#turns .data')].map(e => e.textContent.length))") \
        == 2_000_000
    expect(page.locator("#run-tools tbody tr")).to_have_count(200)
    with capsys.disabled():  # measured, reported, not asserted (timings go in notes, not tests)
        print(f"\n2 MB transcript: first render {render_ms} ms, full answer shown in {shown_ms:.0f} ms, "
              f"scrolled to its end in {end_ms:.0f} ms")


# -- spend and health -------------------------------------------------------------------------------


def test_spend_chart_table_and_csv(page: Any, console: Console, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(hour=12)
    records = [_record(500_000 + i, model=["spend/a", "spend/b"][i % 2], owner=["key_team1", "key_team2"][i % 3 % 2],
                       at=now - timedelta(days=i % 5), cost=0.25) for i in range(20)]
    records.append(_record(500_100, model='=HYPERLINK("http://x")', owner="key_team1", at=now, cost=0.5))
    console.call(console.app.state.records.store.insert(records))
    _goto(page, "spend")
    page.fill("#s-key", "key_team1")
    page.click("#spend-form button[type=submit]")
    expect(page.locator("#spend-out")).to_have_attribute("data-key-id", "key_team1")
    expect(page.locator("#spend-chart rect").first).to_be_visible()
    rows = page.locator("#spend-out tbody tr")
    assert set(rows.locator("td:nth-child(2)").all_text_contents()) == {"key_team1"}
    page.select_option("#s-bucket", "month")
    page.select_option("#s-split", "model")
    page.click("#spend-form button[type=submit]")
    expect(page.locator("#spend-out")).to_have_attribute("data-bucket", "month")
    expect(page.locator(".legend li")).to_have_text(['=HYPERLINK("http://x")', "spend/a", "spend/b"])
    with page.expect_download() as download:
        page.click("#spend-csv")
    path = tmp_path / "spend.csv"
    download.value.save_as(path)
    table = list(csv.DictReader(io.StringIO(path.read_text())))
    assert table and {r["key_id"] for r in table} == {"key_team1"}
    expected = sum(r.cost_usd or 0 for r in records if r.owner == "key_team1")
    assert abs(sum(float(r["cost_usd"]) for r in table) - expected) < 1e-6
    assert {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"} <= set(table[0])
    assert "'=HYPERLINK(\"http://x\")" in {r["model"] for r in table}  # never run as a formula
    page.fill("#s-key", "")
    page.select_option("#s-bucket", "day")
    page.select_option("#s-split", "key")
    page.click("#spend-form button[type=submit]")
    expect(page.locator("#spend-out")).to_have_attribute("data-key-id", "")
    expect(page.locator("#spend-chart")).to_be_visible()
    _shot(page, "console-spend")


def test_health_providers_breakers_and_active_runs(page: Any, console: Console) -> None:
    stream_id = _run(console, {"model": "hold/health", "messages": [{"role": "user", "content": "go"}],
                               "stream": True})["stream_id"]
    try:
        _goto(page, "health")
        providers = page.locator("#providers-title + .table-wrap tbody tr")
        expect(providers.filter(has_text="mock")).to_contain_text("served")
        expect(providers.filter(has_text="openai-responses")).to_contain_text("OPENAI_API_KEY")
        expect(page.locator("#active-title")).to_be_visible()
        link = page.locator(f"a[href='#/runs/{stream_id}']")
        expect(link).to_be_visible()
        _shot(page, "console-health")
        link.click()
        expect(page.locator("#live-answer")).to_have_text("".join(HOLD_WORDS))
    finally:
        console.admin("POST", f"/v1/stream/{stream_id}/cancel")


# -- viewports, keyboard, accessibility --------------------------------------------------------------


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}],
                         ids=["desktop", "phone"])
def test_every_page_fits_is_labelled_and_keyboard_reachable(browser: Any, console: Console,
                                                            viewport: dict[str, int]) -> None:
    context, page, errors = _open(browser, console, viewport)
    try:
        for name in PAGES:
            _goto(page, name)
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), name
            unlabelled = page.evaluate("[...document.querySelectorAll('input, select, textarea')]"
                                       ".filter(el => !el.labels.length && !el.getAttribute('aria-label')).map(el => el.id)")
            assert unlabelled == [], name
            assert page.evaluate(CONTRAST_FAILURES) == [], name
            if viewport["width"] < 500 and name == "keys":
                _shot(page, "console-phone")
        _goto(page, "keys")
        reached = []
        for _ in range(8):  # Tab from the top reaches every page of the console
            page.keyboard.press("Tab")
            reached.append(page.evaluate("document.activeElement.textContent.trim()"))
        assert {"Playground", "Keys", "Runs", "Spend", "Health"} <= set(reached)
        page.keyboard.press("Tab")
        page.focus("#nav a[data-page=runs]")
        page.keyboard.press("Enter")
        expect(page.locator("#runs-title")).to_be_visible()
    finally:
        context.close()
    assert not errors


def test_axe_finds_no_serious_violations(browser: Any, console: Console) -> None:
    if not AXE.exists():
        pytest.fail("tests/vendor/axe.min.js is missing: run scripts/vendor_axe.sh")
    final = _run(console, {"model": "fake/axe", "messages": [{"role": "user", "content": "Weather?"}]})
    console.flush()
    run_id = console.admin("GET", "/v1/runs", params={"model": "fake/axe"}).json()["data"][0]["id"]
    assert final["status"] == "ok"
    routes = [*PAGES, f"runs/{run_id}"]
    # axe is injected as a script of the test's own: the context bypasses the page's CSP for that only
    context, page, errors = _open(browser, console, bypass_csp=True)
    try:
        found = {}
        for route in routes:
            _goto(page, route)
            page.add_script_tag(content=AXE.read_text())
            result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
            found[route] = [f"{v['id']} ({v['impact']}): {v['help']} ({len(v['nodes'])})" for v in result["violations"]]
        serious = {route: [v for v in found[route] if "(serious)" in v or "(critical)" in v] for route in routes}
        assert serious == {route: [] for route in routes}
        assert found == {route: [] for route in routes}  # nor any lesser one, today
    finally:
        context.close()
    assert not errors
