"""What a run record costs on a large SQLite database, by the kind of stream id it is keyed by.

A records database is first filled with `--prefill` runs keyed by random ids, as the gateway keyed
them before app/core/ids.py. Then batches of 50 runs go in through `RecordStore.insert` (the
writer's path), in alternating rounds: keyed by random ids (`uuid4().hex`), and by ids that sort by
time (`new_stream_id`, what the gateway makes now). Request ids stay random in both, so only the
primary key's index differs. Reports the process's CPU per record (both threads: the event loop's
and aiosqlite's) for each kind, and the database's size.

Usage: `python bench/record_ids_bench.py [--prefill 200000] [--rounds 4] [--json out.json]`
(about two minutes for the default fill on a 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import resource
import sys
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.ids import new_stream_id
from app.core.usage import Usage
from app.records import RunRecord
from app.records.store import RecordStore
from bench.run import emit

BATCH = 50


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _record(i: int) -> RunRecord:
    at = datetime.now(UTC)
    return RunRecord(
        stream_id="", request_id=None, created_at=at, finished_at=at, model="openai/gpt-4o-mini",
        served_model="gpt-4o-mini", provider="openai", status="ok", stop_reason="stop", error_code=None,
        usage=Usage(input_tokens=120 + i, output_tokens=40, total_tokens=160 + i), steps=1, tools_run=0,
        validation=None, ttft_ms=210.5, duration_ms=900.25, content_recorded=True,
        transcript={"request_messages": [{"role": "user", "content": f"question {i}"}],
                    "response_messages": [{"type": "response", "content": "an answer of a few words " * 4}]},
    )


def _random_id() -> str:
    return "str_" + uuid.uuid4().hex


async def measure(prefill: int, rounds: int) -> dict:
    base = [_record(i) for i in range(BATCH)]

    def batch(new_id: Callable[[], str]) -> list[RunRecord]:
        return [dataclasses.replace(r, stream_id=new_id(), request_id=uuid.uuid4().hex) for r in base]

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.db"
        store = RecordStore(f"sqlite+aiosqlite:///{path}")
        await store.migrate()
        try:
            for _ in range(prefill // BATCH):
                await store.insert(batch(_random_id))
            per_round = 40
            used = {"random": 0.0, "time_ordered": 0.0}
            kinds = {"random": _random_id, "time_ordered": new_stream_id}
            for i in range(rounds):
                for name in (list(kinds) if i % 2 == 0 else list(reversed(kinds))):
                    started = _cpu()
                    for _ in range(per_round):
                        await store.insert(batch(kinds[name]))
                    used[name] += _cpu() - started
            size = path.stat().st_size
        finally:
            await store.engine.dispose()
    records = rounds * per_round * BATCH
    return {"prefill": prefill, "database_mb": round(size / 1e6, 1), "records_per_kind": records,
            "cpu_us_per_record": {name: round(seconds / records * 1e6, 1) for name, seconds in used.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefill", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    emit(asyncio.run(measure(args.prefill, args.rounds)), args.json)


if __name__ == "__main__":
    main()
