"""The patch stream a routed run reads: the winning attempt's patches read before the first
content (buffered by the opener), then the upstream's own, under the run's idle and total
deadlines, and abortable (graceful drain).

Deadlines without a timer per chunk: one timer handle per stream is re-armed only when it fires.
When it finds the upstream silent for `idle` (or the run past its `total`) while the run is
waiting on a read, it cancels that read and the read raises `DeadlineExceeded`; the cancelled read
closes the upstream response. Time the run spends elsewhere (validators, a slow client) is not
held against the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from app.core.errors import GatewayError
from app.core.patches import Patch
from app.providers.base import PatchStream
from app.routing.errors import DeadlineExceeded

__all__ = ["RoutedStream"]


class RoutedStream:
    __slots__ = ("_upstream", "_iterator", "_buffered", "_ended", "_failure", "_idle", "_total", "_total_at", "_error",
                 "_task", "_reading", "_tripped", "_last", "_handle", "_loop", "_closed", "_on_failure")

    def __init__(self, *, upstream: PatchStream, iterator: AsyncIterator[list[Patch]], buffered: list[list[Patch]],
                 ended: bool, failure: BaseException | None = None, idle: float, total: float,
                 total_at: float, on_failure: Callable[[GatewayError], None] | None = None) -> None:
        self._upstream = upstream
        self._iterator = iterator
        self._buffered = buffered
        self._ended = ended
        self._failure = failure
        self._idle = idle
        self._total = total
        self._total_at = total_at
        self._error: GatewayError | None = None
        self._task: asyncio.Task[Any] | None = None
        self._reading = False
        self._tripped = False  # we cancelled the reading task
        self._last = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._on_failure = on_failure
        """Told of the upstream's own failures after the first content (the circuit breaker)."""

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        try:
            buffered, self._buffered = self._buffered, []
            for batch in buffered:
                yield batch
            if self._failure is not None:
                raise self._failure
            if self._ended:
                return
            loop = self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()  # read from one task, as the run does (see _trip)
            now = loop.time
            self._last = now()
            self._arm(min(self._last + self._idle, self._total_at))
            iterator = self._iterator
            while True:
                if self._error is not None:
                    raise self._error
                self._reading = True
                try:
                    batch = await iterator.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if self._tripped:
                        self._tripped = False
                        error = self._error
                        assert self._task is not None and error is not None
                        if self._task.uncancel() == 0:  # only ours: the deadline or the abort, not the caller
                            if isinstance(error, DeadlineExceeded) and error.deadline == "idle":
                                self._failed(error)
                            raise error from None
                    raise
                except GatewayError as exc:
                    self._failed(exc)
                    raise
                finally:
                    self._reading = False
                self._last = now()
                yield batch
        finally:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            await self.aclose()

    def _failed(self, error: GatewayError) -> None:
        if self._on_failure is not None:
            self._on_failure(error)

    def abort(self, error: GatewayError) -> None:
        """End the stream with `error` now (or at its next read, if the run is not reading)."""
        if self._error is None:
            self._trip(error)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._iterator.aclose()  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            await self._upstream.aclose()

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        assert self._loop is not None
        self._handle = None
        now = self._loop.time()
        if now >= self._total_at:
            self._trip(DeadlineExceeded("total", self._total))
        elif not self._reading:
            self._last = now  # the run was busy elsewhere: silence counts from here
            self._arm(min(now + self._idle, self._total_at))
        elif now - self._last >= self._idle:
            self._trip(DeadlineExceeded("idle", self._idle))
        else:
            self._arm(min(self._last + self._idle, self._total_at))

    def _trip(self, error: GatewayError) -> None:
        self._error = error
        if self._reading and self._task is not None and not self._tripped:
            self._tripped = True
            self._task.cancel()
