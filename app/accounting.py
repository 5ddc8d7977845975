"""The seam between a finished run and its key's accounts (app/auth): the Gateway's run observer
that gives back the concurrency slot, counts the run's tokens (tpm) and cost (budget), and feeds
the per-key Prometheus counters (the run's own usage plus its `llm_judge` calls,
`validation.judge`). It reads only the `RunReport`; the ticket travels with the run, as
the observer `settle(ticket)` that `open_run` gives the run when it starts it."""

from __future__ import annotations

from app.auth import Auth
from app.auth.service import Ticket
from app.core.report import RunObserver, RunReport
from app.observability import Metrics

__all__ = ["KeyAccountant"]

class KeyAccountant:
    def __init__(self, auth: Auth, metrics: Metrics) -> None:
        self.auth = auth
        self.metrics = metrics

    def settle(self, ticket: Ticket) -> RunObserver:
        """The observer of one run admitted with `ticket`: settles it when the run ends."""

        def settled(report: RunReport) -> None:
            usage = report.usage
            tokens = usage.total_tokens or (usage.input_tokens + usage.output_tokens)
            cost = usage.cost_usd
            judged = report.validation.get("judge", {}) if report.validation is not None else {}
            for line in judged.values():  # the llm_judge's calls are the key's calls too
                tokens += line["total_tokens"]
                if "cost_usd" in line:
                    cost = (cost or 0.0) + line["cost_usd"]
            self.auth.run_ended(ticket, tokens, cost)
            self.metrics.count_key_run(ticket.key.name, report.status, tokens, cost)

        return settled
