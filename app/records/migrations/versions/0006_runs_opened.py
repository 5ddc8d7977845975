"""Whether a run had a stream: a run no target served is recorded too but never had one, so a
resume of its id is 404, while a stream that ended before any content and that the store lost is
410 `stream_expired` (GET /v1/stream/{id}).

Revision ID: 0006_runs_opened
Revises: 0005_key_spend
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_runs_opened"
down_revision: str | None = "0005_key_spend"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("opened", sa.Boolean,
                                   comment="the run had a stream; false: no target served; null: recorded before 0006"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("opened")
