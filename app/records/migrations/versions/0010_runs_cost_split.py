"""Prices that are right: each run's cost split by kind of token (uncached input, cache reads,
cache writes, output), the price source it was computed from (`FOUNDRY_PRICES` or
`genai-prices <version>`), and the 1-hour part of its cache writes. Runs recorded before keep
their total alone (their parts and source null).

Revision ID: 0010_runs_cost_split
Revises: 0009_runs_cache_hit
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_runs_cost_split"
down_revision: str | None = "0009_runs_cache_hit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PARTS = ("input_usd", "cache_read_usd", "cache_write_usd", "output_usd")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cache_write_1h_tokens", sa.BigInteger, nullable=False, server_default="0",
                                   comment="the part of cache_write_tokens written for 1 hour"))
        batch.add_column(sa.Column("price_source", sa.String(64),
                                   comment="FOUNDRY_PRICES or genai-prices <version>; null: unpriced"))
        for part in _PARTS:
            batch.add_column(sa.Column(f"cost_{part}", sa.Float, comment=f"cost_usd's {part.removesuffix('_usd')} part"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for part in reversed(_PARTS):
            batch.drop_column(f"cost_{part}")
        batch.drop_column("price_source")
        batch.drop_column("cache_write_1h_tokens")
