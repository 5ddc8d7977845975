"""The per-stream byte cap holds for every event, the final included, and the store's eviction is
fair across API keys: a key's own finished streams go before anyone else's."""

from __future__ import annotations

import httpx
import pytest

from app.core.events import AssistantMessage, FinalEvent, ReasoningBlock, StartEvent, TokenEvent, Usage
from app.main import create_app
from app.settings import Settings
from app.streams.errors import ReplayUnavailable
from app.streams.frames import CUT_MARKER
from app.streams.memory import MemoryStreamStore
from tests.support import parse_sse, serve


def big_final(text: str) -> FinalEvent:
    return FinalEvent(status="ok", message=AssistantMessage(content=text, reasoning=(
        ReasoningBlock(provider="p", text="thinking " * 500),)), usage=Usage(output_tokens=7), stop_reason="stop",
        model="m", provider="p")


@pytest.mark.parametrize("text", ["y" * 20_000, "é\n\"" * 6_000, "\U0001d11e" * 5_000])
async def test_a_final_past_the_cap_is_kept_cut_with_a_marker(text: str) -> None:
    log = await MemoryStreamStore(ttl=60, max_streams=10, max_events=1000, max_bytes=4096).create(
        model="m", provider="p")
    log.append(StartEvent(stream_id=log.info.stream_id, model="m", provider="p"))
    for i in range(10):
        log.append(TokenEvent(index=i, content="z" * 100))
    frame = log.append(big_final(text))
    assert len(frame) <= 4096 and log.size_bytes <= 4096
    kept = log.final
    assert kept is not None and kept.message.content.endswith(CUT_MARKER)
    shown = kept.message.content.removesuffix(CUT_MARKER)
    assert text.startswith(shown) and len(shown.encode()) > 1500
    assert kept.message.reasoning == () and kept.usage.output_tokens == 7 and kept.status == "ok"
    with pytest.raises(ReplayUnavailable):  # what was dropped for it: 410
        log.check_replay(0)
    (_, kind, data), = parse_sse(log.frames_after(log.last_seq - 1))
    assert kind == "final" and data["message"]["content"].endswith(CUT_MARKER)


async def test_a_final_within_the_cap_is_kept_whole() -> None:
    log = await MemoryStreamStore(ttl=60, max_streams=10, max_events=1000, max_bytes=1 << 20).create(
        model="m", provider="p")
    log.append(big_final("w" * 20_000))
    assert log.final is not None and log.final.message.content == "w" * 20_000


async def test_one_keys_big_runs_evict_its_own_streams_first() -> None:
    store = MemoryStreamStore(ttl=60, max_streams=100, max_events=100_000, max_bytes=1 << 20,
                              max_total_bytes=64 * 1024)
    other = await store.create(model="m", provider="p", owner="key_a")
    other.append(TokenEvent(index=0, content="a" * 1000))
    other.append(big_final("a"))
    mine = []
    for _ in range(5):
        log = await store.create(model="m", provider="p", owner="key_b")
        for i in range(100):
            log.append(TokenEvent(index=i, content="b" * 100))
        log.append(big_final("b"))
        mine.append(log.info.stream_id)
    assert store.get(other.info.stream_id) is not None  # key_a's replay survives key_b's runs
    assert store.get(mine[0]) is None and store.get(mine[-1]) is not None
    assert store.total_bytes <= 64 * 1024


async def test_replay_of_a_capped_stream_over_http_is_410_then_the_cut_final() -> None:
    app = create_app(Settings(max_stream_bytes=4096, records=False))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        ask = {"model": "mock/lorem-3000", "messages": [{"role": "user", "content": "x"}]}
        response = await client.post("/v1/stream", json=ask)  # its reader holds the log: it loses nothing
        stream_id = response.headers["x-stream-id"]
        live = parse_sse(response.content)
        last = live[-1][0]
        assert [e for _, e, _ in live].count("token") == 3000
        assert live[-1][1] == "final" and live[-1][2]["message"]["content"].endswith(CUT_MARKER)
        gone = await client.get(f"/v1/stream/{stream_id}", params={"after": 0})
        tail = parse_sse((await client.get(f"/v1/stream/{stream_id}", params={"after": last - 1})).content)
    assert gone.status_code == 410
    assert [(e, d["message"]["content"].endswith(CUT_MARKER)) for _, e, d in tail] == [("final", True)]
