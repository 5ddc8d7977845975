"""Run records and their transcripts.

Revision ID: 0001_runs
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_runs"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True, comment="the stream id"),
        sa.Column("request_id", sa.String(128)),
        sa.Column("owner", sa.String(128), comment="API key or tenant, once keys exist"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(256), nullable=False, comment="as requested"),
        sa.Column("served_model", sa.String(256), comment="as the provider reported it"),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.String(32)),
        sa.Column("error_code", sa.String(64)),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, comment="null: unknown (the run ended before the provider reported it)"),
        sa.Column("total_tokens", sa.Integer, comment="null: unknown (the run ended before the provider reported it)"),
        sa.Column("cache_read_tokens", sa.Integer, nullable=False),
        sa.Column("cache_write_tokens", sa.Integer, nullable=False),
        sa.Column("reasoning_tokens", sa.Integer, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("tools_run", sa.Integer, nullable=False),
        sa.Column("validation", JSONDoc),
        sa.Column("ttft_ms", sa.Float),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("content_recorded", sa.Boolean, nullable=False),
    )
    op.create_index("ix_runs_created_id", "runs", ["created_at", "id"])
    op.create_index("ix_runs_model_created", "runs", ["model", "created_at"])
    op.create_index("ix_runs_owner_created", "runs", ["owner", "created_at"])
    op.create_table(
        "run_transcripts",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("transcript", JSONDoc, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_transcripts")
    op.drop_table("runs")
