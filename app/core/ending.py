"""The end of a run, built in one place: its `final` event and its `RunReport`.

`final_event` is the one maker of a final: a run's (app/run.py, its cached replay included), a run
no target served (app/opener.py), one provider response's (`Released.final`), the final a replica
writes for a stream whose writer is gone (app/streams), a cached final read back (app/cache). The
rules every final keeps are here: one that is not ok takes its status's stop reason, whatever the
provider said; one that released nothing has an empty message and usage.

`RunEnding` is what a run's end names that is fixed when the run opens: the model as asked, the
provider, the request and key, the start, the observers (a run's `RunPlan` is one). It makes the
bare final of a run that has nothing else to tell, and, from a final, the run's `RunReport`
handed to the observers: a run that ended and a run that never opened are reported alike.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, get_args

from app.core.content_filter import ContentFilterData
from app.core.errors import AttemptData, ErrorData, FinalStatus
from app.core.events import STOP_REASON_FOR_STATUS, AssistantMessage, FinalEvent, StopReason, Usage
from app.core.messages import Message
from app.core.report import RunObserver, RunReport, notify
from app.core.transcript import Transcript
from app.core.validation_data import ValidationData

__all__ = ["RouteNames", "RoutePart", "RunEnding", "final_event", "final_status"]

_STATUSES: frozenset[str] = frozenset(get_args(FinalStatus))


class RoutePart(Protocol):
    """What a route tells its run's final (app/routing's `RouteOutcome`)."""

    @property
    def attempts(self) -> tuple[AttemptData, ...]: ...

    @property
    def route(self) -> str | None: ...

    @property
    def target(self) -> str | None: ...


@dataclass(slots=True, frozen=True, kw_only=True)
class RouteNames:
    """A route's names without its attempts: a final read back (a replay made no attempts)."""

    attempts: tuple[AttemptData, ...] = ()
    route: str | None = None
    target: str | None = None


def final_status(value: str) -> FinalStatus:
    """`value` as a final's status; ValueError if it is none (a status given as text)."""
    if not _is_final_status(value):
        raise ValueError(f"not a final status: {value!r}")
    return value


def _is_final_status(value: str) -> TypeGuard[FinalStatus]:
    return value in _STATUSES


def final_event(status: FinalStatus, error: ErrorData | None = None, *, model: str, provider: str,
                message: AssistantMessage | None = None, usage: Usage | None = None,
                stop_reason: StopReason | None = None, route: RoutePart | None = None, steps: int = 1,
                max_steps_reached: bool = False, messages: tuple[Message, ...] = (),
                validation: ValidationData | None = None,
                content_filter: ContentFilterData | None = None) -> FinalEvent:
    """The one maker of a `final` (the module says who calls it). `stop_reason` is an ok run's;
    any other status gives its own. No message or usage: nothing was released or counted."""
    return FinalEvent(
        status=status, error=error, model=model, provider=provider,
        message=message if message is not None else AssistantMessage(),
        usage=usage if usage is not None else Usage(),
        stop_reason=stop_reason if status == "ok" else STOP_REASON_FOR_STATUS[status],
        steps=steps, max_steps_reached=max_steps_reached, messages=messages, validation=validation,
        attempts=route.attempts if route is not None else (), route=route.route if route is not None else None,
        target=route.target if route is not None else None, content_filter=content_filter)


@dataclass(slots=True, frozen=True, kw_only=True)
class RunEnding:
    """What a run's end names, fixed when it opens. Times: `started` is `time.perf_counter()`
    (durations), `started_at` wall-clock (`time.time()`)."""

    model: str
    """As the caller asked for it (for a route, the target that served)."""
    provider: str
    request_id: str | None = None
    owner: str | None = None
    """The API key id that started the run (app/auth)."""
    started: float = field(default_factory=time.perf_counter)
    started_at: float = field(default_factory=time.time)
    observers: Sequence[RunObserver] = ()
    """Told of the run's report when it ends: the gateway's (metrics, records) and the request's own
    (the key's accounts)."""

    def bare_final(self, status: FinalStatus, error: ErrorData, *, served_model: str | None = None, steps: int = 1,
                   route: RoutePart | None = None) -> FinalEvent:
        """A final that tells no content: the run failed to build (or encode) its own, or no target
        served it. `served_model`: the model as sent to the provider, when it differs."""
        return final_event(status, error, model=served_model or self.model, provider=self.provider, steps=steps,
                           route=route)

    def end(self, final: FinalEvent, *, stream_id: str, transcript: Transcript, logger: Any,
            events: Mapping[str, int] | None = None, ignored: Mapping[str, int] | None = None, tools_run: int = 0,
            ttft: float | None = None, response_id: str | None = None, opened: bool = True) -> RunReport:
        """The run's report, from its final (in the log, or answered as an HTTP error when it never
        `opened`), handed to every observer (one that raises is logged with `logger`)."""
        report = RunReport(
            stream_id=stream_id, request_id=self.request_id, owner=self.owner, model=self.model,
            provider=self.provider, started_at=self.started_at, duration=time.perf_counter() - self.started,
            final=final, transcript=transcript, event_counts=dict(events or {}), ignored=dict(ignored or {}),
            tools_run=tools_run, ttft=ttft, response_id=response_id, opened=opened)
        notify(self.observers, report, logger)
        return report
