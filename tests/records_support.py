"""Real databases for the record tests: a SQLite file per test, and PostgreSQL on loopback
(FOUNDRY_TEST_DATABASE_URL, or postgres@127.0.0.1:5432) with a fresh, uniquely named database per
test, all dropped at the end of the session. No PostgreSQL: those tests skip locally, fail under
CI=true. `TcpProxy` stands between the gateway and PostgreSQL so a test can cut the database off."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from app.core.events import Usage
from app.records import RunRecord

_SERVER = os.environ.get("FOUNDRY_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Callable[[], str]]:
    """A factory of fresh PostgreSQL databases (URLs), dropped at the end of the session."""
    created: list[str] = []

    async def create() -> str:
        name = f"foundry_test_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(_dsn(_SERVER), timeout=5)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        created.append(name)
        return make_url(_SERVER).set(database=name).render_as_string(hide_password=False)

    try:
        asyncio.run(_reachable())
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        reason = f"PostgreSQL not reachable at {make_url(_SERVER).host}:{make_url(_SERVER).port} ({exc!r}); " \
                 "set FOUNDRY_TEST_DATABASE_URL"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)

    yield lambda: asyncio.run(create())

    async def drop(name: str) -> None:
        conn = await asyncpg.connect(_dsn(_SERVER), timeout=5)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    async def drop_all() -> None:
        # At once, not one after another: each DROP DATABASE waits for a checkpoint, and the
        # server serves simultaneous requests with one (20 databases: 24.6 s in turn, 0.24 s at once).
        await asyncio.gather(*(drop(name) for name in created))

    asyncio.run(drop_all())


async def _reachable() -> None:
    conn = await asyncpg.connect(_dsn(_SERVER), timeout=3)
    await conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An empty database on each engine."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'data' / 'foundry.db'}"
    return request.getfixturevalue("postgres")()


def record(stream_id: str, *, created_at: datetime, model: str = "mock/simple", status: str = "ok",
           transcript: dict | None = None) -> RunRecord:
    """A record as a run would leave it (for seeding lists, pages and retention)."""
    return RunRecord(
        stream_id=stream_id, request_id=f"req_{stream_id}", created_at=created_at, finished_at=created_at,
        model=model, served_model=model.split("/")[-1], provider="mock", status=status,
        stop_reason="stop" if status == "ok" else status, error_code=None if status == "ok" else status,
        usage=Usage(input_tokens=3, output_tokens=4, total_tokens=7), steps=1, tools_run=0,
        validation=None, ttft_ms=1.0, duration_ms=2.0, content_recorded=True,
        transcript=transcript,
    )


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture
def postgres_url(postgres: Callable[[], str]) -> str:
    """An empty PostgreSQL database."""
    return postgres()


class TcpProxy:
    """A loopback TCP forwarder; `cut()` closes it and every connection through it, so the
    database behind it becomes unreachable (refused) for the gateway; `stalled = True` makes it
    a database that never answers."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.stalled = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if not self.stalled:  # stalled: bytes are swallowed, the peer waits forever
                        dst.write(data)
                        await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()


async def proxied(url: str) -> tuple[TcpProxy, str]:
    """A started proxy in front of the PostgreSQL database at `url`, and the URL through it."""
    target = make_url(url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
    await proxy.start()
    return proxy, target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
