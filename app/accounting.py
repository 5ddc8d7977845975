"""The seam between a finished run and its key's accounts (app/auth): the Gateway's run observer
that gives back the concurrency slot, counts the run's tokens (tpm) and cost (budget), and feeds
the per-key Prometheus counters (the run's own usage plus its `llm_judge` calls,
`validation.judge`). It reads only the `RunReport`; the ticket travels with the run, as
the observer `settle(ticket)` that `open_run` gives the run when it starts it.

And what a model costs (`PriceBook`): the operator's prices (FOUNDRY_PRICES, the config file's
[prices]) for the models they name, else the published prices of the genai-prices library (its
bundled, versioned data: never fetched at run time), else none (the run is unpriced)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from app.auth import Auth
from app.auth.policy import Price, price_for
from app.auth.service import Reservation, Ticket
from app.core.cost import LIBRARY_SOURCE, OPERATOR_SOURCE, Rate, Rates
from app.core.events import Usage
from app.core.messages import Message
from app.core.parts import TextPart
from app.core.report import RunObserver, RunReport
from app.observability import Metrics

if TYPE_CHECKING:
    from genai_prices.types import TieredPrices

__all__ = ["LIBRARY_SOURCE", "KeyAccountant", "PriceBook", "estimate", "library_rates"]

_LIBRARY_PROVIDERS = {"gemini": "google", "openai-responses": "openai"}
"""The gateway's provider names the library knows by another name (the rest it knows by theirs:
openai, anthropic, groq, deepseek, mistral, ...; a name it does not know leaves the model unpriced)."""


class PriceBook:
    """The rates a model is priced at: the operator's first (by the model as asked, then its
    alias's target; exact names before patterns), then the library's (by the target's provider
    and model), else None."""

    def __init__(self, prices: Mapping[str, Price], aliases: Mapping[str, str], *, library: bool = True) -> None:
        self.prices = dict(prices)
        self.aliases = dict(aliases)
        self.library = library

    def rates(self, model: str) -> Rates | None:
        target = self.aliases.get(model, model)
        price = price_for(self.prices, model, target if target != model else "") if self.prices else None
        if price is not None:
            return price.rates(OPERATOR_SOURCE)
        provider, _, name = target.partition("/")
        return library_rates(provider, name, datetime.now(UTC).date()) if self.library and name else None


@functools.lru_cache(maxsize=512)
def library_rates(provider: str, model: str, day: date) -> Rates | None:
    """The library's rates for `provider/model` on `day` (prices change on dates it knows), or None
    when it knows neither (a local server, the mock, a model it has no price for)."""
    from genai_prices.data_snapshot import get_snapshot  # on first use (see LIBRARY_SOURCE)

    try:
        _, info = get_snapshot().find_provider_model(model, None, _LIBRARY_PROVIDERS.get(provider, provider), None)
    except LookupError:
        return None
    price = info.get_prices(datetime(day.year, day.month, day.day, 12, tzinfo=UTC))
    base = {key: _rate(getattr(price, key + "_mtok")) for key in (
        "input", "output", "cache_read", "cache_write", "cache_write_5m", "cache_write_1h", "output_reasoning")}
    inputs, output = base["input"], base["output"]
    if inputs is None or output is None:
        return None
    write = base["cache_write_5m"] or base["cache_write"] or inputs
    return Rates(input=inputs, output=output, cache_read=base["cache_read"] or inputs, cache_write=write,
                 cache_write_1h=base["cache_write_1h"] or base["cache_write"] or inputs,
                 reasoning=base["output_reasoning"] or output, source=LIBRARY_SOURCE)


def _rate(value: Decimal | TieredPrices | None) -> Rate | None:
    from genai_prices.types import TieredPrices

    if isinstance(value, TieredPrices):
        return Rate(value.base, tuple((tier.start, tier.price) for tier in value.tiers))
    return None if value is None else Rate(value)

MEDIA_TOKENS = 1_600
"""What one image or document part is counted as before the provider says (a large image's tokens)."""


def estimate(messages: Sequence[Message], max_tokens: int | None, default_output: int, rates: Rates | None) -> Reservation:
    """A run's expected tokens and cost, reserved at admission: its prompt at four characters a token
    (English text runs about four; tool specs and framing add a little, covered by four a message)
    and its `max_tokens` (or the operator's estimate), at the model's price."""
    prompt = 0
    for message in messages:
        content = message.content
        prompt += 4 + (len(content) if isinstance(content, str) else sum(
            len(part.text) if isinstance(part, TextPart) else MEDIA_TOKENS * 4 for part in content)) // 4
        prompt += sum(len(str(call.arguments)) for call in message.tool_calls) // 4
    output = max_tokens or default_output
    usd = rates.of(Usage(input_tokens=prompt, output_tokens=output)).total_usd if rates is not None else 0.0
    return Reservation(tokens=prompt + output, usd=usd)

class KeyAccountant:
    def __init__(self, auth: Auth, metrics: Metrics) -> None:
        self.auth = auth
        self.metrics = metrics

    def settle(self, ticket: Ticket) -> RunObserver:
        """The observer of one run admitted with `ticket`: settles it when the run ends."""

        def settled(report: RunReport) -> None:
            usage = report.usage
            if report.final.cache is not None and not report.final.cache["charged"]:
                usage = Usage()  # a cache hit: reported as the original's, not charged (its rule's `charge`)
            tokens = usage.total_tokens or (usage.input_tokens + usage.output_tokens)
            cost = usage.cost_usd
            judged = report.validation.get("judge", {}) if report.validation is not None else {}
            for line in judged.values():  # the llm_judge's calls are the key's calls too
                tokens += line["total_tokens"]
                if "cost_usd" in line:
                    cost = (cost or 0.0) + line["cost_usd"]
            self.auth.run_ended(ticket, tokens, cost, report.stream_id)
            self.metrics.count_key_run(ticket.key.name, report.status, tokens, cost)

        return settled
