"""What a run's usage costs, split by kind of token: pure arithmetic over a model's rates.

Canonical usage (app/core/events.py) counts every prompt token in `input_tokens`, cached or not,
whatever the provider reported: OpenAI and Gemini count cache reads inside their prompt figure,
Anthropic outside it (its normalizer adds them back). So the cost of a run is

    (input - cache_read - cache_write) x input rate      uncached prompt tokens
  + cache_read x cache-read rate
  + (cache_write - cache_write_1h) x 5-minute write rate + cache_write_1h x 1-hour write rate
  + (output - reasoning) x output rate + reasoning x reasoning rate

each rate taken at the tier the run's whole prompt (`input_tokens`) falls in: past a tier's start,
every token of the run pays that tier's rate (long-context prices; the same cliff the price library
uses). The same convention as genai-prices' `Usage`, whose totals the tests compare with these.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from importlib.metadata import version
from typing import Protocol

from typing_extensions import TypedDict

__all__ = ["LIBRARY_SOURCE", "OPERATOR_SOURCE", "Cost", "CostData", "Counts", "Rate", "Rates", "price_sources"]

_MILLION = Decimal(1_000_000)

LIBRARY_SOURCE = f"genai-prices {version('genai-prices')}"
"""The price source of a run priced by the library: its name and version (its data ships with it).
Read from the installed distribution, so that naming the source (`config check`, the start-up
log) imports neither the library's data nor the key and records machinery."""
OPERATOR_SOURCE = "FOUNDRY_PRICES"


def price_sources(prices: Collection[str], *, library: bool) -> str:
    """Where prices come from, as `config check` and the start-up log say it: the operator's
    model names or patterns (`FOUNDRY_PRICES`), then the library's data unless it is turned off."""
    operator = f"FOUNDRY_PRICES for {len(prices)} model(s) or pattern(s): {', '.join(sorted(prices))}" if prices else ""
    if not library:
        return (operator or "none") + " (FOUNDRY_PRICE_LIBRARY=false: other models are unpriced)"
    return f"{LIBRARY_SOURCE} (its bundled data)" + (f", overridden by {operator}" if operator else "")


@dataclass(frozen=True, slots=True)
class Rate:
    """USD per million tokens: `base`, or a tier's price once the run's prompt passes its start."""

    base: Decimal
    tiers: tuple[tuple[int, Decimal], ...] = ()
    """(start, price), ascending: the price applies to prompts of more than `start` tokens."""

    def at(self, prompt_tokens: int) -> Decimal:
        for start, price in reversed(self.tiers):
            if prompt_tokens > start:
                return price
        return self.base


class Counts(Protocol):
    """A run's token counts, as canonical usage has them (`app.core.events.Usage`)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    reasoning_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Rates:
    """A model's rates for each kind of token, and where they come from."""

    input: Rate
    output: Rate
    cache_read: Rate
    cache_write: Rate
    """A 5-minute cache write (Anthropic's default breakpoint; a provider's only one elsewhere)."""
    cache_write_1h: Rate
    reasoning: Rate
    source: str
    """`genai-prices <version>` or `FOUNDRY_PRICES` (the operator's)."""

    def of(self, usage: Counts) -> Cost:
        return self.cost(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                         cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
                         cache_write_1h_tokens=usage.cache_write_1h_tokens, reasoning_tokens=usage.reasoning_tokens)

    def cost(self, *, input_tokens: int, output_tokens: int, cache_read_tokens: int = 0, cache_write_tokens: int = 0,
             cache_write_1h_tokens: int = 0, reasoning_tokens: int = 0) -> Cost:
        """The cost of these counts; never negative whatever the counts (each part is bounded
        by the figure it is a part of)."""
        prompt = max(input_tokens, 0)
        read = min(max(cache_read_tokens, 0), prompt)
        written = min(max(cache_write_tokens, 0), prompt - read)
        hour = min(max(cache_write_1h_tokens, 0), written)
        output = max(output_tokens, 0)
        reasoning = min(max(reasoning_tokens, 0), output)

        def usd(count: int, rate: Rate) -> Decimal:
            return count * rate.at(prompt) / _MILLION

        return Cost(
            input_usd=_usd(usd(prompt - read - written, self.input)),
            cache_read_usd=_usd(usd(read, self.cache_read)),
            cache_write_usd=_usd(usd(written - hour, self.cache_write) + usd(hour, self.cache_write_1h)),
            output_usd=_usd(usd(output - reasoning, self.output) + usd(reasoning, self.reasoning)),
            source=self.source,
        )


def _usd(value: Decimal) -> float:
    return float(round(value, 10))


class CostData(TypedDict):
    input_usd: float
    cache_read_usd: float
    cache_write_usd: float
    output_usd: float
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Cost:
    """A run's cost in USD by kind of token: uncached input, cache reads, cache writes (5-minute
    and 1-hour), output (reasoning included); and the price source it was computed from."""

    input_usd: float = 0.0
    cache_read_usd: float = 0.0
    cache_write_usd: float = 0.0
    output_usd: float = 0.0
    source: str = ""

    @property
    def total_usd(self) -> float:
        return round(self.input_usd + self.cache_read_usd + self.cache_write_usd + self.output_usd, 10)

    def plus(self, other: Cost) -> Cost:
        return Cost(input_usd=round(self.input_usd + other.input_usd, 10),
                    cache_read_usd=round(self.cache_read_usd + other.cache_read_usd, 10),
                    cache_write_usd=round(self.cache_write_usd + other.cache_write_usd, 10),
                    output_usd=round(self.output_usd + other.output_usd, 10), source=self.source or other.source)

    def to_dict(self) -> CostData:
        return {"input_usd": self.input_usd, "cache_read_usd": self.cache_read_usd,
                "cache_write_usd": self.cache_write_usd, "output_usd": self.output_usd, "source": self.source}
