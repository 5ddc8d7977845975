"""Each key's recorded spend per month, updated in the same transaction as the runs it counts, so
a budget counter that Redis lost is rebuilt exactly (no run counted twice or missed), and pruning
old runs does not forget the month's spend.

Revision ID: 0005_key_spend
Revises: 0004_runs_judge_usage
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_key_spend"
down_revision: str | None = "0004_runs_judge_usage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "key_spend",
        sa.Column("owner", sa.String(128), primary_key=True, comment="the API key id (runs.owner)"),
        sa.Column("month", sa.String(7), primary_key=True, comment="YYYY-MM (UTC) the runs started in"),
        sa.Column("usd", sa.Float, nullable=False, comment="cost_usd + judge_cost_usd of the key's recorded runs"),
        sa.Column("runs", sa.Integer, nullable=False, comment="how many runs; the version of `usd`"),
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        month = "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM')"
    else:  # SQLite keeps UTC times as text
        month = "strftime('%Y-%m', created_at)"
    op.execute(
        f"INSERT INTO key_spend (owner, month, usd, runs) "
        f"SELECT owner, {month}, SUM(COALESCE(cost_usd, 0) + COALESCE(judge_cost_usd, 0)), COUNT(*) "
        f"FROM runs WHERE owner IS NOT NULL GROUP BY owner, {month}")


def downgrade() -> None:
    op.drop_table("key_spend")
