"""Gateway API keys and the cost of each run.

Revision ID: 0002_api_keys
Revises: 0001_runs
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_api_keys"
down_revision: str | None = "0001_runs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cost_usd", sa.Float, comment="priced with FOUNDRY_PRICES; None when no price is known"))
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True, comment="sha256 of the key, never the key"),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("policy", JSONDoc, nullable=False, comment="models, limits, budget, expiry, validators"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("cost_usd")
