"""Whether the response cache answered a run (app/cache): its usage is the original's, and by
default it was not charged to its key.

Revision ID: 0009_runs_cache_hit
Revises: 0008_runs_bigint_rejects
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_runs_cache_hit"
down_revision: str | None = "0008_runs_bigint_rejects"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cache_hit", sa.Boolean,
                                   comment="the response cache answered it; null: recorded before 0009"))
        batch.add_column(sa.Column("cache_charged", sa.Boolean,
                                   comment="a hit counted against its key's budget; null: not a hit"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("cache_charged")
        batch.drop_column("cache_hit")
