"""What a run hands over when it ends: the `RunReport`, and the `RunObserver` seam.

A run (app/run.py) builds one `RunReport` after its `final` is in the stream log (`RunEnding.end`,
app/core/ending.py) and calls every observer the `Gateway` was given (`Gateway(observers=[...])`
or `gateway.add_observer(fn)`) with it, once, whatever the outcome (ok, blocked, error,
cancelled). A run that no target served (every attempt failed before its first content; the
caller got an HTTP error) is reported too, by the gateway: status `error`, `events` 0, and an id
that never named a stream. This is the one place features plug into a run: run records, usage
and key accounting, metrics. An observer must not block: it copies what it needs and schedules
its own I/O (e.g. hands the report to a batch writer). An observer that raises is logged and
ignored; it never changes the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import ErrorData, FinalStatus
from app.core.events import FinalEvent, StopReason, Usage, ValidationData
from app.core.transcript import Transcript

__all__ = ["RunObserver", "RunReport", "notify"]


@dataclass(slots=True, frozen=True, kw_only=True)
class RunReport:
    """One run, ended: who it was (fixed when it opened), its `final`, and what the final does not
    tell. The outcome (status, usage, steps, ...) is read from the final, never copied beside it.
    Times are seconds; `started_at` is wall-clock (time.time()). Built by `RunEnding.end`
    (app/core/ending.py)."""

    stream_id: str
    request_id: str | None
    """The HTTP request that opened the run (X-Request-ID), when there was one."""
    owner: str | None = None
    """The id of the API key that started the run (None: open mode or the admin key)."""
    model: str
    """The model as the caller asked for it (`provider/model` or an alias)."""
    provider: str
    final: FinalEvent
    transcript: Transcript
    tools_run: int = 0
    """Gateway-executed tool calls."""
    ttft: float | None = None
    """Request to the first released content event; None when none was released."""
    duration: float
    """Request to final."""
    started_at: float
    event_counts: dict[str, int] = field(default_factory=dict)
    """Events appended, by type (`start` and `final` included)."""
    ignored: dict[str, int] = field(default_factory=dict)
    """Upstream stream parts the normalizers ignored as harmless, by kind."""
    opened: bool = True
    """False for a run no target served (an HTTP error answered it; no stream existed)."""
    response_id: str | None = None
    """The provider's id of its (last) response, when it gave one."""

    @property
    def served_model(self) -> str:
        """The model as the provider reported it."""
        return self.final.model

    @property
    def status(self) -> FinalStatus:
        return self.final.status

    @property
    def stop_reason(self) -> StopReason | None:
        return self.final.stop_reason

    @property
    def error(self) -> ErrorData | None:
        return self.final.error

    @property
    def usage(self) -> Usage:
        """Summed over the steps, whatever the provider reported (also on error or cancel)."""
        return self.final.usage

    @property
    def steps(self) -> int:
        return self.final.steps

    @property
    def max_steps_reached(self) -> bool:
        return self.final.max_steps_reached

    @property
    def validation(self) -> ValidationData | None:
        """The validation gate's verdict summary; None when no validator applied."""
        return self.final.validation

    @property
    def events(self) -> int:
        """Events appended to the stream log, `start` and `final` included."""
        return sum(self.event_counts.values())

    @property
    def error_code(self) -> str | None:
        return self.error["code"] if self.error is not None else None

    def log_fields(self) -> dict[str, Any]:
        """The run's fields of a request log line (never content)."""
        fields: dict[str, Any] = {
            "stream_id": self.stream_id,
            "stream_status": self.status,
            "stop_reason": self.stop_reason,
            "ttft_ms": round(self.ttft * 1000, 3) if self.ttft is not None else None,
            "run_ms": round(self.duration * 1000, 3),
            "input_tokens": self.usage.input_tokens,
            "output_tokens": None if self.usage.output_unknown else self.usage.output_tokens,
            "events": self.events,
            "steps": self.steps,
            "tools_run": self.tools_run,
        }
        if self.error is not None:
            fields["error_code"] = self.error["code"]
        if self.final.cache is not None:
            fields["cache"] = "hit"
        if self.validation is not None:
            fields["validation"] = _without_content(self.validation)
        return fields


def _without_content(validation: ValidationData) -> dict[str, Any]:
    """The validation summary for the log: a block names the validator and the code, never the
    reason (a reason may quote the matched text; it stays in the response and the transcript)."""
    if "blocked" not in validation:
        return dict(validation)
    return {**validation, "blocked": {"validator": validation["blocked"]["validator"], "code": "validation_failed"}}


RunObserver = Callable[[RunReport], None]
"""Called once with each run's report, when the run ended. Must not block (see the module)."""


def notify(observers: Iterable[RunObserver], report: RunReport, logger: Any) -> None:
    """Hand `report` to every observer; one that raises is logged (type only) and ignored."""
    for observer in observers:
        try:
            observer(report)
        except Exception as exc:
            logger.error("run_observer_failed", stream_id=report.stream_id, exception=type(exc).__name__)
