"""Token counts in 64-bit columns (a long multi-step run of checked counts passes 2^31), and
`run_rejects`: a record the database refused, kept with its error rather than lost or retried
forever (the writer splits a refused batch until the refused record is alone, app/records/writer.py).

Revision ID: 0008_runs_bigint_rejects
Revises: 0007_key_rotation
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_runs_bigint_rejects"
down_revision: str | None = "0007_key_rotation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTS = {"input_tokens": False, "output_tokens": True, "total_tokens": True, "cache_read_tokens": False,
           "cache_write_tokens": False, "reasoning_tokens": False, "judge_tokens": False}
"""The token columns, and whether each may be null."""


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name, nullable in _COUNTS.items():
            batch.alter_column(name, type_=sa.BigInteger, existing_type=sa.Integer, existing_nullable=nullable)
    op.create_table(
        "run_rejects",
        sa.Column("run_id", sa.String(64), primary_key=True, comment="the stream id"),
        sa.Column("rejected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.String(1024), nullable=False, comment="why the database refused the record"),
        sa.Column("record", sa.LargeBinary, nullable=False,
                  comment="the record (without its transcript) as JSON bytes: whatever it holds, bytes can keep"),
    )


def downgrade() -> None:
    op.drop_table("run_rejects")
    with op.batch_alter_table("runs") as batch:
        for name, nullable in _COUNTS.items():
            batch.alter_column(name, type_=sa.Integer, existing_type=sa.BigInteger, existing_nullable=nullable)
