"""Every tool call through /mcp recorded: key, server, tool, SHA-256 of the arguments, status,
duration, bytes, time (app/records/mcp_calls.py).

Revision ID: 0011_mcp_calls
Revises: 0010_runs_cost_split
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_mcp_calls"
down_revision: str | None = "0010_runs_cost_split"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_calls",
        sa.Column("id", sa.String(32), primary_key=True, comment="the call's id (random)"),
        sa.Column("key_id", sa.String(128), nullable=False, comment="the API key id, or admin / open"),
        sa.Column("server", sa.String(64), nullable=False, comment="the MCP server (its name in the configuration)"),
        sa.Column("tool", sa.String(256), nullable=False, comment="the tool as the server names it"),
        sa.Column("args_sha256", sa.String(64), nullable=False, comment="SHA-256 of the arguments (sorted-key JSON)"),
        sa.Column("status", sa.String(16), nullable=False, comment="ok, error, timeout, unavailable"),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False, comment="the result's size as JSON"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, comment="when the call was received"),
    )
    op.create_index("ix_mcp_calls_created_id", "mcp_calls", ["created_at", "id"])
    op.create_index("ix_mcp_calls_key_created", "mcp_calls", ["key_id", "created_at"])
    op.create_index("ix_mcp_calls_server_created", "mcp_calls", ["server", "created_at"])


def downgrade() -> None:
    op.drop_table("mcp_calls")
