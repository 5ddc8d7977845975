"""The seam between a finished run and its key's accounts (app/auth): the Gateway's run observer
that gives back the concurrency slot, counts the run's tokens (tpm) and cost (budget), and feeds
the per-key Prometheus counters (the run's own usage plus its `llm_judge` calls,
`validation.judge`). It reads only the `RunReport`; the ticket travels with the run, as
the observer `settle(ticket)` that `open_run` gives the run when it starts it."""

from __future__ import annotations

from collections.abc import Sequence

from app.auth import Auth
from app.auth.policy import Price
from app.auth.service import Reservation, Ticket
from app.core.events import Usage
from app.core.messages import Message
from app.core.parts import TextPart
from app.core.report import RunObserver, RunReport
from app.observability import Metrics

__all__ = ["KeyAccountant", "estimate"]

MEDIA_TOKENS = 1_600
"""What one image or document part is counted as before the provider says (a large image's tokens)."""


def estimate(messages: Sequence[Message], max_tokens: int | None, default_output: int, price: Price | None) -> Reservation:
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
    usd = price.cost(Usage(input_tokens=prompt, output_tokens=output)) if price is not None else 0.0
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
