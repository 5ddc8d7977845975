"""The `llm_judge` is a model call like any other (issue 24, finding 1): its model must be allowed
by the caller's key (403 at the edge, before any call), its calls are billed (tpm, budget,
`final.validation.judge`, the run record, GET /v1/usage), capped per run, run concurrently up to a
bound, and a failed judge check never carries more than a short reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.settings import CompatibleProvider
from app.validation import VALIDATORS, Validator, Verdict
from app.validation.validators.base import CheckContext
from tests.auth_support import ADMIN, bearer, gateway, make_key
from tests.support import get_until, parse_sse, read_asgi_request, serve
from tests.validation_support import drive, make_gate, spec, text_of, tokens

HELLO = [{"role": "user", "content": "Hello"}]


def judge(model: str, **config: Any) -> dict[str, Any]:
    return {"name": "llm_judge", "config": {"model": model, "policy": "What is the capital of France?", **config}}


class JudgeServer:
    """An OpenAI-compatible judge on loopback: answers PASS (with usage), or `status` with an error
    body of `message`. `hold_until`: the first requests are held until that many are in flight at
    once (a judge called one at a time would wait forever); `peak` is the most seen at once."""

    def __init__(self, *, status: int = 200, message: str = "", hold_until: int = 0) -> None:
        self.status, self.message = status, message
        self.hold_until = hold_until
        self.calls = self.in_flight = self.peak = 0
        self.together = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if await read_asgi_request(scope, receive, send) is None:
            return
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.in_flight >= self.hold_until:
                self.together.set()
            await self.together.wait()
            await self._answer(send)
        finally:
            self.in_flight -= 1

    async def _answer(self, send: Any) -> None:
        if self.status != 200:
            body = json.dumps({"error": {"message": self.message, "type": "invalid_request_error"}}).encode()
            await send({"type": "http.response.start", "status": self.status,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        chunks = [{"choices": [{"index": 0, "delta": {"content": "PASS"}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102}}]
        body = b"".join(b"data: " + json.dumps({"id": "j", "object": "chat.completion.chunk", "model": "j", **c}).encode()
                        + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def judged(server: JudgeServer, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(server) as url:
        providers = [CompatibleProvider(name="judge", base_url=f"{url}/v1")]
        async with gateway(providers=providers, upstream_max_retries=0, **settings) as (_, client):
            yield client


async def stream(client: httpx.AsyncClient, key: str | None, model: str, validators: list[dict[str, Any]],
                 **extra: Any) -> tuple[httpx.Response, dict[str, Any] | None]:
    response = await client.post("/v1/stream", json={"model": model, "messages": HELLO, "validators": validators,
                                                     **extra}, headers=bearer(key or ADMIN))
    if response.status_code != 200:
        return response, None
    events = parse_sse(response.content)
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    return response, events[-1][2]


async def test_a_judge_the_key_may_not_use_is_403_naming_the_field_and_never_called() -> None:
    server = JudgeServer()
    async with judged(server) as client:
        key = (await make_key(client, models=["mock/*"]))["key"]
        refused, _ = await stream(client, key, "mock/echo", [judge("mock/echo"), judge("judge/small", final=True)])
        generate = await client.post("/v1/generate", json={"model": "mock/echo", "messages": HELLO,
                                                           "validators": [judge("judge/small")]}, headers=bearer(key))
        allowed, final = await stream(client, key, "mock/simple", [judge("mock/echo")])
    for response, field in ((refused, "validators.1.config.model"), (generate, "validators.0.config.model")):
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["code"] == "model_not_allowed" and error["field"] == field
    assert server.calls == 0
    assert allowed.status_code == 200 and final is not None and final["status"] == "ok"


async def test_a_judge_model_name_is_capped_at_the_edge() -> None:
    async with judged(JudgeServer()) as client:
        response, _ = await stream(client, None, "mock/simple", [judge("judge/" + "x" * 300)])
    assert response.status_code == 422 and response.json()["error"]["field"] == "validators.0.config.model"


async def test_judge_calls_are_billed_to_the_key_recorded_and_in_usage() -> None:
    prices = {"judge/*": {"input": 1_000.0, "output": 1_000.0}}  # 102 tokens: 0.102 USD per call
    async with judged(JudgeServer(), prices=prices) as client:
        key = (await make_key(client, models=["mock/*", "judge/*"], budget_usd=0.1, tpm=100_000))["key"]
        _, final = await stream(client, key, "mock/simple", [judge("judge/small", final=True)])
        assert final is not None and final["status"] == "ok"
        lines = final["validation"]["judge"]
        calls = lines["judge/small"]["calls"]
        assert calls >= 2 and lines == {"judge/small": {"calls": calls, "input_tokens": 100 * calls,
                                                        "output_tokens": 2 * calls, "total_tokens": 102 * calls,
                                                        "cost_usd": round(0.102 * calls, 10)}}
        assert final["usage"].get("cost_usd") is None  # mock/simple has no price: the run's own cost is none
        usage = (await get_until(client, "/v1/usage", lambda r: bool(r.json()["data"]),
                                 "the record in (the writer is asynchronous)", headers=bearer(key))).json()
        over, _ = await stream(client, key, "mock/simple", [])  # the judge spent the budget
    assert usage["total"]["judge"] == {"calls": calls, "tokens": 102 * calls, "cost_usd": round(0.102 * calls, 10)}
    assert usage["total"]["cost_usd"] == round(0.102 * calls, 10) and usage["total"]["requests"] == 1
    assert over.status_code == 429 and over.json()["error"]["code"] == "budget_exceeded"


async def test_judge_calls_per_run_are_capped_and_the_cap_is_never_a_silent_pass() -> None:
    ask = {"chunking": "word"}
    async with judged(JudgeServer()) as client:
        _, blocked = await stream(client, None, "mock/lorem-200", [judge("judge/small")], **ask)
        _, ignored = await stream(client, None, "mock/lorem-200", [judge("judge/small", on_error="ignore")], **ask)
    assert blocked is not None and blocked["status"] == "blocked"
    assert "judge calls" in blocked["error"]["reason"] and blocked["validation"]["judge"]["judge/small"]["calls"] == 16
    assert ignored is not None and ignored["status"] == "ok"
    stats = ignored["validation"]["validators"]["llm_judge"]
    assert ignored["validation"]["judge"]["judge/small"]["calls"] == 16
    assert stats["pass"] == 16 and stats["fail"] == 0 and stats["error"] > 100  # counted, not passed


async def test_judge_calls_run_concurrently_up_to_the_bound() -> None:
    server = JudgeServer(hold_until=4)  # one call at a time would hold the first one until its timeout
    async with judged(server, judge_max_calls=100) as client:
        _, final = await stream(client, None, "mock/lorem-40", [judge("judge/small", timeout=60)], chunking="word")
    assert final is not None and final["status"] == "ok", final
    assert server.peak == 4 and server.calls == final["validation"]["judge"]["judge/small"]["calls"] >= 40


async def test_a_failed_judge_call_gives_a_short_reason_not_the_upstream_text() -> None:
    server = JudgeServer(status=400, message="The capital of France is Paris. " * 200)
    async with judged(server) as client:
        _, final = await stream(client, None, "mock/simple", [judge("judge/small")])
    assert final is not None and final["status"] == "blocked"
    assert len(final["error"]["reason"]) <= 200 and final["error"]["reason"].startswith("check failed:")
    assert len(final["error"]["message"]) <= 300


@pytest.mark.parametrize("policy", ["FAIL: " + "Paris " * 2000])
async def test_a_judge_verdict_reason_is_cut_short(policy: str) -> None:
    async with judged(JudgeServer()) as client:
        _, final = await stream(client, None, "mock/simple", [{"name": "llm_judge", "config": {
            "model": "mock/echo", "policy": policy[:8000]}}])
    assert final is not None and final["status"] == "blocked" and len(final["error"]["reason"]) <= 200


class OutOfOrder(Validator):
    """Pipelined: "One" passes only once "Two" failed (checked one at a time, it would wait forever)."""

    name = "out_of_order"
    inline = False
    pipelined = True
    two_failed: asyncio.Event

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        if chunk.startswith("Two"):
            self.two_failed.set()
            return Verdict.fail("no")
        if chunk.startswith("One"):
            await self.two_failed.wait()
        return Verdict(kind="pass")


async def test_pipelined_checks_give_the_verdicts_of_one_at_a_time_and_release_what_passed_before_a_fail() -> None:
    cls = type("O", (OutOfOrder,), {"two_failed": asyncio.Event()})
    gate = make_gate(spec("out_of_order"), registry={**VALIDATORS, "out_of_order": cls}, max_pending=4)
    released, blocked = await drive(gate, tokens("One. Two. Three. Four. ", size=5))
    assert blocked is not None and blocked.why == "no"
    assert text_of(released + blocked.released) == "One. "  # "One" passed after "Two" failed: still out


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/v1/stream", {"messages": HELLO}, 422),
    ("/v1/chat/completions", {"messages": HELLO}, 400),  # the facades answer in their API's own shape
    ("/v1/messages", {"messages": HELLO, "max_tokens": 10}, 400),
])
async def test_model_names_are_capped_at_the_edge(path: str, body: dict[str, Any], status: int) -> None:
    async with judged(JudgeServer()) as client:
        response = await client.post(path, json={"model": "mock/" + "x" * 300, **body}, headers=bearer(ADMIN))
    assert response.status_code == status, response.text
    assert "model: String should have at most 256 characters" in response.text
