"""Usage sums over the run records (GET /v1/usage): requests, tokens of every kind, errors and
cost, and the runs' `llm_judge` calls (their calls, tokens and cost), per model or per day (UTC),
for one key or all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from app.records.record import USAGE_FIELDS
from app.records.tables import runs

__all__ = ["UsageQuery", "UsageRow", "usage_sums"]


@dataclass(slots=True, kw_only=True, frozen=True)
class UsageQuery:
    owner: str | None
    """One key's runs; None: every run."""
    since: datetime
    until: datetime
    group_by: Literal["model", "day"]


@dataclass(slots=True, kw_only=True, frozen=True)
class UsageRow:
    group: str
    requests: int
    errors: int
    tokens: dict[str, int]
    cost_usd: float
    judge_calls: int = 0
    judge_tokens: int = 0
    judge_cost_usd: float = 0.0


def _day(engine: AsyncEngine) -> sa.ColumnElement[str]:
    if engine.dialect.name == "postgresql":
        return sa.func.to_char(sa.func.timezone("UTC", runs.c.created_at), "YYYY-MM-DD")
    return sa.func.strftime("%Y-%m-%d", runs.c.created_at)


async def usage_sums(engine: AsyncEngine, query: UsageQuery) -> list[UsageRow]:
    group = (runs.c.model if query.group_by == "model" else _day(engine)).label("grp")
    columns = [
        group,
        sa.func.count().label("requests"),
        sa.func.sum(sa.case((runs.c.status == "error", 1), else_=0)).label("errors"),
        sa.func.coalesce(sa.func.sum(runs.c.cost_usd), 0.0).label("cost_usd"),
        sa.func.coalesce(sa.func.sum(runs.c.judge_calls), 0).label("judge_calls"),
        sa.func.coalesce(sa.func.sum(runs.c.judge_tokens), 0).label("judge_tokens"),
        sa.func.coalesce(sa.func.sum(runs.c.judge_cost_usd), 0.0).label("judge_cost_usd"),
        *(sa.func.coalesce(sa.func.sum(runs.c[name]), 0).label(name) for name in USAGE_FIELDS),
    ]
    stmt = sa.select(*columns).where(runs.c.created_at >= query.since, runs.c.created_at < query.until)
    if query.owner is not None:
        stmt = stmt.where(runs.c.owner == query.owner)
    stmt = stmt.group_by(group).order_by(group)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).mappings().all()
    return [UsageRow(group=str(row["grp"]), requests=int(row["requests"]), errors=int(row["errors"] or 0),
                     tokens={name: int(row[name]) for name in USAGE_FIELDS}, cost_usd=round(float(row["cost_usd"]), 10),
                     judge_calls=int(row["judge_calls"]), judge_tokens=int(row["judge_tokens"]),
                     judge_cost_usd=round(float(row["judge_cost_usd"]), 10))
            for row in rows]
