"""Key rotation: a key's previous secret keeps working until its overlap window ends, so a
client can move to the new secret without a moment in which neither works.

Revision ID: 0007_key_rotation
Revises: 0006_runs_opened
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_key_rotation"
down_revision: str | None = "0006_runs_opened"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("previous_key_hash", sa.String(64),
                                   comment="sha256 of the secret before the last rotation"))
        batch.add_column(sa.Column("previous_expires_at", sa.DateTime(timezone=True),
                                   comment="until when the previous secret is still accepted"))
        batch.create_index("ix_api_keys_previous_key_hash", ["previous_key_hash"])


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_index("ix_api_keys_previous_key_hash")
        batch.drop_column("previous_expires_at")
        batch.drop_column("previous_key_hash")
