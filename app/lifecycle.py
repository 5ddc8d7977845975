"""Admission and drain: how much work one process takes on, and how it lets go of it.

- Load shedding: at most `max_active_runs` runs at once, and none while the event loop lags past
  `max_loop_lag` (the process's own measured capacity: `LoopLag`); past either a new run is refused
  at once with 503 and Retry-After, before it starts (no queue without bound, never a failure
  mid-way), and /readyz says the process is saturated.
- Graceful drain (SIGTERM): /readyz turns 503 and new runs are refused at once; running streams get
  `grace` seconds to finish; those still running then end with
  `final{status: "error", error.code: "shutdown", retryable: true}`, their upstreams closed.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import weakref
from collections.abc import Awaitable, Callable
from types import FrameType

from app.core.errors import GatewayError
from app.observability import get_logger

__all__ = ["FINALS_SECONDS", "SERVER_CLOSE_SECONDS", "Admission", "LoopLag", "Overloaded", "ShuttingDown",
           "drain_budget", "drain_on_stop_signal"]

FINALS_SECONDS = 2.0
"""After the grace, the cut streams get up to this long to write their finals (app/run_tasks.py)."""
SERVER_CLOSE_SECONDS = 5.0
"""Then uvicorn's graceful shutdown closes the connections left within this (`foundry-gateway serve`)."""


def drain_budget(stop_grace: float) -> float:
    """The drain grace that fits in an orchestrator's stop grace (SIGTERM to SIGKILL), one second spare."""
    return stop_grace - FINALS_SECONDS - SERVER_CLOSE_SECONDS - 1.0


def drain_grace(stop_grace: float, shutdown_grace: float | None) -> float:
    """The drain grace for FOUNDRY_STOP_GRACE_SECONDS: the one given (`shutdown_grace`, when it fits)
    or the largest that fits; ValueError naming the setting when none does."""
    budget = drain_budget(stop_grace)
    if shutdown_grace is None:
        if budget < 0:
            raise ValueError(f"FOUNDRY_STOP_GRACE_SECONDS: {stop_grace:g} s leaves no time to drain "
                             f"(at least {drain_budget(0) * -1:g} s)")
        return budget
    if shutdown_grace > budget:
        raise ValueError(f"FOUNDRY_SHUTDOWN_GRACE_SECONDS: {shutdown_grace:g} s does not fit in "
                         f"FOUNDRY_STOP_GRACE_SECONDS {stop_grace:g} s (at most {max(budget, 0):g})")
    return shutdown_grace


class Overloaded(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


class ShuttingDown(GatewayError):
    status = 503
    code = "shutdown"
    retryable = True


class LoopLag:
    """How late this event loop runs its callbacks: a timer that asks to wake every `interval` and
    notes by how much it woke late. One per loop (`of`), started by the app's lifespan.

    Two readers, two readings. Admission reads `current`, which counts a late wake-up at once: it
    refuses new runs while the loop is past its bound (the process is at its own capacity), and a
    stall is reason enough to stop taking work. A Redis reply timeout (app/streams/redis/link.py)
    reads `late_total`, the lateness summed over every wake-up: what it grew by while a reply was
    awaited is how long the loop itself held that wait up, so the wait is stretched by that much
    and no more. A reply that arrived in time but was read late is not judged a dead Redis, and a
    stall before the wait began (which the point reading `current` still shows) stretches nothing."""

    _loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag] = weakref.WeakKeyDictionary()

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.current = 0.0
        """The lateness of the last wake-up (seconds); decays as on-time wake-ups follow."""
        self.late_total = 0.0
        """The lateness of every wake-up so far, summed (seconds)."""
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopLag | None:
        """The running monitor of `loop`, if one was started."""
        return cls._loops.get(loop)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loops[loop] = self
        self._task = loop.create_task(self._measure(loop), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait((self._task,))
            self._loops.pop(self._task.get_loop(), None)

    async def _measure(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            expected = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            self.note(max(0.0, loop.time() - expected))

    def note(self, late: float) -> None:
        """One wake-up, `late` seconds after it was due."""
        # a single late wake-up counts at once; on-time ones bring it down over a few ticks
        self.current = late if late > self.current else self.current * 0.5 + late * 0.5
        self.late_total += late


RefusalObserver = Callable[[str], None]
"""Told of each run refused at admission, with why: `draining`, `active_runs` or `loop_lag`."""


class Admission:
    def __init__(self, *, max_active: int, max_lag: float | None = None,
                 on_refuse: RefusalObserver | None = None) -> None:
        self.max_active = max_active
        self.max_lag = max_lag
        """Refuse new runs while the loop lags more than this (seconds); None: no such bound."""
        self.on_refuse = on_refuse
        self.active: set[object] = set()
        """The runs admitted and not yet ended (their handles)."""
        self.draining = False
        self.shed = 0
        self._changed: asyncio.Event | None = None

    @property
    def saturated(self) -> bool:
        return len(self.active) >= self.max_active or self._lagging() is not None

    def _lagging(self) -> float | None:
        """The loop's lag when it is past `max_lag`, else None."""
        if self.max_lag is None:
            return None
        lag = LoopLag.of(asyncio.get_running_loop())
        return lag.current if lag is not None and lag.current > self.max_lag else None

    def admit(self, run: object) -> None:
        """Take on a run, or refuse it (503) when draining, full or lagging."""
        if self.draining:
            self._refused("draining")
            raise ShuttingDown("the gateway is shutting down; retry on another replica", retry_after="1")
        if len(self.active) >= self.max_active:
            self._refused("active_runs")
            raise Overloaded(f"the gateway is at its limit of {self.max_active} active runs; retry shortly",
                             retry_after="1")
        lag = self._lagging()
        if lag is not None:
            self._refused("loop_lag")
            raise Overloaded(f"the gateway is at its capacity (its event loop runs {lag * 1000:.0f} ms late, "
                             f"over FOUNDRY_MAX_LOOP_LAG_SECONDS); retry shortly", retry_after="1")
        self.active.add(run)

    def _refused(self, reason: str) -> None:
        if reason != "draining":
            self.shed += 1
        if self.on_refuse is not None:
            self.on_refuse(reason)

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
