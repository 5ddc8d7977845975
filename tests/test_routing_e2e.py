"""Routing and resilience end to end (issue 16): the gateway under uvicorn on loopback in front of
a fault-scripted OpenAI-compatible server on loopback. For each fault: the fallback taken or the
honest end, the attempts in `final` (or in the error body), and the upstream request closed as
the fake sees it. Deadlines in the settings are short; the tests' own deadlines are generous
guards, never performance assertions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import CompatibleProvider, Settings
from tests.support import parse_sse, serve
from tests.upstream_fakes import Fault, FaultServer, closed_port_url

HELLO = [{"role": "user", "content": "Hello"}]
SMART = {"smart": {"targets": ["up/primary", "up/backup"]}}
GUARD = 15.0  # the test's own deadline, generous on a loaded machine


def settings(url: str, routes: dict[str, Any], **kw: Any) -> Settings:
    base: dict[str, Any] = {"upstream_max_retries": 0, "retry_backoff_seconds": 0.01,
                            "retry_backoff_max_seconds": 0.02, **kw}
    return Settings(
        openai_api_key=None, routes=routes,
        providers=[CompatibleProvider(name="up", base_url=f"{url}/v1"),
                   CompatibleProvider(name="down", base_url=closed_port_url())],
        **base,
    )


@contextlib.asynccontextmanager
async def faults(scripts: dict[str, list[Fault]], routes: dict[str, Any] | None = None,
                 **kw: Any) -> AsyncIterator[tuple[FaultServer, httpx.AsyncClient]]:
    server = FaultServer(scripts)
    async with serve(server) as url:
        app = create_app(settings(url, SMART if routes is None else routes, **kw))
        async with serve(app) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            yield server, client


async def run(client: httpx.AsyncClient, model: str = "smart", **extra: Any) -> tuple[list[Any], dict[str, Any]]:
    response = await asyncio.wait_for(client.post("/v1/stream", json={"model": model, "messages": HELLO, **extra}),
                                      GUARD)
    assert response.status_code == 200, response.text
    events = parse_sse(response.content)
    assert events[0][1] == "start" and [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    return events, events[-1][2]


def text(events: list[Any]) -> str:
    return "".join(d["content"] for _, e, d in events if e == "token")


def outcomes(final_or_error: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["target"], a["outcome"]) for a in final_or_error["attempts"]]


async def all_closed(server: FaultServer) -> None:
    await asyncio.wait_for(asyncio.gather(*(s.done.wait() for s in server.served)), GUARD)


@pytest.mark.parametrize(("fault", "outcome", "code", "status"), [
    (Fault("status", status=500), "error", "upstream_error", 500),
    (Fault("status", status=529), "error", "upstream_overloaded", 529),
    (Fault("status", status=429, retry_after="30"), "rate_limited", "rate_limited", 429),  # too long to wait
    (Fault("reset"), "error", "upstream_disconnected", None),  # headers, then the connection cut
    (Fault("stall"), "timeout", "timeout", None),  # headers, then silence: the first-token deadline
    (Fault("slow_first"), "timeout", "timeout", None),  # an opening chunk, then no content in time
])
async def test_a_failure_before_content_falls_back_to_the_next_target(
    fault: Fault, outcome: str, code: str, status: int | None
) -> None:
    scripts = {"primary": [fault], "backup": [Fault("ok", text="Hello from backup")]}
    stalls = fault.kind in ("stall", "slow_first")  # the first-token deadline is the subject: short
    async with faults(scripts, first_token_timeout=0.5 if stalls else 10.0) as (server, client):
        events, final = await run(client)
        await all_closed(server)
    assert final["status"] == "ok" and text(events) == "Hello from backup"
    assert events[0][2]["provider"] == "up" and events[0][2]["model"] == "up/backup"  # who served
    assert final["provider"] == "up" and final["target"] == "up/backup" and final["route"] == "smart"
    assert outcomes(final) == [("up/primary", outcome), ("up/backup", "ok")]
    assert final["attempts"][0]["code"] == code and final["attempts"][0].get("status") == status
    assert [s.model for s in server.served] == ["primary", "backup"]
    if stalls:
        assert server.of("primary")[0].gone  # the gateway closed the stalled request


async def test_a_refused_connection_falls_back() -> None:
    routes = {"smart": {"targets": ["down/any", "up/backup"]}}
    async with faults({"backup": [Fault("ok", text="fine")]}, routes) as (_, client):
        _, final = await run(client)
    assert final["status"] == "ok" and outcomes(final) == [("down/any", "error"), ("up/backup", "ok")]
    assert final["attempts"][0]["code"] == "upstream_unavailable"


async def test_retries_the_same_target_with_a_short_retry_after_then_serves() -> None:
    scripts = {"primary": [Fault("status", status=429, retry_after="0"), Fault("status", status=500),
                           Fault("ok", text="third time")], "backup": [Fault("ok", text="unused")]}
    async with faults(scripts, upstream_max_retries=2) as (server, client):
        events, final = await run(client)
    assert text(events) == "third time"
    assert outcomes(final) == [("up/primary", "rate_limited"), ("up/primary", "error"), ("up/primary", "ok")]
    assert not server.of("backup")


async def test_a_caller_fault_is_neither_retried_nor_sent_elsewhere() -> None:
    scripts = {"primary": [Fault("status", status=400)], "backup": [Fault("ok", text="unused")]}
    async with faults(scripts, upstream_max_retries=3) as (server, client):
        response = await client.post("/v1/stream", json={"model": "smart", "messages": HELLO})
    assert response.status_code == 400 and response.json()["error"]["code"] == "upstream_bad_request"
    assert outcomes(response.json()["error"]) == [("up/primary", "error")]
    assert [s.model for s in server.served] == ["primary"]


async def test_every_target_failing_is_an_http_error_listing_the_attempts() -> None:
    scripts = {"primary": [Fault("status", status=503)], "backup": [Fault("reset")]}
    async with faults(scripts, upstream_max_retries=1) as (server, client):
        response = await client.post("/v1/stream", json={"model": "smart", "messages": HELLO})
        await all_closed(server)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "upstream_disconnected" and error["retryable"] is True
    assert outcomes(error) == [("up/primary", "error")] * 2 + [("up/backup", "error")] * 2


async def test_no_content_in_time_anywhere_is_a_504_timeout() -> None:
    scripts = {"primary": [Fault("stall")], "backup": [Fault("slow_first")]}
    async with faults(scripts, first_token_timeout=0.3) as (server, client):
        response = await client.post("/v1/stream", json={"model": "smart", "messages": HELLO})
        await all_closed(server)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "timeout" and error["deadline"] == "first_token"
    assert outcomes(error) == [("up/primary", "timeout"), ("up/backup", "timeout")]
    assert all(s.gone for s in server.served)


async def test_a_failure_after_content_ends_honestly_without_fallback() -> None:
    scripts = {"primary": [Fault("reset", text="Half an")], "backup": [Fault("ok", text="unused")]}
    async with faults(scripts) as (server, client):
        events, final = await run(client)
    assert text(events) == "Half an" and final["message"]["content"] == "Half an"  # never a splice
    assert final["status"] == "error" and final["error"]["code"] == "upstream_disconnected"
    assert outcomes(final) == [("up/primary", "ok")]
    assert not server.of("backup")


async def test_a_stall_mid_stream_ends_with_an_idle_timeout_and_closes_the_upstream() -> None:
    scripts = {"primary": [Fault("stall_mid", text="Partial")], "backup": [Fault("ok", text="unused")]}
    async with faults(scripts) as (server, client):
        events, final = await run(client, timeouts={"idle": 0.3})
        await all_closed(server)
    assert text(events) == "Partial" and final["status"] == "error"
    assert final["error"]["code"] == "timeout" and final["error"]["deadline"] == "idle"
    assert final["error"]["retryable"] is True
    assert server.of("primary")[0].gone and not server.of("backup")


async def test_the_total_deadline_ends_the_run() -> None:
    async with faults({"primary": [Fault("stall_mid", text="Partial")]}) as (server, client):
        events, final = await run(client, "up/primary", timeouts={"total": 0.4})
        await all_closed(server)
    assert final["status"] == "error" and final["error"]["code"] == "timeout"
    assert final["error"]["deadline"] == "total" and server.served[0].gone


async def test_hedging_starts_the_next_target_and_releases_one_answer() -> None:
    routes = {"smart": {"targets": ["up/primary", "up/backup"], "hedge_after_ms": 50}}
    scripts = {"primary": [Fault("slow_first")], "backup": [Fault("ok", text="the hedge won")]}
    async with faults(scripts, routes) as (server, client):
        events, final = await run(client)
        await all_closed(server)
    assert [s.model for s in server.served] == ["primary", "backup"]  # both started
    assert text(events) == "the hedge won" and final["message"]["content"] == "the hedge won"
    assert sorted(outcomes(final)) == [("up/backup", "ok"), ("up/primary", "cancelled")]
    assert server.of("primary")[0].gone  # the loser's request closed
    assert events[0][2]["model"] == "up/backup"


async def test_a_hedge_not_needed_is_not_started() -> None:
    routes = {"smart": {"targets": ["up/primary", "up/backup"], "hedge_after_ms": 10_000}}
    async with faults({"primary": [Fault("ok", text="quick")], "backup": [Fault("ok")]}, routes) as (server, client):
        events, final = await run(client)
    assert text(events) == "quick" and [s.model for s in server.served] == ["primary"]


async def test_an_open_circuit_skips_its_target_and_shows_in_readyz_and_metrics() -> None:
    scripts = {"primary": [Fault("status", status=500)], "backup": [Fault("ok", text="served")]}
    async with faults(scripts, breaker_failures=1, breaker_cooldown_seconds=3600) as (server, client):
        _, first = await run(client)
        _, second = await run(client)
        ready = (await client.get("/readyz")).json()
        metrics = (await client.get("/metrics")).text
    assert outcomes(first) == [("up/primary", "error"), ("up/backup", "ok")]
    assert outcomes(second) == [("up/primary", "skipped"), ("up/backup", "ok")]
    assert [s.model for s in server.served] == ["primary", "backup", "backup"]
    assert ready["circuits"] == {"up/backup": "closed", "up/primary": "open"}
    assert 'foundry_circuit_state{target="up/primary"} 2.0' in metrics
    assert 'foundry_route_attempts_total{outcome="skipped",target="up/primary"} 1.0' in metrics


async def test_past_max_active_runs_new_runs_get_503_at_once() -> None:
    async with faults({"primary": [Fault("stall_mid", text="held")]}, max_active_runs=1) as (server, client):
        async with client.stream("POST", "/v1/stream", json={"model": "up/primary", "messages": HELLO}) as held:
            async for line in held.aiter_lines():
                if line.startswith("event: token"):
                    break
            shed = await client.post("/v1/stream", json={"model": "up/primary", "messages": HELLO})
            ready = await client.get("/readyz")
        assert shed.status_code == 503 and shed.headers["retry-after"] == "1"
        assert shed.json()["error"]["code"] == "overloaded" and shed.json()["error"]["retryable"] is True
        assert ready.status_code == 503 and ready.json()["status"] == "saturated"
        await all_closed(server)  # the held stream's client left: its upstream closed
        assert (await client.get("/readyz")).status_code == 200
    assert len(server.served) == 1  # the shed run never reached the upstream


@pytest.mark.parametrize(("timeouts", "field"), [
    ({"first_token": 301}, "timeouts.first_token"),
    ({"idle": 601}, "timeouts.idle"),
    ({"total": 3601}, "timeouts.total"),
    ({"total": 0}, "timeouts.total"),
    ({"first_token": "5"}, "timeouts.first_token"),
    ({"hedge": 1}, "timeouts.hedge"),
])
async def test_deadlines_out_of_range_are_422_naming_the_field(timeouts: dict[str, float], field: str) -> None:
    async with faults({"primary": [Fault("ok")]}) as (server, client):
        response = await client.post("/v1/stream", json={"model": "smart", "messages": HELLO, "timeouts": timeouts})
    assert response.status_code == 422 and response.json()["error"]["field"] == field
    assert not server.served


async def test_when_every_circuit_is_open_the_answer_is_503_with_retry_after() -> None:
    async with faults({"primary": [Fault("status", status=500)]}, breaker_failures=1,
                      breaker_cooldown_seconds=3600) as (server, client):
        first = await client.post("/v1/stream", json={"model": "up/primary", "messages": HELLO})
        second = await client.post("/v1/stream", json={"model": "up/primary", "messages": HELLO})
    assert first.status_code == 502 and second.status_code == 503
    assert second.json()["error"]["code"] == "circuit_open" and int(second.headers["retry-after"]) > 0
    assert outcomes(second.json()["error"]) == [("up/primary", "skipped")] and len(server.served) == 1


async def test_failures_after_content_count_toward_the_breaker() -> None:
    scripts = {"primary": [Fault("reset", text="Half")], "backup": [Fault("ok", text="whole")]}
    async with faults(scripts, breaker_failures=1, breaker_cooldown_seconds=3600) as (server, client):
        _, first = await run(client)
        _, second = await run(client)
    assert first["status"] == "error" and outcomes(first) == [("up/primary", "ok")]
    assert second["status"] == "ok" and outcomes(second) == [("up/primary", "skipped"), ("up/backup", "ok")]


async def test_per_target_options_reach_their_target_and_the_request_wins() -> None:
    routes = {"smart": {"targets": [{"model": "up/primary", "options": {"seed": 7, "top_p": 0.5}},
                                    {"model": "up/backup", "options": {"seed": 9}}]}}
    scripts = {"primary": [Fault("status", status=500)], "backup": [Fault("ok", text="fine")]}
    async with faults(scripts, routes) as (server, client):
        _, final = await run(client, provider_options={"top_p": 0.9})
    primary, backup = server.served
    assert (primary.body["seed"], primary.body["top_p"]) == (7, 0.9)
    assert (backup.body["seed"], backup.body["top_p"]) == (9, 0.9) and final["status"] == "ok"
