"""The reference helpers (app/providers/reference.py) on the gateway's own path: the stream
iterator over an adapter gives the events a run's driver gives for the same answer, a failure is
its final's error, and the upstream response is let go once the final is out."""

from __future__ import annotations

import asyncio

from app.core.accumulator import Accumulator
from app.core.events import FinalEvent
from app.core.messages import Message
from app.providers.base import ProviderRequest, drive
from app.providers.reference import AdapterStreamIterator, openai_adapter, replay_stream
from tests.support import recordings, serve
from tests.upstream_fakes import Scripted, answer, sse

HI = (Message(role="user", content="hi"),)
ASK = ProviderRequest(model="gpt-x", messages=HI)
TEXT = next(r for r in recordings("openai-chat") if r.name == "text-include-usage")


async def test_the_iterator_gives_the_events_a_run_drives() -> None:
    fake = Scripted(lambda _: sse(TEXT.body))
    async with serve(fake.app()) as url:
        adapter = openai_adapter("sk-ref", base_url=f"{url}/v1")
        try:
            driven: list = []
            await drive(await adapter.open_stream(ASK), Accumulator(model="gpt-x", provider="openai"), driven)
            iterator = AdapterStreamIterator(adapter, ASK)
            events = await replay_stream(iterator)
        finally:
            await adapter.aclose()
    assert events == driven and iterator.closed
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "ok" and final.message.content == TEXT.expected["text"]
    assert [r.headers["authorization"] for r in fake.requests] == ["Bearer sk-ref"] * 2


async def test_an_error_answer_is_the_finals_error() -> None:
    fake = Scripted(lambda _: answer(429, {"error": {"message": "slow down", "type": "rate_limit_error"}},
                                     {"retry-after": "3"}))
    async with serve(fake.app()) as url:
        adapter = openai_adapter("sk-ref", base_url=f"{url}/v1")
        try:
            events = await replay_stream(AdapterStreamIterator(adapter, ASK))
        finally:
            await adapter.aclose()
    (final,) = events
    assert isinstance(final, FinalEvent) and final.status == "error"
    assert final.error is not None and final.error["code"] == "rate_limited" and final.error["retry_after"] == "3"


async def test_the_upstream_is_let_go_once_the_final_is_out() -> None:
    closed = asyncio.Event()
    fake = Scripted(lambda _: sse(TEXT.body, hold=True, closed=closed))  # the body stays open after [DONE]
    async with serve(fake.app()) as url:
        adapter = openai_adapter("sk-ref", base_url=f"{url}/v1")
        try:
            iterator = AdapterStreamIterator(adapter, ASK)
            async for event in iterator:
                if isinstance(event, FinalEvent):
                    break
            await asyncio.wait_for(closed.wait(), 10)
        finally:
            await adapter.aclose()
    assert iterator.closed
