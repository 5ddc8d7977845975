"""The background writer: records leave the run through a bounded queue and reach the database
in batches, so a slow or unreachable database never delays or breaks a stream.

Batches form by lingering: a record that finds the writer idle waits up to `linger` seconds
(FOUNDRY_RECORDS_LINGER, 0.1 s) for others, unless a full batch is already queued or someone
`flush()`es. Writing each record at once costs a transaction and a thread hop to the driver per
run, more CPU than the rest of the request path (docs/performance.md, figures behind design
choices); in batches that cost is shared.

`submit()` never waits: when the queue is full the record is dropped, counted
(`foundry_records_dropped_total{reason="queue_full"}`) and logged. A batch the database does not
take (away, locked, out of time) is dropped the same way (`reason="write_failed"`) and the writer
backs off before the next. A batch the database refuses (a value it cannot hold) is split until the
refused record is alone; that one is kept in `run_rejects` with its error, counted
(`reason="rejected"`) and logged, and the rest of the batch is written. Retention runs here too:
records older than the retention are deleted at start and then periodically.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from app.observability import get_logger
from app.records.record import RunRecord
from app.records.store import Inserted, RecordStore

__all__ = ["Committed", "RecordQueue", "RecordWriter"]

Committed = Callable[[Sequence[RunRecord], Inserted], Awaitable[None]]
"""Told after each batch commits: its records and what the insert did (the keys' new spend for the
budget counters; the runs now durable, which the stream store's outbox can forget)."""

_MAX_BACKOFF = 5.0


class RecordQueue:
    """Where records wait for the writer, and where any record is dropped (counted and logged).

    A part of its own so that what submits records can be built before the writer that takes
    them: the shared stream store hands it the runs it sweeps and claims, and the writer, built
    after that store, tells the store's outbox what it committed."""

    def __init__(self, *, size: int = 10_000, batch_size: int = 200,
                 on_drop: Callable[[str, int], None] = lambda reason, n: None) -> None:
        self.batch_size = batch_size
        self.items: asyncio.Queue[RunRecord] = asyncio.Queue(maxsize=size)
        self.hurry = asyncio.Event()
        """Set: the writer stops lingering (a full batch waits, a flush, closing)."""
        self.closing = False
        self._on_drop = on_drop
        self.log = get_logger("foundry.records")

    def submit(self, record: RunRecord) -> None:
        """Never waits: a record that finds the queue full (or the writer closing) is dropped."""
        if self.closing:
            self.drop([record], "shutting_down")
            return
        try:
            self.items.put_nowait(record)
        except asyncio.QueueFull:
            self.drop([record], "queue_full")
            return
        if self.items.qsize() >= self.batch_size:
            self.hurry.set()

    def drop(self, records: list[RunRecord], reason: str, error: BaseException | None = None) -> None:
        self.count_drop(reason, len(records))
        self.log.warning("records_dropped", reason=reason, count=len(records),
                         stream_ids=[r.stream_id for r in records[:10]],
                         error=type(error).__name__ if error is not None else None)

    def count_drop(self, reason: str, n: int) -> None:
        """Counted only (the caller logs it its own way)."""
        self._on_drop(reason, n)


class RecordWriter:
    """Takes the records of its `queue` (its own when none is given) to the database in batches;
    `on_committed` is told of each batch once it is durable."""

    def __init__(
        self,
        store: RecordStore,
        queue: RecordQueue | None = None,
        *,
        linger: float = 0.0,
        write_timeout: float = 10.0,
        retention_days: float = 0.0,
        on_write: Callable[[int], None] = lambda n: None,
        on_committed: Committed | None = None,
    ) -> None:
        self.store = store
        self.queue = queue if queue is not None else RecordQueue()
        self.linger = linger
        self.write_timeout = write_timeout
        self.retention = timedelta(days=retention_days) if retention_days > 0 else None
        self._on_write = on_write
        self._on_committed = on_committed
        self._flushes = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._migrated = False
        self.log = self.queue.log

    # -- the run's side: never waits --------------------------------------------------------

    def submit(self, record: RunRecord) -> None:
        self.queue.submit(record)

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Migrate and prune (each bounded in time; a database that is down is retried later),
        then start writing."""
        await self.ensure_schema()
        if self._migrated and self.retention is not None:
            await self._prune()
        self._tasks.append(asyncio.create_task(self._write_loop(), name="records-writer"))
        if self.retention is not None:
            self._tasks.append(asyncio.create_task(self._retention_loop(), name="records-retention"))

    async def flush(self) -> None:
        """Wait until every record submitted so far was written or dropped (without lingering)."""
        if self._tasks:
            self._flushes += 1
            self.queue.hurry.set()
            try:
                await self.queue.items.join()
            finally:
                self._flushes -= 1

    async def aclose(self, grace: float = 5.0) -> None:
        """Write what is queued (for at most `grace` seconds), then stop and dispose the engine."""
        self.queue.closing = True
        self.queue.hurry.set()
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self.queue.items.join()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        left = []
        while not self.queue.items.empty():
            left.append(self.queue.items.get_nowait())
        if left:
            self.queue.drop(left, "shutting_down")
        await self.store.aclose()

    # -- the writer -------------------------------------------------------------------------

    @property
    def migrated(self) -> bool:
        return self._migrated

    async def ensure_schema(self) -> None:
        """Migrate once (bounded in time); a failure is logged and retried at the next call."""
        if self._migrated:
            return
        try:
            async with asyncio.timeout(max(self.write_timeout, 10.0)):
                await self.store.migrate()
            self._migrated = True
        except Exception as exc:  # a database that is down must not stop the gateway
            self.log.error("records_migration_failed", backend=self.store.backend, error=type(exc).__name__,
                           detail=str(exc)[:300])

    async def _write_loop(self) -> None:
        queue, hurry, size = self.queue.items, self.queue.hurry, self.queue.batch_size
        failures = 0
        while True:
            batch = [await queue.get()]
            if self.linger > 0 and queue.qsize() + 1 < size and not hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.linger):
                        await hurry.wait()
            if not (self._flushes or self.queue.closing):
                hurry.clear()
            while len(batch) < size and not queue.empty():
                batch.append(queue.get_nowait())
            try:
                await self._write(batch)
                failures = 0
            except Exception as exc:  # counted and logged; the next batch tries again
                failures += 1
                self.queue.drop(batch, "write_failed", exc)
            finally:
                for _ in batch:
                    queue.task_done()
            if failures:
                await asyncio.sleep(min(0.1 * 2 ** (failures - 1), _MAX_BACKOFF))

    async def _write(self, batch: list[RunRecord]) -> None:
        await self.ensure_schema()
        if not self._migrated:
            raise ConnectionError("the records database is not migrated (unreachable at start?)")
        fit = []
        for record in batch:
            if (problem := record.out_of_bounds()) is not None:
                await self._reject(record, problem)
            else:
                fit.append(record)
        done = await self._insert_split(fit)
        inserted = Inserted(run_ids=frozenset().union(*(d.run_ids for _, d in done)),
                            spend=[total for _, d in done for total in d.spend])
        self._on_write(sum(n for n, _ in done))
        if self._on_committed is not None:
            try:  # the batch is durable (rejects included) whatever happens here: never dropped for it
                async with asyncio.timeout(self.write_timeout):
                    await self._on_committed(batch, inserted)
            except Exception as exc:
                self.log.warning("records_committed_hook_failed", error=type(exc).__name__, count=len(batch))

    async def _insert_split(self, records: list[RunRecord]) -> list[tuple[int, Inserted]]:
        """Insert `records`; a batch the database refuses (a value it cannot hold, not a database
        that is away) is split in halves until the refused record is alone, and that one is
        rejected: one bad record never takes the others of its batch with it (log2 of the batch
        more round trips per bad record). Each insert done, with how many records it took."""
        if not records:
            return []
        try:
            async with asyncio.timeout(self.write_timeout):
                return [(len(records), await self.store.insert(records))]
        except Exception as exc:
            if not _refused(exc):
                raise
            if len(records) == 1:
                await self._reject(records[0], _first_line(exc))
                return []
            mid = len(records) // 2
            return [*await self._insert_split(records[:mid]), *await self._insert_split(records[mid:])]

    async def _reject(self, record: RunRecord, error: str) -> None:
        """Keep the refused record with its error (`run_rejects`), count and log it."""
        async with asyncio.timeout(self.write_timeout):
            await self.store.reject(record, error)
        self.queue.count_drop("rejected", 1)
        self.log.error("record_rejected", stream_id=record.stream_id, error=error[:300])

    async def _retention_loop(self) -> None:
        assert self.retention is not None
        interval = min(3600.0, self.retention.total_seconds() / 4)
        while True:
            await asyncio.sleep(interval)
            await self._prune()

    async def _prune(self) -> None:
        assert self.retention is not None
        try:
            async with asyncio.timeout(max(self.write_timeout, 30.0)):
                deleted = await self.store.prune(datetime.now(UTC) - self.retention)
        except Exception as exc:  # retried at the next interval
            self.log.warning("records_prune_failed", error=type(exc).__name__)
            return
        if deleted:
            self.log.info("records_pruned", deleted=deleted, retention_days=self.retention.days)


def _refused(exc: BaseException) -> bool:
    """The database refused the statement (a value, a constraint), as opposed to being away,
    locked or out of disk (OperationalError, InterfaceError, a dropped connection, a timeout)."""
    return (isinstance(exc, sa.exc.DBAPIError) and not exc.connection_invalidated
            and not isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError))


def _first_line(exc: BaseException) -> str:
    """The database's reason without the statement and parameters SQLAlchemy appends (the record is
    kept beside it)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
