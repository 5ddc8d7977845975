"""Prices that are right (issue 39): every run priced with its provider's cache-aware rules, to the
cent, from the recorded fixtures' usage (../shared/fixtures) and the providers' published prices.

The rates (USD per million tokens) as the providers publish them and genai-prices carries them:
- Anthropic Claude Sonnet 5: input $2, output $10, cache read $0.20 (0.1x), 5-minute cache write
  $2.50 (1.25x), 1-hour cache write $4 (2x). Anthropic counts cache tokens OUTSIDE `input_tokens`.
- OpenAI GPT-5: input $1.25, cached input $0.125, output $10 (reasoning tokens are output tokens).
  OpenAI counts cached tokens INSIDE `input_tokens` / `prompt_tokens`.
- Google Gemini 2.5 Pro: prompts up to 200k tokens input $1.25, output $10 (thinking included),
  cached content $0.125; prompts over 200k $2.50, $15, $0.25. Gemini counts cached content INSIDE
  `promptTokenCount`.
Each expected figure below is worked by hand from those rates, and checked against genai-prices'
own `calc_price` so the gateway's arithmetic and the library's agree.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import httpx
import pytest
from genai_prices import Usage as LibraryUsage
from genai_prices import calc_price

from app.accounting import LIBRARY_SOURCE, PriceBook, library_rates
from app.auth.policy import Price
from app.core.events import Usage
from app.main import create_app
from app.providers.gemini_stream import gemini_usage
from tests.auth_support import ADMIN, bearer, make_key
from tests.hostile_upstream import KEY, HostileUpstream, provider_settings, raw_answer
from tests.support import recordings, serve

TODAY = date(2026, 11, 28)


def _recording(folder: str, stem: str) -> bytes:
    (rec,) = [r for r in recordings(folder) if r.name == stem]
    return rec.body


def _library_total(usage: Usage, model: str, provider: str) -> Decimal:
    """genai-prices' own total for the same usage (its `Usage` counts cache tokens inside input_tokens too)."""
    counts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
              "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
              "cache_write_1h_tokens": usage.cache_write_1h_tokens}
    return calc_price(LibraryUsage(**counts), model, provider_id=provider).total_price


# -- the arithmetic, from the published examples ---------------------------------------------------

def test_anthropic_5_minute_and_1_hour_writes_and_reads() -> None:
    """10,000 prompt tokens outside the cache, 50,000 read, 4,000 written for 5 minutes and
    6,000 for 1 hour, 1,000 out, on Claude Sonnet 5."""
    rates = library_rates("anthropic", "claude-sonnet-5", TODAY)
    assert rates is not None and rates.source == LIBRARY_SOURCE
    usage = Usage(input_tokens=10_000 + 50_000 + 10_000, cache_read_tokens=50_000, cache_write_tokens=10_000,
                  cache_write_1h_tokens=6_000, output_tokens=1_000)
    cost = rates.of(usage)
    assert cost.input_usd == pytest.approx(0.02)  # 10,000 x $2
    assert cost.cache_read_usd == pytest.approx(0.01)  # 50,000 x $0.20
    assert cost.cache_write_usd == pytest.approx(0.01 + 0.024)  # 4,000 x $2.50 + 6,000 x $4
    assert cost.output_usd == pytest.approx(0.01)  # 1,000 x $10
    assert cost.total_usd == pytest.approx(0.074)
    assert Decimal(str(cost.total_usd)) == _library_total(usage, "claude-sonnet-5", "anthropic")


def test_openai_cached_input_and_reasoning_are_not_charged_twice() -> None:
    """GPT-5, 9,463 prompt tokens of which 8,320 cached, 582 out of which 512 reasoning (the
    recorded web-search-call's usage): the cached tokens at $0.125, never also at $1.25."""
    rates = library_rates("openai-responses", "gpt-5", TODAY)
    assert rates is not None
    usage = Usage(input_tokens=9_463, cache_read_tokens=8_320, output_tokens=582, reasoning_tokens=512)
    cost = rates.of(usage)
    assert (cost.input_usd, cost.cache_read_usd, cost.output_usd) == pytest.approx((0.00142875, 0.00104, 0.00582))
    assert round(cost.total_usd, 2) == 0.01
    assert Decimal(str(cost.total_usd)) == _library_total(usage, "gpt-5", "openai")


