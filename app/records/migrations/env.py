"""Alembic environment (async). Run through app/records/migrate.py: `python -m app.records migrate`,
`make migrate`, or at the gateway's start. The URL comes from the config's `sqlalchemy.url`
(set by migrate.py from the settings), or a connection handed over in `config.attributes`."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.records.tables import metadata

config = context.config
_PG_LOCK = 0x466F756E  # one migrator at a time across replicas starting together (PostgreSQL)


def _run(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK})")
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


async def _online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: run migrations through app/records/migrate.py")
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    handed = config.attributes.get("connection")
    if handed is not None:
        _run(handed)
    else:
        asyncio.run(_online())
