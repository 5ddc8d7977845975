"""The record tables (SQLAlchemy Core). The migrations in `migrations/versions` create them;
change both together (a test checks the migrated schema matches these tables)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

__all__ = ["api_keys", "key_spend", "mcp_calls", "metadata", "run_rejects", "run_transcripts", "runs"]

metadata = sa.MetaData()

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

runs = sa.Table(
    "runs", metadata,
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
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, comment="null: unknown (the run ended before the provider reported it)"),
    sa.Column("total_tokens", sa.BigInteger, comment="null: unknown (the run ended before the provider reported it)"),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
    sa.Column("reasoning_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_1h_tokens", sa.BigInteger, nullable=False, server_default="0",
              comment="the part of cache_write_tokens written for 1 hour"),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("tools_run", sa.Integer, nullable=False),
    sa.Column("validation", JSONDoc),
    sa.Column("ttft_ms", sa.Float),
    sa.Column("duration_ms", sa.Float, nullable=False),
    sa.Column("content_recorded", sa.Boolean, nullable=False),
    sa.Column("cost_usd", sa.Float, comment="priced with FOUNDRY_PRICES; None when no price is known"),
    sa.Column("price_source", sa.String(64), comment="FOUNDRY_PRICES or genai-prices <version>; null: unpriced"),
    *(sa.Column(f"cost_{part}", sa.Float, comment=f"cost_usd's {part.removesuffix('_usd')} part")
      for part in ("input_usd", "cache_read_usd", "cache_write_usd", "output_usd")),
    sa.Column("judge_calls", sa.Integer, nullable=False, server_default="0", comment="llm_judge calls the run made"),
    sa.Column("judge_tokens", sa.BigInteger, nullable=False, server_default="0",
              comment="tokens of those calls (input + output)"),
    sa.Column("judge_cost_usd", sa.Float, comment="their cost; None when no judge model is priced"),
    sa.Column("opened", sa.Boolean, comment="the run had a stream; false: no target served; null: recorded before 0006"),
    sa.Column("cache_hit", sa.Boolean, comment="the response cache answered it; null: recorded before 0009"),
    sa.Column("cache_charged", sa.Boolean, comment="a hit counted against its key's budget; null: not a hit"),
    sa.Index("ix_runs_created_id", "created_at", "id"),
    sa.Index("ix_runs_model_created", "model", "created_at"),
    sa.Index("ix_runs_owner_created", "owner", "created_at"),
    sa.Index("ix_runs_request_id", "request_id"),
)

run_transcripts = sa.Table(
    "run_transcripts", metadata,
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("transcript", JSONDoc, nullable=False),
)

run_rejects = sa.Table(
    "run_rejects", metadata,
    sa.Column("run_id", sa.String(64), primary_key=True, comment="the stream id"),
    sa.Column("rejected_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("error", sa.String(1024), nullable=False, comment="why the database refused the record"),
    sa.Column("record", sa.LargeBinary, nullable=False,
              comment="the record (without its transcript) as JSON bytes: whatever it holds, bytes can keep"),
)
"""Records the database refused (a value it cannot hold), each kept with its error once the writer
has split its batch down to it: never lost silently, never retried forever, never taking the
other records of its batch with it."""

key_spend = sa.Table(
    "key_spend", metadata,
    sa.Column("owner", sa.String(128), primary_key=True, comment="the API key id (runs.owner)"),
    sa.Column("month", sa.String(7), primary_key=True, comment="YYYY-MM (UTC) the runs started in"),
    sa.Column("usd", sa.Float, nullable=False, comment="cost_usd + judge_cost_usd of the key's recorded runs"),
    sa.Column("runs", sa.Integer, nullable=False, comment="how many runs; the version of `usd`"),
)
"""Each key's recorded spend per month, kept in the transaction that records its runs (store.py):
what budgets are counted from, exact whenever a counter cache (Redis) is lost."""

api_keys = sa.Table(
    "api_keys", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True, comment="sha256 of the key, never the key"),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("policy", JSONDoc, nullable=False, comment="models, limits, budget, expiry, validators"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
    sa.Column("previous_key_hash", sa.String(64), comment="sha256 of the secret before the last rotation"),
    sa.Column("previous_expires_at", sa.DateTime(timezone=True),
              comment="until when the previous secret is still accepted"),
    sa.Index("ix_api_keys_previous_key_hash", "previous_key_hash"),
)

mcp_calls = sa.Table(
    "mcp_calls", metadata,
    sa.Column("id", sa.String(32), primary_key=True, comment="the call's id (random)"),
    sa.Column("key_id", sa.String(128), nullable=False, comment="the API key id, or admin / open"),
    sa.Column("server", sa.String(64), nullable=False, comment="the MCP server (its name in the configuration)"),
    sa.Column("tool", sa.String(256), nullable=False, comment="the tool as the server names it"),
    sa.Column("args_sha256", sa.String(64), nullable=False, comment="SHA-256 of the arguments (sorted-key JSON)"),
    sa.Column("status", sa.String(16), nullable=False, comment="ok, error, timeout, unavailable"),
    sa.Column("duration_ms", sa.Float, nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False, comment="the result's size as JSON"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, comment="when the call was received"),
    sa.Index("ix_mcp_calls_created_id", "created_at", "id"),
    sa.Index("ix_mcp_calls_key_created", "key_id", "created_at"),
    sa.Index("ix_mcp_calls_server_created", "server", "created_at"),
)
"""Every tool call through /mcp (app/api/mcp_rpc.py), written off the request path
(app/records/mcp_calls.py): who called which tool, a digest of what with, and how it went."""
