"""Usage sums over the run records (GET /v1/usage): requests, tokens of every kind, errors and
cost, and the runs' `llm_judge` calls (their calls, tokens and cost), per model or per day (UTC),
for one key or all."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from app.records.record import COST_FIELDS, USAGE_FIELDS
from app.records.tables import runs

__all__ = ["SeriesQuery", "SeriesRow", "UsageQuery", "UsageRow", "usage_series", "usage_sums"]


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
    cost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COST_FIELDS, 0.0))
    """The runs' cost by kind of token (runs recorded before the split count in `cost_usd` only)."""
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
        *(sa.func.coalesce(sa.func.sum(runs.c[f"cost_{part}"]), 0.0).label(f"cost_{part}") for part in COST_FIELDS),
    ]
    stmt = sa.select(*columns).where(runs.c.created_at >= query.since, runs.c.created_at < query.until)
    if query.owner is not None:
        stmt = stmt.where(runs.c.owner == query.owner)
    stmt = stmt.group_by(group).order_by(group)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).mappings().all()
    return [UsageRow(group=str(row["grp"]), requests=int(row["requests"]), errors=int(row["errors"] or 0),
                     tokens={name: int(row[name]) for name in USAGE_FIELDS}, cost_usd=round(float(row["cost_usd"]), 10),
                     cost={part: round(float(row[f"cost_{part}"]), 10) for part in COST_FIELDS},
                     judge_calls=int(row["judge_calls"]), judge_tokens=int(row["judge_tokens"]),
                     judge_cost_usd=round(float(row["judge_cost_usd"]), 10))
            for row in rows]


@dataclass(slots=True, kw_only=True, frozen=True)
class SeriesQuery:
    owner: str | None
    """One key's runs; None: every run."""
    since: datetime
    until: datetime
    bucket: Literal["day", "week", "month"]


@dataclass(slots=True, kw_only=True)
class SeriesRow:
    """The sums of one key's runs of one model in one period (a day, an ISO week from its Monday,
    a month), their judge calls' cost included in `cost_usd`."""

    period: str
    owner: str | None
    model: str
    requests: int = 0
    errors: int = 0
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_FIELDS, 0))


def _period(day: str, bucket: Literal["day", "week", "month"]) -> str:
    if bucket == "day":
        return day
    if bucket == "month":
        return day[:7]
    start = date.fromisoformat(day)
    return (start - timedelta(days=start.weekday())).isoformat()


async def usage_series(engine: AsyncEngine, query: SeriesQuery) -> list[SeriesRow]:
    """Per period, key and model, oldest first: the database sums per day (UTC), the days are
    then rolled up into weeks or months here (at most a few hundred days per query)."""
    day = _day(engine).label("day")
    columns = [
        day, runs.c.owner, runs.c.model,
        sa.func.count().label("requests"),
        sa.func.sum(sa.case((runs.c.status == "error", 1), else_=0)).label("errors"),
        (sa.func.coalesce(sa.func.sum(runs.c.cost_usd), 0.0)
         + sa.func.coalesce(sa.func.sum(runs.c.judge_cost_usd), 0.0)).label("cost_usd"),
        *(sa.func.coalesce(sa.func.sum(runs.c[name]), 0).label(name) for name in USAGE_FIELDS),
    ]
    stmt = sa.select(*columns).where(runs.c.created_at >= query.since, runs.c.created_at < query.until)
    if query.owner is not None:
        stmt = stmt.where(runs.c.owner == query.owner)
    stmt = stmt.group_by(day, runs.c.owner, runs.c.model)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).mappings().all()
    series: dict[tuple[str, str, str], SeriesRow] = {}
    for row in rows:
        period = _period(str(row["day"]), query.bucket)
        key = (period, row["owner"] or "", row["model"])
        out = series.setdefault(key, SeriesRow(period=period, owner=row["owner"], model=row["model"]))
        out.requests += int(row["requests"])
        out.errors += int(row["errors"] or 0)
        out.cost_usd = round(out.cost_usd + float(row["cost_usd"]), 10)
        for name in USAGE_FIELDS:
            out.tokens[name] += int(row[name])
    return [series[k] for k in sorted(series)]
