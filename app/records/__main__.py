"""Operators' commands: `python -m app.records migrate` (bring the schema to the latest revision)
and `python -m app.records prune` (delete records past the retention now). The database is the
gateway's: FOUNDRY_DATABASE_URL, or the SQLite file under FOUNDRY_DATA_DIR."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime, timedelta

from app.records.store import RecordStore
from app.settings import Settings


async def _main(command: str) -> int:
    settings = Settings()
    store = RecordStore(settings.records_url())
    try:
        await store.migrate()
        if command == "migrate":
            print(f"records database ({store.backend}) migrated to the latest revision")
        elif settings.record_retention_days <= 0:
            print("FOUNDRY_RECORD_RETENTION_DAYS is 0: records are kept forever, nothing pruned")
        else:
            cutoff = datetime.now(UTC) - timedelta(days=settings.record_retention_days)
            print(f"deleted {await store.prune(cutoff)} records created before {cutoff.isoformat()}")
    finally:
        await store.aclose()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.records", description=__doc__)
    parser.add_argument("command", choices=["migrate", "prune"])
    args = parser.parse_args(argv)
    return asyncio.run(_main(args.command))


if __name__ == "__main__":
    sys.exit(main())
