"""Durable run records and transcripts in SQL: SQLite by default, PostgreSQL for
deployments. `RunRecord` (record.py) is the typed input, `RecordWriter` (writer.py) takes it off
the streaming path, `RecordStore` (store.py) reads and writes, migrations live in `migrations/`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.lazy import lazy_names

if TYPE_CHECKING:
    from app.records.record import RunRecord, validation_without_content, without_content
    from app.records.store import RecordStore, RunPage, RunQuery, decode_cursor, encode_cursor
    from app.records.writer import RecordQueue, RecordWriter

__all__ = [
    "RecordQueue",
    "RecordStore",
    "RecordWriter",
    "RunPage",
    "RunQuery",
    "RunRecord",
    "decode_cursor",
    "encode_cursor",
    "validation_without_content",
    "without_content",
]

# Each public name -> its submodule, imported on first use (PEP 562): the settings read
# `urls.py` to check a database URL, which must not import the store, its engine and migrations.
_HOMES = {
    "RunRecord": "record",
    "validation_without_content": "record",
    "without_content": "record",
    "RecordStore": "store",
    "RunPage": "store",
    "RunQuery": "store",
    "decode_cursor": "store",
    "encode_cursor": "store",
    "RecordQueue": "writer",
    "RecordWriter": "writer",
}

__getattr__ = lazy_names(__name__, _HOMES)
