"""What the owner's writer has not written yet, per stream (app/streams/redis/owner.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.streams.log import StreamLog

__all__ = ["Pending"]


@dataclass(slots=True)
class Pending:
    """The frames of one stream not yet written: (seq, frame, is_final) in order."""

    log: StreamLog
    entries: list[tuple[int, bytes, bool]] = field(default_factory=list)
    record: bytes | None = None
    """The run's record, written with its final (app/streams/redis/outbox.py)."""
