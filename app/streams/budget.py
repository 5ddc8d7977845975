"""The byte budget the logs of one store share (app/streams/log.py, app/streams/memory.py)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Budget"]


class Budget:
    """The bytes retained by all the logs of a store, against one limit; `relieve` (the store's
    eviction of finished streams) runs when a log's growth takes the total past it."""

    __slots__ = ("limit", "used", "relieve")

    def __init__(self, limit: int, relieve: Callable[[str | None], None]) -> None:
        self.limit = limit
        self.used = 0
        self.relieve = relieve

    def grow(self, delta: int, owner: str | None = None) -> None:
        """`owner`: the API key of the log that grew (its own finished streams are evicted first)."""
        self.used += delta
        if self.used > self.limit:
            self.relieve(owner)
