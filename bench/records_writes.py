"""How many writes the records database gets: N mock runs at concurrency C through one in-process
gateway with the embedded SQLite, its engine's statements counted (SQLAlchemy's
`before_cursor_execute` event; migrations happen before the count starts).

Reports the runs, the transactions committed and the INSERTs into `runs` with the rows each
carried: the writer batches when one INSERT carries many runs. `--delay-ms` paces the mock's
chunks, so runs last longer and end spread out, as real ones do. Numbers only, no assertions.

Usage: `python bench/records_writes.py [--runs 200] [--concurrency 20] [--delay-ms 0] [--linger S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.main import create_app
from app.settings import Settings


async def _serve(app: Any, runs: int, concurrency: int, body: dict[str, Any]) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))  # bound: clients may connect at once
    try:
        gate = asyncio.Semaphore(concurrency)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/stream"
        async with httpx.AsyncClient(timeout=120) as client:
            async def one() -> None:
                async with gate:
                    answer = await client.post(url, json=body)
                    answer.raise_for_status()

            await asyncio.gather(*(one() for _ in range(runs)))
        await app.state.records.flush()
    finally:
        server.should_exit = True
        await task
        sock.close()


async def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--linger", type=float, default=None, help="FOUNDRY_RECORDS_LINGER (default: the setting's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        extra = {} if args.linger is None else {"records_linger": args.linger}
        app = create_app(Settings(data_dir=tmp, log_level="error", max_loop_lag_seconds=0, **extra))
        await app.state.records.ensure_schema()  # the migrations' statements are not counted
        inserts: list[int] = []
        commits = collections.Counter[str]()
        engine = app.state.records.store.engine.sync_engine

        @sa.event.listens_for(engine, "before_cursor_execute")
        def _statement(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            if statement.startswith("INSERT INTO runs "):
                inserts.append(statement.count("(?,") or 1)  # one row of placeholders per run

        @sa.event.listens_for(engine, "commit")
        def _commit(conn: Any) -> None:
            commits["commit"] += 1

        body = {"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}],
                "provider_options": {"delay_ms": args.delay_ms}}
        await _serve(app, args.runs, args.concurrency, body)
    return {"runs": args.runs, "concurrency": args.concurrency, "delay_ms": args.delay_ms,
            "commits": commits["commit"], "run_inserts": len(inserts), "rows_per_insert": inserts}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
