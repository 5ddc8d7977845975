"""Durable run records and transcripts in SQL: SQLite by default, PostgreSQL for
deployments. `RunRecord` (record.py) is the typed input, `RecordWriter` (writer.py) takes it off
the streaming path, `RecordStore` (store.py) reads and writes, migrations live in `migrations/`."""

from app.records.record import RunRecord, validation_without_content, without_content
from app.records.store import RecordStore, RunPage, RunQuery, decode_cursor, encode_cursor
from app.records.writer import RecordWriter

__all__ = [
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
