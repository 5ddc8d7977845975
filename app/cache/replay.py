"""The run a cache hit (or a collapsed request) starts: recorded events, not an upstream.

`ReplayRun` is a `Run` (app/run.py) whose steps read a `ReplaySource` instead of a provider: the
events go through the request's own validation gate into a new stream log, so every reader (SSE,
JSON, facades, subscriptions) sees the same stream a miss gives, under its own stream id, with
the same cancellation and the same `final` guarantee. Its final is the original's (usage and
message as recorded), with this gate's validation summary and `cache: {hit, age_s}`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Protocol

from app.cache.entry import CachedRun
from app.core.errors import ErrorData, FinalStatus
from app.core.events import FinalEvent, StartEvent, StreamEvent
from app.core.patches import Patch
from app.run import Run, RunPlan
from app.streams.frames import decode_frames
from app.streams.log import StreamLog

__all__ = ["EntrySource", "FollowSource", "ReplayRun", "ReplaySource"]


class ReplaySource(Protocol):
    charged: bool
    """The hit counts against the key's budget and tokens per minute (its rule's `charge`)."""

    def batches(self, started: float) -> AsyncIterator[list[StreamEvent]]: ...

    def final(self) -> FinalEvent:
        """The original's final, once `batches` ended."""

    @property
    def age(self) -> float: ...


class EntrySource:
    """A stored answer: at once, or `paced` as recorded (its first content at the original's
    time to first token, the rest spread over the rest of its duration)."""

    hit = True

    def __init__(self, cached: CachedRun, *, paced: bool, charged: bool) -> None:
        self.cached, self.paced, self.charged = cached, paced, charged

    @property
    def age(self) -> float:
        return self.cached.age

    async def batches(self, started: float) -> AsyncIterator[list[StreamEvent]]:
        events = self.cached.events
        if not self.paced or not events:
            yield events
            return
        first = self.cached.ttft or 0.0
        step = max(0.0, self.cached.duration - first) / len(events)
        for i, event in enumerate(events):
            delay = started + first + i * step - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            yield [event]

    def final(self) -> FinalEvent:
        return self.cached.final


class FollowSource:
    """An identical run in flight on this replica: its log's events as they are released."""

    age = 0.0

    def __init__(self, log: StreamLog, *, charged: bool) -> None:
        self.log, self.charged = log, charged

    async def batches(self, started: float) -> AsyncIterator[list[StreamEvent]]:
        async for frames in self.log.follow(0):
            events = decode_frames(frames)
            if events:
                yield events

    def final(self) -> FinalEvent:
        assert self.log.final is not None
        return self.log.final


class _NoUpstream:
    """A replay reads no provider: the `upstream` a `Run` closes at its end."""

    def __aiter__(self) -> AsyncIterator[list[Patch]]:
        raise RuntimeError("a replay has no upstream")

    async def aclose(self) -> None:
        return None


class ReplayRun(Run):
    def __init__(self, plan: RunPlan, *, source: ReplaySource, **parts: object) -> None:
        super().__init__(plan, upstream=_NoUpstream(), **parts)  # type: ignore[arg-type]
        self.source = source

    async def _steps(self) -> None:
        """`start`, the recorded events through this run's gate, the validators' last word. The
        text before a step's tool results is closed first, as the original's tool loop did."""
        log, gate = self.log, self.gate
        self._emit([StartEvent(stream_id=self.stream_id, model=self.plan.model, provider=self.plan.provider)])
        in_results = False
        async for batch in self.source.batches(self.plan.started):
            pending: list[StreamEvent] = []
            for event in batch:
                results = event.type == "tool_result"
                if results and not in_results:
                    self._emit(await gate.admit_all(pending) + await gate.close_text())
                    pending = []
                in_results = results
                pending.append(event)
            released = await gate.admit_all(pending)
            if released:
                opening = self.ttft is None
                self._emit(released)
                if opening and self.ttft is not None:  # a hit's first content goes out before the rest
                    await log.hand_over()
                if log.lagging:
                    await log.room()
        self._emit(await gate.finish())

    def _final(self, status: FinalStatus, error: ErrorData | None = None) -> FinalEvent:
        if status != "ok":
            return super()._final(status, error)
        source = self.source
        original = source.final()
        if original.status != "ok":  # the run followed ended otherwise (cancelled, failed): so does this one
            return replace(original, validation=self.gate.summary(), attempts=())
        return replace(original, validation=self.gate.summary(), attempts=(),
                       cache={"hit": True, "age_s": round(source.age, 3), "charged": source.charged})
