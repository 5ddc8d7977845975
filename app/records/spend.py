"""Each key's recorded spend per month (the `key_spend` table), kept in the transaction that
records the runs it counts.

`add_runs` runs inside the record store's insert transaction with the runs that were newly
inserted (a run recorded twice, by its owner and by a replica that swept it, counts once); it
returns each touched key's new totals. The number of runs is the total's version: a counter cache
(Redis) takes a total only when it is newer than the one it holds, so totals that reach it out of
order, or a counter rebuilt from `read` while runs are being recorded, never lose or double a run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from app.records.record import RunRecord, as_utc
from app.records.tables import key_spend

__all__ = ["SpendTotal", "add_runs", "month_of", "read"]


@dataclass(slots=True, frozen=True)
class SpendTotal:
    owner: str
    month: str
    usd: float
    runs: int
    """The version of `usd`: it only grows."""


def month_of(at: datetime) -> str:
    """The calendar month (UTC) a budget counts a run in: the month it started."""
    return as_utc(at).strftime("%Y-%m")


def _cost(record: RunRecord) -> float:
    """What the run spent of its key's budget: a cache hit's own cost only when it was charged."""
    own = 0.0 if record.cache_hit and not record.cache_charged else (record.cost_usd or 0.0)
    return own + (record.judge_cost_usd or 0.0)


async def add_runs(conn: AsyncConnection, backend: str, records: Iterable[RunRecord]) -> list[SpendTotal]:
    """Add newly recorded runs to their keys' monthly totals; the new totals. In (owner, month)
    order, so concurrent transactions lock the rows in one order (PostgreSQL: no deadlock)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for record in records:
        if record.owner is not None:
            groups[record.owner, month_of(record.created_at)].append(_cost(record))
    if not groups:
        return []
    dialect = postgresql if backend == "postgresql" else sqlite
    totals = []
    for (owner, month), costs in sorted(groups.items()):
        stmt = dialect.insert(key_spend).values(owner=owner, month=month, usd=sum(costs), runs=len(costs))
        stmt = stmt.on_conflict_do_update(
            index_elements=[key_spend.c.owner, key_spend.c.month],
            set_={"usd": key_spend.c.usd + stmt.excluded.usd, "runs": key_spend.c.runs + stmt.excluded.runs})
        row = (await conn.execute(stmt.returning(key_spend.c.usd, key_spend.c.runs))).one()
        totals.append(SpendTotal(owner=owner, month=month, usd=float(row.usd), runs=int(row.runs)))
    return totals


async def read(conn: AsyncConnection, owner: str, month: str) -> SpendTotal:
    """A key's recorded total for a month (zero, version 0, when it has no run yet)."""
    query = sa.select(key_spend.c.usd, key_spend.c.runs).where(key_spend.c.owner == owner,
                                                                key_spend.c.month == month)
    row = (await conn.execute(query)).first()
    if row is None:
        return SpendTotal(owner=owner, month=month, usd=0.0, runs=0)
    return SpendTotal(owner=owner, month=month, usd=float(row.usd), runs=int(row.runs))
