"""Ids that sort by when they were made: a stream's id and a request's own.

32 hex digits, as `uuid.uuid4().hex` gave them: 48 bits of Unix time in milliseconds, then 80 random
bits from the operating system (the layout of a version 7 UUID, without its version bits: Python 3.11's
`uuid` has no `uuid7`, which came in 3.14). A run's record is keyed by its stream id and indexed by its
request id: ids that sort by time land at the end of those B-tree indexes, where random ones land on
a random page each, one the cache may not hold and the rollback journal writes twice. On SQLite with
200,000 runs recorded (183 MB), a record cost 239 us of CPU keyed by these against 305 keyed by
random ones (`python bench/record_ids_bench.py`, docs/records.md#cost). 80 random bits keep an id
unguessable; its first digits say when its stream began, which its owner can read from the stream
itself anyway.
"""

from __future__ import annotations

import os
import time

__all__ = ["new_stream_id", "time_ordered_hex"]


def time_ordered_hex() -> str:
    """32 lowercase hex digits that sort by the millisecond they were made in."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def new_stream_id() -> str:
    """A new stream's id: `str_` and 32 hex digits that sort by time."""
    return "str_" + time_ordered_hex()