def test_gemini_cached_content_and_the_long_context_tier() -> None:
    """Gemini 2.5 Pro's usageMetadata through the gateway's own normalizer: cached content is
    inside promptTokenCount; past 200k prompt tokens every token pays the long-context rates."""
    rates = library_rates("gemini", "gemini-2.5-pro", TODAY)
    assert rates is not None
    short = gemini_usage({"promptTokenCount": 100_000, "cachedContentTokenCount": 80_000,
                          "candidatesTokenCount": 2_000, "thoughtsTokenCount": 3_000, "totalTokenCount": 105_000})
    long = gemini_usage({"promptTokenCount": 250_000, "cachedContentTokenCount": 200_000,
                         "candidatesTokenCount": 2_000, "thoughtsTokenCount": 3_000, "totalTokenCount": 255_000})
    assert short is not None and long is not None
    for patch, (uncached, read, out) in ((short, (0.025, 0.01, 0.05)), (long, (0.125, 0.05, 0.075))):
        usage = Usage(input_tokens=patch.input_tokens or 0, output_tokens=patch.output_tokens or 0,
                      cache_read_tokens=patch.cache_read_tokens or 0, reasoning_tokens=patch.reasoning_tokens or 0)
        cost = rates.of(usage)
        assert (cost.input_usd, cost.cache_read_usd, cost.output_usd) == pytest.approx((uncached, read, out))
        assert Decimal(str(cost.total_usd)) == _library_total(usage, "gemini-2.5-pro", "google")


def test_the_operators_price_overrides_the_library_and_defaults_to_the_input_rate() -> None:
    """FOUNDRY_PRICES names a model: its rates win over the library's; a cache rate it leaves
    unset is the input rate (a cached token is never charged twice), a 1-hour write the 5-minute
    rate, reasoning the output rate; its long-context tier applies past `above`."""
    prices = {"anthropic/claude-sonnet-5": Price(input=1, output=2, tiers=({"above": 100, "input": 10},))}  # type: ignore[arg-type]
    book = PriceBook(prices, {"sonnet": "anthropic/claude-sonnet-5"})
    for name in ("anthropic/claude-sonnet-5", "sonnet"):
        rates = book.rates(name)
        assert rates is not None and rates.source == "FOUNDRY_PRICES"
        small = rates.of(Usage(input_tokens=100, cache_read_tokens=60, cache_write_tokens=40, cache_write_1h_tokens=40,
                               output_tokens=10, reasoning_tokens=5))
        assert small.total_usd == pytest.approx((100 * 1 + 10 * 2) / 1e6)
        assert rates.of(Usage(input_tokens=101)).total_usd == pytest.approx(101 * 10 / 1e6)
    assert book.rates("anthropic/claude-haiku-4-5").source == LIBRARY_SOURCE  # type: ignore[union-attr]
    assert PriceBook({}, {}, library=False).rates("anthropic/claude-haiku-4-5") is None
    assert book.rates("mock/simple") is None  # neither the operator nor the library prices it


def test_hostile_counts_never_make_a_negative_cost() -> None:
    """Parts larger than the figure they are part of (an upstream's numbers are input) are bounded."""
    rates = library_rates("anthropic", "claude-sonnet-5", TODAY)
    assert rates is not None
    cost = rates.of(Usage(input_tokens=10, cache_read_tokens=1_000, cache_write_tokens=1_000,
                          cache_write_1h_tokens=5_000, output_tokens=1, reasoning_tokens=9))
    assert min(cost.input_usd, cost.cache_read_usd, cost.cache_write_usd, cost.output_usd) >= 0
    assert cost.total_usd == pytest.approx(10 * 0.2 / 1e6 + 10 / 1e6)


# -- end to end: the recorded streams through the HTTP API, the final's cost and /v1/usage ----------

ANTHROPIC_CACHE = _recording("anthropic", "prompt-cache-usage")
ONE_HOUR = (b'"cache_creation":{"ephemeral_5m_input_tokens":3068,"ephemeral_1h_input_tokens":0}',
            b'"cache_creation":{"ephemeral_5m_input_tokens":269,"ephemeral_1h_input_tokens":3068}')

