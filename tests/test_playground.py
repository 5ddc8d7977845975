"""The playground (GET /) in a real browser: headless system Chromium driven by Playwright.

The gateway runs under uvicorn on loopback (a free port, in a thread) on the mock provider.
Never a browser download: Chromium is the system's (Debian's `chromium`, or FOUNDRY_CHROMIUM).
Without it these tests skip locally and fail under CI=true. Each test saves a screenshot to
artifacts/playwright/ (gitignored).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

try:
    from playwright.sync_api import expect, sync_playwright

    HAVE_PLAYWRIGHT = True
except ImportError:  # skipped (or failed under CI) by the `browser` fixture
    HAVE_PLAYWRIGHT = False

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
from app.providers.mock import scenario_chunks
from app.settings import Settings
from tests.fakes import FakeAdapter
from tests.support import REPO
from tests.test_content_parts import PNG

ARTIFACTS = REPO / "artifacts" / "playwright"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WAIT_MS = 20_000  # a guard for waits on the page, not a timing assertion
HOSTILE_RESULT = '<img src=x onerror="window.__pwned=4">sunny'
# `fake/*`: a provider that thinks, runs a server tool (whose output carries HTML) and answers.
THINKING_SCRIPT = [
    [ReasoningDelta(text="Let me think <b>hard</b>.")],
    [ReasoningDelta(text=" The user wants the weather."), ReasoningEnd()],
    [ToolStart(key="s", id="srv_1", name="web_search", server=True), ToolDelta(key="s", fragment='{"q": ')],
    [ToolDelta(key="s", fragment='"weather"}'), ToolEnd(key="s")],
    [ToolResultStart(key="r", tool_call_id="srv_1", name="web_search"),
     ToolResultDelta(key="r", content=HOSTILE_RESULT), ToolResultEnd(key="r")],
    [TextDelta(text="It is sunny.")],
    [MessageDelta(stop_reason="stop"), MessageEnd()],
]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser tests cannot run under CI=true: {reason}")
    pytest.skip(reason)


def _chromium() -> str | None:
    configured = os.environ.get("FOUNDRY_CHROMIUM")
    if configured:
        return configured if Path(configured).exists() else None
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not HAVE_PLAYWRIGHT:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    path = _chromium()
    if path is None:
        _unavailable("no system Chromium found (apt-get install chromium, or set FOUNDRY_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class DropOnce:
    """ASGI wrapper: once armed, the next subscription (GET /v1/stream/{id}) is cut right after
    the frame with id `keep`, as a network drop would, so the browser has to reconnect by itself.
    Cut by frame id, not by writes: a late subscriber gets the replay in one write."""

    def __init__(self, app: Any, keep: int = 6) -> None:
        self.app = app
        self.frame_start = re.compile(rb"(?:^|\n)id: %d\n" % keep)
        self.armed = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if not (self.armed.is_set() and scope["type"] == "http" and scope["method"] == "GET"
                and path.startswith("/v1/stream/") and not path.endswith("/transcript")):
            await self.app(scope, receive, send)
            return
        self.armed.clear()
        dropped = False

        async def cut(message: Any) -> None:
            nonlocal dropped
            if dropped:
                raise OSError("connection dropped by the test")
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            found = self.frame_start.search(body)
            if found is None:
                await send(message)
                return
            end = body.index(b"\n\n", found.end()) + 2
            await send({"type": "http.response.body", "body": body[:end], "more_body": False})
            dropped = True
            raise OSError("connection dropped by the test")

        await self.app(scope, receive, cut)


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, Any, DropOnce]]:
    """The gateway under uvicorn in a thread (its own event loop), so Playwright's sync API can
    drive the browser from the test. The socket listens before the server starts."""
    app = create_app(Settings(), adapters={"fake": FakeAdapter(THINKING_SCRIPT)})
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    dropper = DropOnce(app)
    server = uvicorn.Server(uvicorn.Config(dropper, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app, dropper
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def page(browser: Any, gateway: tuple[str, Any, DropOnce], request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page on the playground; fails the test on any script error; saves a screenshot."""
    viewport = getattr(request, "param", None) or {"width": 1280, "height": 1000}
    context = browser.new_context(base_url=gateway[0], viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/")
    page.wait_for_selector("html[data-ready=true]")
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        context.close()
    assert not errors, f"script errors on the page: {errors}"


def _send(page: Any, model: str, prompt: str, *, delay_ms: int | None = None) -> None:
    page.fill("#model", model)
    page.fill("#prompt", prompt)
    if delay_ms is not None:
        page.click("#options summary")
        page.fill("#delay-ms", str(delay_ms))
    page.click("#send")


def _final_status(page: Any) -> str:
    expect(page.locator("#final")).to_have_attribute("data-status", re.compile(".+"))
    return page.text_content("#f-status")


def _frame_ids(page: Any) -> list[int]:
    return [int(n) for n in re.findall(r"^id: (\d+)$", page.text_content("#frames"), re.M)]


def _lorem(n: int) -> str:
    return "".join(p.text for chunk in scenario_chunks(f"lorem-{n}") for p in chunk if isinstance(p, TextDelta))


def test_tool_call_shows_the_call_its_result_and_the_answer(page: Any) -> None:
    _send(page, "mock/tool_call", "What is 2+2?")
    assert _final_status(page) == "ok"
    card = page.locator("#turn .tool")
    assert card.count() == 1
    assert card.locator(".tool-name").text_content() == "calculator"
    assert card.locator(".frag").all_text_contents() == ['{"expression": ', '"2 + 2"}']
    assert '"expression": "2 + 2"' in card.locator(".args").text_content()
    assert card.locator(".result").text_content() == "4"
    assert card.locator(".ran-by").text_content() == "gateway"
    assert card.locator(".event-ids").text_content() == "3, 4, 5"  # two fragments, then the result
    segments = page.locator("#turn .text-segment").all_text_contents()
    assert segments == ["Calling calculator", "Sum is 4"]  # text, call, text: in arrival order
    assert page.text_content("#f-stop") == "stop"
    assert page.text_content("#f-model") == "mock/tool_call"  # as the provider reported it
    assert page.text_content("#f-steps") == "2"
    assert re.fullmatch(r"\d+ ms", page.text_content("#f-ttft"))
    assert re.fullmatch(r"\d+ ms", page.text_content("#f-duration"))
    ids = _frame_ids(page)
    assert ids == list(range(1, len(ids) + 1)) and page.text_content("#f-last-id") == str(ids[-1])
    expect(page.locator("#transcript")).to_contain_text("has_output")
    assert '"output_source": "gateway"' in page.text_content("#transcript")
    history = page.locator("#history .content").all_text_contents()
    assert history == ["What is 2+2?", "Calling calculator", "4", "Sum is 4"]


def test_validator_block_is_shown_as_blocked(page: Any) -> None:
    page.click("#options summary")
    page.check("#v-regex_deny")  # its default config denies (?i)password
    _send(page, "mock/echo", "Hello there. The password is hunter2. Bye.")
    assert _final_status(page) == "blocked"
    assert page.is_visible("#blocked")
    assert page.text_content("#blocked-validator") == "regex_deny"
    assert "password" in page.text_content("#blocked-reason").lower()
    assert page.text_content("#f-stop") == "content_filter"
    answer = page.text_content("#turn")
    assert answer.startswith("Hello there.") and "hunter2" not in answer  # the held sentence never showed
    row = page.locator("#verdicts tbody tr", has_text="regex_deny")
    assert row.locator("td").all_text_contents()[1] == "1"  # one fail
    assert page.locator("#history .content").all_text_contents() == ["Hello there. The password is hunter2. Bye."]


def test_reload_mid_stream_resumes_without_duplicates(page: Any) -> None:
    expected = _lorem(100)
    _send(page, "mock/lorem-100", "hi", delay_ms=40)
    expect(page.locator("#turn")).to_have_text(re.compile(r"^(\S+ ){8}"))
    before = page.text_content("#turn")
    stream_id = page.evaluate("JSON.parse(sessionStorage.getItem('foundry.playground.run')).streamId")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
    page.reload()
    page.wait_for_selector("html[data-ready=true]")
    assert _final_status(page) == "ok"
    after = page.text_content("#turn")
    assert before and len(before) < len(expected) and expected.startswith(before)
    assert after == expected  # nothing duplicated, nothing missing
    resumed = [u for u in requests if f"/v1/stream/{stream_id}?after=" in u]
    assert resumed and int(resumed[0].rsplit("=", 1)[1]) > 0
    assert not any(u.startswith("POST") for u in requests)  # resumed, not restarted
    ids = _frame_ids(page)
    assert ids == list(range(1, len(ids) + 1))


def test_dropped_connection_reconnects_with_last_event_id(page: Any, gateway: tuple[str, Any, DropOnce]) -> None:
    expected = _lorem(40)
    requests: list[Any] = []
    page.on("request", lambda r: requests.append(r))
    gateway[2].armed.set()
    _send(page, "mock/lorem-40", "hi", delay_ms=40)
    assert _final_status(page) == "ok"
    assert page.text_content("#turn") == expected
    subscriptions = [r.all_headers().get("last-event-id") for r in requests
                     if re.search(r"/v1/stream/[^/]+$", r.url.split("?")[0])]
    assert len(subscriptions) >= 2 and subscriptions[0] is None, subscriptions
    assert subscriptions[1] == "6"  # EventSource sent the last id it saw (the cut came after frame 6)
    ids = _frame_ids(page)
    assert ids == list(range(1, len(ids) + 1))


def test_a_long_stream_shows_all_its_text_and_its_last_frames(page: Any) -> None:
    _send(page, "mock/lorem-1500", "hi")
    assert _final_status(page) == "ok"
    assert page.text_content("#turn") == _lorem(1500)
    assert page.text_content("#frames-count") == "(last 500 of 1502)"
    assert _frame_ids(page) == list(range(1003, 1503))


def test_model_output_is_rendered_as_text(page: Any) -> None:
    attack = '<img src=x onerror="window.__pwned=1"><b>bold</b><script>window.__pwned=2</script>'
    _send(page, "mock/echo", attack)
    assert _final_status(page) == "ok"
    assert page.text_content("#turn") == attack
    assert page.locator("#turn img, #turn b, #turn script, #history img").count() == 0
    assert page.locator("#history .content").first.text_content() == attack
    expect(page.locator("#transcript")).to_contain_text("onerror")
    assert page.locator("#transcript img").count() == 0
    # an error message echoing hostile input is text too
    _send(page, "mock/<img src=x onerror=window.__pwned=3>", "hi")
    expect(page.locator("#form-error")).to_contain_text("onerror")
    assert page.locator("#form-error img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_api_key_is_sent_as_bearer_and_the_reader_reconnects(page: Any, gateway: tuple[str, Any, DropOnce]) -> None:
    # With a key the page reads the stream with fetch (EventSource cannot send headers): the
    # reader must send Authorization every time and reconnect after a drop with Last-Event-ID.
    requests: list[Any] = []
    page.on("request", lambda r: requests.append(r))
    page.fill("#api-key", "test-key-123")
    gateway[2].armed.set()
    _send(page, "mock/lorem-40", "hi", delay_ms=20)
    assert _final_status(page) == "ok"
    assert page.text_content("#turn") == _lorem(40)
    calls = [(r.method, r.url.split("?")[0], r.all_headers()) for r in requests
             if "/v1/generate" in r.url or re.search(r"/v1/stream/[^/]+$", r.url.split("?")[0])]
    assert [m for m, _, _ in calls[:3]] == ["POST", "GET", "GET"], calls
    assert all(h.get("authorization") == "Bearer test-key-123" for _, _, h in calls)
    assert [h.get("last-event-id") for _, _, h in calls[1:3]] == [None, "6"]
    assert _frame_ids(page) == list(range(1, 43))  # start, 40 tokens, final: each once


def test_stop_cancels_or_says_it_only_stopped_watching(page: Any, gateway: tuple[str, Any, DropOnce]) -> None:
    _send(page, "mock/lorem-400", "hi", delay_ms=50)
    expect(page.locator("#turn")).not_to_be_empty()
    page.click("#stop")
    # From the OpenAPI paths: FastAPI nests included routers, so app.routes does not list them.
    has_cancel = "/v1/stream/{stream_id}/cancel" in gateway[1].openapi()["paths"]
    if has_cancel:
        assert _final_status(page) == "cancelled"
    else:
        expect(page.locator("#status")).to_contain_text("Stopped watching")
        assert page.is_enabled("#send") and not page.is_enabled("#stop")
    assert len(page.text_content("#turn")) < len(_lorem(400))


@pytest.mark.parametrize("page", [{"width": 390, "height": 844}], indirect=True, ids=["phone"])
def test_phone_width_labels_and_keyboard(page: Any) -> None:
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select, textarea')]"
        ".filter(el => !el.labels.length && !el.getAttribute('aria-label')).map(el => el.id)"
    )
    assert unlabelled == []
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    for turn in (1, 2):  # the second request carries the first run's messages (tool calls included)
        page.fill("#prompt", "What is 2+2?")
        page.focus("#prompt")
        page.keyboard.press("Control+Enter")  # sends from the keyboard
        expect(page.locator("#history .msg")).to_have_count(4 * turn)  # this run's answer is in
        assert _final_status(page) == "ok"
        assert "Sum is 4" in page.text_content("#turn")
    assert page.locator("#history .msg-tool").all_text_contents()[-1].endswith("4")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scroll
    page.click("#options summary")
    page.click("#frames-lane summary")
    assert page.evaluate(CONTRAST_FAILURES) == []


# Text of every visible, enabled element against its nearest opaque background (WCAG AA: 4.5:1).
CONTRAST_FAILURES = """() => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const failures = [];
  for (const el of document.querySelectorAll("body *")) {
    const text = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!text || !el.checkVisibility() || el.closest(":disabled")) continue;
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) failures.push(`${el.tagName}#${el.id}.${el.className}: ${ratio.toFixed(2)}`);
  }
  return failures;
}"""


def test_reasoning_lane_and_a_provider_run_tool(page: Any) -> None:
    _send(page, "fake/thinker", "Weather?")
    assert _final_status(page) == "ok"
    lane = page.locator("#reasoning-lane")
    assert lane.is_visible() and lane.get_attribute("open") is None  # its own lane, collapsed
    page.focus("#reasoning-lane summary")
    page.keyboard.press("Enter")  # opens from the keyboard
    assert page.text_content("#reasoning") == "Let me think <b>hard</b>. The user wants the weather."
    assert page.locator("#reasoning b").count() == 0
    card = page.locator("#turn .tool")
    assert card.locator(".tool-name").text_content() == "web_search"
    assert card.locator(".ran-by").text_content() == "provider"
    assert card.locator(".result").text_content() == HOSTILE_RESULT  # tool output as text
    assert page.locator("#turn img").count() == 0 and page.evaluate("window.__pwned") is None
    assert page.locator("#turn .text-segment").all_text_contents() == ["It is sunny."]
    _send(page, "fake/thinker", "And tomorrow?")  # the thinking turn goes back in the conversation
    expect(page.locator("#history .msg")).to_have_count(4)
    assert _final_status(page) == "ok" and page.text_content("#form-error") == ""


def test_errors_are_shown_with_their_field_or_status(page: Any) -> None:
    page.click("#options summary")
    page.fill("#tools", "[not json")
    _send(page, "mock/simple", "hi")
    expect(page.locator("#form-error")).to_contain_text("Tools is not valid JSON")
    assert page.get_attribute("#tools", "aria-invalid") == "true"
    page.fill("#tools", "")
    page.check("#v-regex_deny")
    page.fill("#v-regex_deny-config", '{"patterns": ["("]}')
    _send(page, "mock/simple", "hi")  # the gateway refuses the pattern: the page points at its config
    expect(page.locator("#form-error")).to_contain_text("validators.0.config.patterns")
    assert page.get_attribute("#v-regex_deny-config", "aria-invalid") == "true"
    page.uncheck("#v-regex_deny")
    page.fill("#provider-options", '{"fail_after": 3}')
    _send(page, "mock/lorem-20", "hi")  # the mock breaks its stream after 3 chunks
    assert _final_status(page) == "error"
    assert page.text_content("#f-stop") == "error"
    expect(page.locator("#run-error")).to_be_visible()
    assert "upstream_disconnected" in page.text_content("#run-error")
    assert "unknown out" in page.text_content("#f-usage")  # the provider never reported its output
    assert page.locator("#history .msg-assistant").count() == 0  # a failed run adds no answer


def test_an_attached_image_is_sent_as_a_part_and_shown_in_the_conversation(page: Any) -> None:
    png = base64.b64decode(PNG)
    bodies: list[str] = []
    page.on("request", lambda r: bodies.append(r.post_data or "") if r.url.endswith("/v1/generate") else None)
    page.set_input_files("#image", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": png}])
    _send(page, "mock/echo", "What is in this image?")
    assert _final_status(page) == "ok"
    sent = json.loads(bodies[0])["messages"][-1]["content"]
    assert sent == [{"type": "text", "text": "What is in this image?"},
                    {"type": "image", "media_type": "image/png", "data": PNG}]
    shown = page.locator("#history .msg-user .part-image")
    expect(shown).to_have_count(1)
    assert shown.get_attribute("src") == f"data:image/png;base64,{PNG}"
    assert page.locator("#history .msg-user .content").first.text_content() == "What is in this image?"
    assert page.input_value("#image") == ""  # attached to that message only
    expect(page.locator("#transcript")).to_contain_text("sha256")  # the record keeps the hash, not the bytes
    assert PNG not in page.text_content("#transcript")
    page.set_input_files("#image", files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hi"}])
    expect(page.locator("#form-error")).to_contain_text("png, jpeg, gif or webp")
