"""Admission and drain: how much work one process takes on, and how it lets go of it.

- Load shedding: at most `max_active_runs` runs at once; past it a new run is refused at once with
  503 and Retry-After (no queue without bound), and /readyz says the process is saturated.
- Graceful drain (SIGTERM): /readyz turns 503 and new runs are refused at once; running streams get
  `grace` seconds to finish; those still running then end with
  `final{status: "error", error.code: "shutdown", retryable: true}`, their upstreams closed.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType

from app.core.errors import GatewayError
from app.observability import get_logger

__all__ = ["FINALS_SECONDS", "SERVER_CLOSE_SECONDS", "Admission", "Overloaded", "ShuttingDown", "drain_budget",
           "drain_on_stop_signal"]

FINALS_SECONDS = 2.0
"""After the grace, the cut streams get up to this long to write their finals (app/pipeline.py)."""
SERVER_CLOSE_SECONDS = 5.0
"""Then uvicorn's graceful shutdown closes the connections left within this (`foundry-gateway serve`)."""


def drain_budget(stop_grace: float) -> float:
    """The drain grace that fits in an orchestrator's stop grace (SIGTERM to SIGKILL), one second spare."""
    return stop_grace - FINALS_SECONDS - SERVER_CLOSE_SECONDS - 1.0

class Overloaded(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


class ShuttingDown(GatewayError):
    status = 503
    code = "shutdown"
    retryable = True


class Admission:
    def __init__(self, *, max_active: int) -> None:
        self.max_active = max_active
        self.active: set[object] = set()
        """The runs admitted and not yet ended (their handles)."""
        self.draining = False
        self.shed = 0
        self._changed: asyncio.Event | None = None

    @property
    def saturated(self) -> bool:
        return len(self.active) >= self.max_active

    def admit(self, run: object) -> None:
        """Take on a run, or refuse it (503) when draining or full."""
        if self.draining:
            raise ShuttingDown("the gateway is shutting down; retry on another replica", retry_after="1")
        if self.saturated:
            self.shed += 1
            raise Overloaded(f"the gateway is at its limit of {self.max_active} active runs; retry shortly",
                             retry_after="1")
        self.active.add(run)

    def release(self, run: object) -> None:
        self.active.discard(run)
        if self._changed is not None:
            self._changed.set()

    async def until_idle(self, deadline: float) -> None:
        """Until no run is active or the loop's clock passes `deadline`."""
        loop = asyncio.get_running_loop()
        while self.active and (left := deadline - loop.time()) > 0:
            self._changed = changed = asyncio.Event()
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                return


def drain_on_stop_signal(drain: Callable[[], Awaitable[object]]) -> Callable[[], None]:
    """Make SIGTERM (and SIGINT) drain before the server stops; returns the function that undoes it.

    The server's own handler (uvicorn's: stop accepting, close connections) runs only after
    `drain()`, so that meanwhile /readyz can answer 503 and new runs be refused while the running
    ones finish. A second signal during the drain goes to the server's handler at once.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signals are the main thread's
    return _StopSignals(drain).restore


class _StopSignals:
    """The handlers `drain_on_stop_signal` installs, and what they replaced."""

    def __init__(self, drain: Callable[[], Awaitable[object]]) -> None:
        self.drain = drain
        self.loop = asyncio.get_running_loop()
        self.previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.tasks: list[asyncio.Task[None]] = []
        for sig in self.previous:
            signal.signal(sig, self.handler)

    def handler(self, sig: int, frame: FrameType | None) -> None:
        self.loop.call_soon_threadsafe(self.start, sig)

    def start(self, sig: int) -> None:
        # Said when the signal arrives: the drain's own line comes only when it ends, a grace later.
        log = get_logger("foundry.lifecycle")
        if self.tasks:  # already draining: stop now
            log.warning("stop_signal", signal=signal.Signals(sig).name, then="stop now (a second signal)")
            self.pass_on(sig)
            return
        log.info("stop_signal", signal=signal.Signals(sig).name, then="drain: not ready, new runs refused")
        self.tasks.append(self.loop.create_task(self.drain_then_pass_on(sig), name="drain"))

    async def drain_then_pass_on(self, sig: int) -> None:
        try:
            await self.drain()
        finally:
            self.pass_on(sig)

    def pass_on(self, sig: int) -> None:
        before = self.previous[signal.Signals(sig)]
        if callable(before):
            before(sig, None)
        else:  # nobody else listens: the default action, after the drain
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    def restore(self) -> None:
        for sig, before in self.previous.items():
            if signal.getsignal(sig) == self.handler:
                signal.signal(sig, before)
        for task in self.tasks:
            task.cancel()
