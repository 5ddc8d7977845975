"""What the rest of the gateway asks of a stream store, in two parts, so each caller takes only
the part it uses:

- `StreamStore`, the event log: create a log for a run, read (replay then follow), transcript,
  cancel, the API key that owns a stream. The API and the pipeline take this.
- `RecordsOutbox`, the run records a shared store carries beside the stream so that another replica
  can write them if this one dies: staged with the final, forgotten once the database holds them,
  and those another replica left handed to this one's writer (app/streams/redis/outbox.py).

`MemoryStreamStore` (app/streams/memory.py) and `RedisStreamStore` (app/streams/redis/) implement
both (`StreamBackend`); on one process the outbox has nothing to do. What a shared store hands on,
the records another replica's outbox left (`SweptHook`) and the runs it ends for a replica that
died (`ClaimHook`, so that somebody records them and frees their key's slot), it is given where it
is built (app/main.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from app.streams.errors import CancelOutcome, RunTags
from app.streams.log import Canceller, StreamLog, StreamRecord

__all__ = ["RecordsOutbox", "StreamBackend", "StreamStore"]


class StreamStore(Protocol):
    """The event log of the runs: what the API and the pipeline use (async: a store may be remote)."""

    name: str
    """`memory` or `redis`: named by /readyz and the metrics."""

    @property
    def total_bytes(self) -> int:
        """The bytes retained by the logs this process holds (the metrics' gauge)."""

    def __len__(self) -> int:
        """The streams this process holds."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def ping(self) -> bool: ...

    def sweep(self) -> int:
        """Forget the finished streams past their TTL; how many."""

    async def create(self, *, model: str, provider: str, owner: str | None = None,
                     keep_events: bool = False, held: bool = False, run: RunTags | None = None,
                     canceller: Canceller | None = None) -> StreamLog:
        """A log for a new run on this replica, owned by the API key `owner` (None in open mode),
        keeping its events beside its frames when a reader translates them (`keep_events`), held
        for the reader that owns the run (`held`, `StreamLog.room`); StoreFull / StoreUnavailable
        (503) when it cannot. `run` is what another replica needs to end and record the run if
        this one dies (a shared store keeps it)."""

    def get(self, stream_id: str) -> StreamLog | None:
        """The log of a stream held by this process (None elsewhere or unknown)."""

    async def open(self, stream_id: str, after: int) -> AsyncIterator[bytes] | None:
        """A reader: frames after `after`, then live ones until the final; None for an unknown id.
        Raises ReplayUnavailable (410) when events after `after` are no longer retained, CursorAhead
        when `after` is past the last event, FinalDelivered when it is a finished stream's final."""

    async def transcript(self, stream_id: str) -> StreamRecord | None: ...

    async def key_owner(self, stream_id: str) -> tuple[bool, str | None]:
        """Whether the stream exists (here or on another replica) and the API key that owns it."""

    async def cancel(self, stream_id: str) -> CancelOutcome | None:
        """End a running stream wherever it runs; None for an unknown id."""

    async def recovering(self) -> bool:
        """The store lost or could not reach its state moments ago: a stream it does not hold
        now may be written back within a lease by the replica that holds it (a shared store)."""


class RecordsOutbox(Protocol):
    """Run records kept beside their streams until the records database holds them (a shared
    store keeps them only when it was given where swept records go: app/streams/redis/outbox.py)."""

    def stage_record(self, stream_id: str, payload: Callable[[], bytes]) -> None:
        """The run's record, as its final is appended: a shared store writes it with the final,
        so that another replica can write it to the database if this one cannot. `payload`
        encodes it, called only by a store that keeps it (the others spend nothing on it)."""

    async def records_written(self, stream_ids: Sequence[str]) -> None:
        """Those runs' records are in the database: a shared store forgets them."""


class StreamBackend(StreamStore, RecordsOutbox, Protocol):
    """A whole store, as built at start-up (app/main.py): the composition root hands each part on."""
