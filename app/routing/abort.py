"""Ending one task's wait from outside with an error: how a deadline or a drain ends a routed run
where it waits (its upstream read, or the opening of its targets)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.core.errors import GatewayError

__all__ = ["Abort"]


class Abort:
    """`trip(error)` records the error and, while the task `waiting`, cancels it; the task, on that
    CancelledError, asks `caught()` for the error to raise instead. Only a cancel that was ours
    alone turns into the error: the caller's own cancellation still propagates."""

    __slots__ = ("error", "task", "waiting", "_cancelled")

    def __init__(self) -> None:
        self.error: GatewayError | None = None
        self.task: asyncio.Task[Any] | None = None
        self.waiting = False
        self._cancelled = False

    def trip(self, error: GatewayError) -> bool:
        """Record `error`; cancel the task if it is waiting (whether it was)."""
        self.error = error
        if self.waiting and self.task is not None and not self._cancelled:
            self._cancelled = True
            self.task.cancel()
            return True
        return False

    def caught(self) -> GatewayError | None:
        """In the task, on CancelledError: the error to raise instead, or None to let it go on."""
        if not self._cancelled:
            return None
        self._cancelled = False
        assert self.task is not None and self.error is not None
        return self.error if self.task.uncancel() == 0 else None