CASES: dict[str, tuple[str, str, bytes, dict[str, Any], dict[str, float]]] = {
    # Anthropic's message_delta: input 6 (outside the cache), cache read 6,289, cache write 3,337
    # (all 5-minute, as message_start's cache_creation says), output 198.
    "anthropic-5m": ("anthropic", "anthropic/claude-sonnet-5", ANTHROPIC_CACHE,
                     {"input_tokens": 9_632, "cache_read_tokens": 6_289, "cache_write_tokens": 3_337, "output_tokens": 198},
                     {"input_usd": 0.000012, "cache_read_usd": 0.0012578, "cache_write_usd": 0.0083425,
                      "output_usd": 0.00198}),
    # The same recording with 3,068 of its writes declared 1-hour (the 1-hour breakpoint's split).
    "anthropic-1h": ("anthropic", "anthropic/claude-sonnet-5", ANTHROPIC_CACHE.replace(*ONE_HOUR),
                     {"input_tokens": 9_632, "cache_write_tokens": 3_337, "cache_write_1h_tokens": 3_068},
                     {"input_usd": 0.000012, "cache_read_usd": 0.0012578, "cache_write_usd": 0.0006725 + 0.012272,
                      "output_usd": 0.00198}),
    # OpenAI Responses, GPT-5: 9,463 input of which 8,320 cached; 582 output of which 512 reasoning.
    "openai-cached": ("openai-responses", "openai-responses/gpt-5", _recording("openai-responses", "web-search-call"),
                      {"input_tokens": 9_463, "cache_read_tokens": 8_320, "output_tokens": 582, "reasoning_tokens": 512},
                      {"input_usd": 0.00142875, "cache_read_usd": 0.00104, "cache_write_usd": 0.0, "output_usd": 0.00582}),
    # Gemini 2.5 Pro thinking: 34 prompt tokens; 469 answer + 787 thought tokens, all output.
    "gemini-thinking": ("gemini", "gemini/gemini-2.5-pro", _recording("gemini", "thinking-thought-parts"),
                        {"input_tokens": 34, "output_tokens": 1_256, "reasoning_tokens": 787},
                        {"input_usd": 0.0000425, "cache_read_usd": 0.0, "cache_write_usd": 0.0, "output_usd": 0.01256}),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_recorded_run_is_priced_to_the_cent_in_its_final_its_record_and_usage(case: str) -> None:
    provider, model, body, counts, parts = CASES[case]
    answer = raw_answer(200, body, [("content-type", "text/event-stream")])
    async with HostileUpstream(answer) as upstream:
        settings = provider_settings(provider, upstream.url, admin_key=ADMIN)
        app = create_app(settings)
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            key = (await make_key(client))["key"]
            response = await client.post("/v1/generate", headers=bearer(key), json={
                "model": model, "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 200, response.text
            final = response.json()
            await app.state.records.flush()
            (record,) = (await client.get("/v1/runs", headers=bearer(key))).json()["data"]
            usage = (await client.get("/v1/usage", headers=bearer(key))).json()
    got = final["usage"]
    assert {name: got.get(name, 0) for name in counts} == counts
    total = sum(parts.values())
    assert got["cost"] == pytest.approx({**parts, "source": LIBRARY_SOURCE})
    assert got["cost_usd"] == pytest.approx(total) and round(got["cost_usd"], 2) == round(total, 2)
    (group,) = usage["data"]
    assert group["group"] == model and group["cost_usd"] == pytest.approx(total)
    assert group["cost"] == pytest.approx(parts)
    assert {name: group["tokens"][name] for name in counts} == counts
    assert usage["total"]["cost"] == pytest.approx(parts)
    assert record["usage"]["cost"] == pytest.approx({**parts, "source": LIBRARY_SOURCE})  # the run record keeps it
    assert KEY not in response.text


async def test_each_step_of_a_tool_run_is_priced_on_its_own() -> None:
    """A long-context tier is one provider call's prompt, not the run's: mock/tool_call runs two
    calls whose prompts together pass the tier's start and each stays under it, so every token
    pays the base rate ($1), none the tier's ($1,000)."""
    ask = {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}]}
    async with serve(create_app(provider_settings("anthropic", "http://127.0.0.1:9"))) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client:
        usage = (await client.post("/v1/generate", json=ask)).json()["usage"]
    assert usage["input_tokens"] >= 2 and "cost" not in usage  # the mock: priced by no one
    tiered = {"mock/*": {"input": 1, "output": 1, "tiers": [{"above": usage["input_tokens"] - 1, "input": 1000,
                                                             "output": 1000}]}}
    async with serve(create_app(provider_settings("anthropic", "http://127.0.0.1:9", prices=tiered))) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client:
        final = (await client.post("/v1/generate", json=ask)).json()
    assert final["steps"] == 2 and final["usage"]["input_tokens"] == usage["input_tokens"]
    assert final["usage"]["cost"]["source"] == "FOUNDRY_PRICES"
    assert final["usage"]["cost_usd"] == pytest.approx((usage["input_tokens"] + usage["output_tokens"]) / 1e6)
