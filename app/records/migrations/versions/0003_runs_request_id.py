"""Runs findable by the request that started them (`GET /v1/runs?request_id=`).

Revision ID: 0003_runs_request_id
Revises: 0002_api_keys
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003_runs_request_id"
down_revision: str | None = "0002_api_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_runs_request_id", "runs", ["request_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_request_id", table_name="runs")
