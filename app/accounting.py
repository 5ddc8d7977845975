"""The seam between a finished run and its key's accounts (app/auth): the Gateway's run observer
that gives back the concurrency slot, counts the run's tokens (tpm) and cost (budget), and feeds
the per-key Prometheus counters. It reads only the `RunReport` and the ticket `open_run` bound to
the run's stream id."""

from __future__ import annotations

from app.auth import Auth
from app.auth.service import Ticket
from app.core.report import RunReport
from app.observability import Metrics

__all__ = ["KeyAccountant"]

_MAX_PENDING = 100_000
"""Tickets of runs opened but never driven are forgotten past this (their slot's lease expires)."""


class KeyAccountant:
    def __init__(self, auth: Auth, metrics: Metrics) -> None:
        self.auth = auth
        self.metrics = metrics
        self._tickets: dict[str, Ticket] = {}

    def bind(self, stream_id: str, ticket: Ticket) -> None:
        if len(self._tickets) >= _MAX_PENDING:
            self._tickets.pop(next(iter(self._tickets)))
        self._tickets[stream_id] = ticket

    def __call__(self, report: RunReport) -> None:
        ticket = self._tickets.pop(report.stream_id, None)
        if ticket is None:
            return
        usage = report.usage
        tokens = usage.total_tokens or (usage.input_tokens + usage.output_tokens)
        self.auth.run_ended(ticket, tokens, usage.cost_usd)
        self.metrics.count_key_run(ticket.key.name, report.status, tokens, usage.cost_usd)
