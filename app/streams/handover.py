"""A run's first content goes to its client before the run reads on.

A run and the response that reads its log are two tasks. A run whose whole answer was already read
(a short answer from a fast upstream, a cache hit) would keep the loop until it had built its
final, its report and its record, and only then would its client get a byte. So once its first
content is in, the run gives its reader a few loop turns to take it, and send it (`hand_over`).
Bounded by turns, not time: a reader that never comes costs the run a few turns and no timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["HAND_OVER_TURNS", "hand_over"]

HAND_OVER_TURNS = 8
"""The loop turns given. The client's response takes the first content in 3 (the route waking from
its wait for the run to open, the response starting its sender, the sender's first read), counted
under uvicorn for the stream log and a same-wire relay alike; the rest is margin."""


async def hand_over(taken: Callable[[], bool]) -> None:
    """Until `taken()` (the reader took what is there, or nobody will), at most HAND_OVER_TURNS turns."""
    for _ in range(HAND_OVER_TURNS):
        if taken():
            return
        await asyncio.sleep(0)
