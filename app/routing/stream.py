"""The patch stream a routed run reads: the winning attempt's patches read before the first
content (buffered by the opener), then the upstream's own, under the run's idle and total
deadlines.

Deadlines without a timer per chunk: one timer handle per stream is re-armed only when it fires.
When it finds the upstream silent for `idle` (or the run past its `total`) while the run is
waiting on a read, it cancels that read and the read raises `DeadlineExceeded`; the cancelled read
closes the upstream response. Time the run spends elsewhere (validators, a slow client) is not
held against the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import types
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from app.core.errors import GatewayError
from app.core.patches import Patch
from app.providers.base import PatchStream
from app.routing.abort import Abort
from app.routing.errors import DeadlineExceeded

__all__ = ["RoutedStream", "close_upstream"]


class RoutedStream:
    __slots__ = ("_upstream", "_iterator", "_buffered", "_ended", "_failure", "_idle", "_total", "_total_at", "_abort",
                 "_last", "_handle", "_loop", "_closed", "_on_failure", "_reading")

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
        self._abort = Abort()  # the deadlines end the read where it waits
        self._last = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._on_failure = on_failure
        """Told of the upstream's own failures after the first content (the circuit breaker)."""
        self._reading: types.AsyncGeneratorType[list[Patch], None] | None = None

    def __aiter__(self) -> AsyncGenerator[list[Patch], None]:
        reading = self._read()
        assert isinstance(reading, types.AsyncGeneratorType)
        self._reading = reading
        return reading

    async def _read(self) -> AsyncGenerator[list[Patch], None]:
        try:
            # A suspended generator keeps its locals alive: nothing it yielded stays bound here
            # while the next read waits (for a model that pauses, most of a stream's life), or it
            # would be held with the SSE events and bytes behind it (memory per open stream).
            buffered, self._buffered = self._buffered, []
            while buffered:
                yield buffered.pop(0)
            if self._failure is not None:
                raise self._failure
            if self._ended:
                return
            loop = self._loop = asyncio.get_running_loop()
            abort = self._abort
            abort.task = asyncio.current_task()  # read from one task, as the run does
            now = loop.time
            self._last = now()
            self._arm(min(self._last + self._idle, self._total_at))
            iterator = self._iterator
            while True:
                if abort.error is not None:
                    raise abort.error
                abort.waiting = True
                try:
                    batch = await iterator.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    error = abort.caught()  # only ours: the deadline, not the run's owner
                    if error is None:
                        raise
                    if isinstance(error, DeadlineExceeded) and error.deadline == "idle":
                        self._failed(error)
                    raise error from None
                except GatewayError as exc:
                    self._failed(exc)
                    raise
                finally:
                    abort.waiting = False
                self._last = now()
                yield batch
                del batch  # not held while the next read waits (above)
        finally:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            await self.aclose()

    def _failed(self, error: GatewayError) -> None:
        if self._on_failure is not None:
            self._on_failure(error)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await close_upstream(self._upstream, self._iterator)
        reading = self._reading
        if reading is not None and not reading.ag_running:
            # Left at a yield by a reader that had what it needed (the provider said it finished): closed
            # here, or the event loop's finalizer would close it later, in a task of its own.
            await reading.aclose()

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        assert self._loop is not None
        self._handle = None
        now = self._loop.time()
        if now >= self._total_at:
            self._abort.trip(DeadlineExceeded("total", self._total))
        elif not self._abort.waiting:
            self._last = now  # the run was busy elsewhere: silence counts from here
            self._arm(min(now + self._idle, self._total_at))
        elif now - self._last >= self._idle:
            self._abort.trip(DeadlineExceeded("idle", self._idle))
        else:
            self._arm(min(self._last + self._idle, self._total_at))


async def close_upstream(upstream: PatchStream, iterator: AsyncIterator[list[Patch]] | None) -> None:
    """Close a response's iterator, then the response, ignoring their failures: it is let go of."""
    if iterator is not None:
        with contextlib.suppress(Exception):
            await iterator.aclose()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        await upstream.aclose()
