"""The `llm_judge` calls of each run, billed like any call: counted in GET /v1/usage and in a
key's recorded spend (the budget's starting point after a restart).

Revision ID: 0004_runs_judge_usage
Revises: 0003_runs_request_id
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_runs_judge_usage"
down_revision: str | None = "0003_runs_request_id"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("judge_calls", sa.Integer, nullable=False, server_default="0",
                                   comment="llm_judge calls the run made"))
        batch.add_column(sa.Column("judge_tokens", sa.Integer, nullable=False, server_default="0",
                                   comment="tokens of those calls (input + output)"))
        batch.add_column(sa.Column("judge_cost_usd", sa.Float, comment="their cost; None when no judge model is priced"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("judge_cost_usd")
        batch.drop_column("judge_tokens")
        batch.drop_column("judge_calls")
