"""Routing strategies: which targets are tried, in what order, and which one serves.

A strategy is a function of the route's targets and `chain(target)`, which tries one target
(retried with backoff while that can help) up to its first content and gives back what it opened,
or raises `TargetFailed`. The first target to reach content serves the run.
- `in_order`: one after another, the next only when the one before failed (fallback);
- `hedged`: the next also starts whenever the running ones have produced nothing for
  `hedge_after`; the first to reach content wins and the others are cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.errors import GatewayError
from app.core.patches import Patch
from app.providers.base import PatchStream
from app.routing.errors import CircuitOpen
from app.routing.targets import Target

__all__ = ["Opened", "TargetFailed", "hedged", "in_order"]


@dataclass(slots=True)
class Opened:
    """A target that reached its first content (or its end): what was read of it so far."""

    target: Target
    upstream: PatchStream
    iterator: Any
    buffered: list[list[Patch]]
    ended: bool
    failure: BaseException | None = None
    """A failure no retry or fallback can help (the prompt blocked, a bug), read before the first
    content: the run reports it after `start`, as it did before routing existed."""


class TargetFailed(Exception):
    """A target gave up; `stop`: no other target may be tried either (the caller's fault)."""

    def __init__(self, error: GatewayError, *, stop: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.stop = stop


Chain = Callable[[Target], Awaitable[Opened]]
Discard = Callable[[Opened], Awaitable[None]]


def _worse(last: TargetFailed | None, failed: TargetFailed) -> TargetFailed:
    """The failure to report when none served: a skipped target tells less than a real failure."""
    if last is not None and isinstance(failed.error, CircuitOpen):
        return last
    return failed


async def in_order(targets: Sequence[Target], chain: Chain) -> Opened:
    last: TargetFailed | None = None
    for target in targets:
        try:
            return await chain(target)
        except TargetFailed as failed:
            if failed.stop:
                raise
            last = _worse(last, failed)
    assert last is not None
    raise last


async def hedged(targets: Sequence[Target], chain: Chain, *, hedge_after: float, discard: Discard) -> Opened:
    """Start the next target whenever the running ones have produced no content for
    `hedge_after` (or one failed); the first to reach content wins, the rest are cancelled."""
    race = _Race(list(targets), chain)
    race.launch()
    try:
        while race.running:
            done, _ = await asyncio.wait(race.running, timeout=hedge_after if race.queue else None,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                race.launch()  # the hedge: nothing yet from the running ones
                continue
            winner = await race.settle(done, discard)
            if winner is not None:
                return winner
        assert race.last is not None
        raise race.last
    finally:
        await race.cancel_rest(discard)


class _Race:
    """The hedged attempts in flight, the targets not started yet, and the worst failure so far."""

    def __init__(self, queue: list[Target], chain: Chain) -> None:
        self.queue = queue
        self.chain = chain
        self.running: set[asyncio.Task[Opened]] = set()
        self.last: TargetFailed | None = None

    def launch(self) -> None:
        self.running.add(asyncio.ensure_future(self.chain(self.queue.pop(0))))

    async def settle(self, done: set[asyncio.Task[Opened]], discard: Discard) -> Opened | None:
        """The attempts that ended: the winner if one reached content (a second one at once is
        discarded); a failure frees its slot for the next target."""
        winner: Opened | None = None
        for task in done:
            self.running.discard(task)
            exc = task.exception()
            if exc is None:
                if winner is None:
                    winner = task.result()
                else:  # two at once: one answer only
                    await discard(task.result())
                continue
            if not isinstance(exc, TargetFailed) or exc.stop:
                raise exc
            self.last = _worse(self.last, exc)
            if self.queue:
                self.launch()
        return winner

    async def cancel_rest(self, discard: Discard) -> None:
        for task in self.running:
            task.cancel()
        for task in self.running:  # each closes its upstream request as it unwinds
            try:
                opened = await task
            except BaseException:
                continue
            await discard(opened)
