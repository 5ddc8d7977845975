"""Admission and drain: how much work one process takes on, and how it lets go of it.

- Load shedding: at most `max_active_runs` runs at once; past it a new run is refused at once with
  503 and Retry-After (no queue without bound), and /readyz says the process is saturated.
- Graceful drain (SIGTERM): /readyz turns 503 and new runs are refused at once; running streams get
  `grace` seconds to finish; those still running then end with
  `final{status: "error", error.code: "shutdown", retryable: true}`, their upstreams closed.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from app.core.errors import GatewayError

__all__ = ["Admission", "Overloaded", "ShuttingDown"]

_CUT_WAIT = 2.0  # after the cut, how long the runs get to write their final and close upstreams


class Overloaded(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


class ShuttingDown(GatewayError):
    status = 503
    code = "shutdown"
    retryable = True


class Abortable(Protocol):
    def abort(self, error: GatewayError) -> None: ...


class Admission:
    def __init__(self, *, max_active: int) -> None:
        self.max_active = max_active
        self.active: set[Abortable] = set()
        self.draining = False
        self.shed = 0
        self._changed: asyncio.Event | None = None

    @property
    def saturated(self) -> bool:
        return len(self.active) >= self.max_active

    def admit(self, run: Abortable) -> None:
        """Take on a run, or refuse it (503) when draining or full."""
        if self.draining:
            raise ShuttingDown("the gateway is shutting down; retry on another replica", retry_after="1")
        if self.saturated:
            self.shed += 1
            raise Overloaded(f"the gateway is at its limit of {self.max_active} active runs; retry shortly",
                             retry_after="1")
        self.active.add(run)

    def release(self, run: Abortable) -> None:
        self.active.discard(run)
        if self._changed is not None:
            self._changed.set()

    async def drain(self, grace: float) -> int:
        """Refuse new runs, let the running ones finish within `grace` seconds, then cut the rest.
        Returns how many were cut."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await self._until_idle(deadline)
        cut = list(self.active)
        for run in cut:
            run.abort(ShuttingDown("the gateway shut down before the run finished; retry it", retryable=True))
        await self._until_idle(loop.time() + _CUT_WAIT)
        return len(cut)

    async def _until_idle(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while self.active and (left := deadline - loop.time()) > 0:
            self._changed = changed = asyncio.Event()
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                return
