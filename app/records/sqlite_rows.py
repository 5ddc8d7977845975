"""A batch of rows into SQLite in one statement: `INSERT ... VALUES (...), (...) ON CONFLICT DO NOTHING`.

Why not SQLAlchemy's own `execute(insert(table), rows)`: on SQLite that is `executemany` (or, with
RETURNING, "insertmanyvalues" and one fetched row per run), one `sqlite3_step` per row, and the
stdlib driver lets go of the GIL around each step and takes it back after. In the gateway the
driver runs on aiosqlite's thread while the event loop's thread is busy serving, so every row of a
batch is a GIL hand-over between the two. Measured on the 2-core machine (`bench/records_bench.py
--streams 1000 --chunks 1`, and each thread's CPU from /proc): a record cost 220-250 us of CPU in
the serving gateway against about 45 us for the same insert in an idle process; one statement a
batch takes about 80 us a record off (docs/records.md#cost). `insert().values(rows)` would be one
statement too, but SQLAlchemy compiles it again for every batch (about 100 ms on the event loop for
200 rows), and its "insertmanyvalues" without RETURNING is switched off for a statement with ON CONFLICT
(a clause after the values). So the statement is rendered here, once per table, columns and row count, and the values
go through each column type's own bind processor (`TypeEngine.bind_processor`): what is stored is
what SQLAlchemy stores.

The row count of the statement says how many rows were new: ON CONFLICT DO NOTHING does not count
a row that was already there.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["MultiRowInsert"]

MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
"""SQLite's default bound on the parameters of one statement (SQLITE_MAX_VARIABLE_NUMBER: 999 before
3.32), for the SQLite library the standard driver runs on."""

class MultiRowInsert:
    """Rows (dicts with the same keys, as `RunRecord.row()` makes them) into one SQLite table."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    async def __call__(self, conn: AsyncConnection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert `rows`, keeping any already there; how many were inserted."""
        if not rows:
            return 0
        columns = tuple(rows[0])
        processed = self._processed(table, columns)
        width = len(columns)
        per_statement = max(1, MAX_VARIABLES // width)
        inserted = 0
        for start in range(0, len(rows), per_statement):
            chunk = rows[start:start + per_statement]
            # row by row, then each processed column at once (its every `width`-th value): 8.5 us a
            # `runs` row against 11.0 for a test of each value's processor (timeit, 50-row batches)
            params = [row[name] for row in chunk for name in columns]
            for index, process in processed:
                params[index::width] = map(process, params[index::width])
            result = await conn.exec_driver_sql(self._sql(table.name, columns, len(chunk)), tuple(params))
            inserted += result.rowcount
        return inserted

    @functools.lru_cache(maxsize=64)  # noqa: B019  # one instance per store, for the process's life
    def _processed(self, table: sa.Table, columns: tuple[str, ...]) -> tuple[tuple[int, Callable[[Any], Any]], ...]:
        """The columns whose type has a bind processor, by position, with it."""
        dialect = self.dialect
        processors = (table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in columns)
        return tuple((index, process) for index, process in enumerate(processors) if process is not None)

    @functools.lru_cache(maxsize=64)  # noqa: B019
    def _sql(self, table: str, columns: tuple[str, ...], rows: int) -> str:
        quote = self.dialect.identifier_preparer.quote
        group = "(" + ", ".join("?" * len(columns)) + ")"
        return (f"INSERT INTO {quote(table)} ({', '.join(map(quote, columns))}) VALUES "
                f"{', '.join([group] * rows)} ON CONFLICT DO NOTHING")
