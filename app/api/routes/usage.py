"""GET /v1/usage: a key's requests, tokens, errors and cost over a time range, from the run records;
GET /v1/usage/series: the same per period (day, week, month), key and model, for charts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.access import PrincipalDep
from app.api.responses import JSON
from app.api.routes.runs import RecordsDep, database_errors
from app.api.schemas import ErrorBody
from app.auth import Principal
from app.auth.service import AccessDenied
from app.core.errors import RequestError
from app.records.record import COST_FIELDS, USAGE_FIELDS
from app.records.usage import SeriesQuery, UsageQuery, usage_series, usage_sums

router = APIRouter(tags=["usage"])

MAX_RANGE = timedelta(days=400)

Since = Annotated[datetime | None, Query(description="From (ISO 8601; UTC if no zone). Default: 30 days ago.")]
Until = Annotated[datetime | None, Query(description="Before (ISO 8601). Default: now.")]
WhoseUsage = Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.-]{1,32}$",
                                         description="Admin key only: whose usage (default: every key).")]
"""The query parameters both usage routes take."""


class UsageTokens(BaseModel):
    """Sums of every canonical token field (unknown output counts as 0)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    cache_read_tokens: int = Field(description="Prompt tokens read from the provider's cache (part of input_tokens).")
    cache_write_tokens: int = Field(description="Prompt tokens written to its cache (part of input_tokens).")
    reasoning_tokens: int = Field(description="Reasoning tokens (part of output_tokens).")
    cache_write_1h_tokens: int = Field(description="The 1-hour part of cache_write_tokens (Anthropic).")


class CostSplit(BaseModel):
    """The runs' own cost by kind of token (docs/access-control.md#how-cost-is-computed); runs recorded
    before the split (migration 0010) count in cost_usd only."""

    input_usd: float = Field(description="Uncached prompt tokens.")
    cache_read_usd: float
    cache_write_usd: float = Field(description="5-minute and 1-hour cache writes.")
    output_usd: float = Field(description="Output tokens, reasoning included.")


class JudgeSums(BaseModel):
    """The runs' `llm_judge` calls: model calls billed to the key like the runs' own."""

    calls: int
    tokens: int = Field(description="Input + output tokens of the judge calls (counted toward the key's tpm).")
    cost_usd: float = Field(description="Their cost (the judge models' prices; unpriced count 0).")


class UsageGroup(BaseModel):
    group: str = Field(description="The model (as requested) or the day (UTC, YYYY-MM-DD).")
    requests: int
    errors: int = Field(description="Runs whose final status was error.")
    tokens: UsageTokens = Field(description="The runs' own tokens (their judge calls' are under `judge`).")
    cost_usd: float = Field(description="Sum over priced runs (the operator's prices, else genai-prices'), their judge "
                                        "calls included: what the key's budget was charged. Unpriced runs count 0.")
    cost: CostSplit = Field(description="The runs' own cost split by kind of token (judge calls are under `judge`).")
    judge: JudgeSums


class UsageReport(BaseModel):
    key_id: str | None = Field(description="Whose usage; null: every key's (admin key or open mode).")
    since: datetime
    until: datetime
    group_by: Literal["model", "day"]
    data: list[UsageGroup]
    total: UsageGroup


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _range(since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    end = _utc(until) if until is not None else datetime.now(UTC)
    return (_utc(since) if since is not None else end - timedelta(days=30)), end


def _whose(principal: Principal, key_id: str | None, start: datetime, end: datetime) -> str | None:
    """The key whose usage is asked (None: every key's), after checking the range and the caller."""
    if start >= end:
        raise RequestError("since must be before until", code="invalid_request", status=422, field="since")
    if end - start > MAX_RANGE:
        raise RequestError(f"at most {MAX_RANGE.days} days per query", code="invalid_request", status=422,
                           field="since")
    if principal.sees_everything:
        return key_id
    if key_id is not None and key_id != principal.owner:
        raise AccessDenied("only the admin key reads another key's usage", code="admin_only", status=403,
                           field="key_id")
    return principal.owner


@router.get("/v1/usage", response_model=UsageReport, responses={c: {"model": ErrorBody} for c in (401, 403, 404, 422, 503)},
            summary="Sums of requests, tokens, errors and cost, by model or day (own key; admin: any key)")
async def usage(
    principal: PrincipalDep,
    store: RecordsDep,
    since: Since = None,
    until: Until = None,
    group_by: Annotated[Literal["model", "day"], Query(description="Group the sums by model or by day.")] = "model",
    key_id: WhoseUsage = None,
) -> Response:
    start, end = _range(since, until)
    owner = _whose(principal, key_id, start, end)
    with database_errors():
        rows = await usage_sums(store.engine, UsageQuery(owner=owner, since=start, until=end, group_by=group_by))
    data = [UsageGroup(group=r.group, requests=r.requests, errors=r.errors, tokens=UsageTokens(**r.tokens),
                       cost_usd=round(r.cost_usd + r.judge_cost_usd, 10), cost=CostSplit(**r.cost),
                       judge=JudgeSums(calls=r.judge_calls, tokens=r.judge_tokens, cost_usd=r.judge_cost_usd))
            for r in rows]
    total = UsageGroup(
        group="total", requests=sum(g.requests for g in data), errors=sum(g.errors for g in data),
        tokens=UsageTokens(**{n: sum(getattr(g.tokens, n) for g in data) for n in USAGE_FIELDS}),
        cost_usd=round(sum(g.cost_usd for g in data), 10),
        cost=CostSplit(**{p: round(sum(getattr(g.cost, p) for g in data), 10) for p in COST_FIELDS}),
        judge=JudgeSums(calls=sum(g.judge.calls for g in data), tokens=sum(g.judge.tokens for g in data),
                        cost_usd=round(sum(g.judge.cost_usd for g in data), 10)))
    body = UsageReport(key_id=owner, since=start, until=end, group_by=group_by, data=data, total=total)
    return JSON(body.model_dump(mode="json"))


class SeriesPoint(BaseModel):
    period: str = Field(description="The day (YYYY-MM-DD), the week's Monday (YYYY-MM-DD) or the month (YYYY-MM), UTC.")
    key_id: str | None = Field(description="The key that ran the runs (null: open mode or the admin key).")
    model: str = Field(description="As requested.")
    requests: int
    errors: int
    tokens: UsageTokens
    cost_usd: float = Field(description="Priced runs and their judge calls; unpriced runs count 0.")


class UsageSeries(BaseModel):
    key_id: str | None = Field(description="Whose usage; null: every key's (admin key or open mode).")
    since: datetime
    until: datetime
    bucket: Literal["day", "week", "month"]
    data: list[SeriesPoint] = Field(description="Oldest period first; within one, by key then model.")


@router.get("/v1/usage/series", response_model=UsageSeries,
            responses={c: {"model": ErrorBody} for c in (401, 403, 404, 422, 503)},
            summary="Requests, tokens of each kind and cost per day, week or month, key and model (charts)")
async def usage_series_route(
    principal: PrincipalDep,
    store: RecordsDep,
    since: Since = None,
    until: Until = None,
    bucket: Annotated[Literal["day", "week", "month"], Query(description="The period of each point.")] = "day",
    key_id: WhoseUsage = None,
) -> Response:
    start, end = _range(since, until)
    owner = _whose(principal, key_id, start, end)
    with database_errors():
        rows = await usage_series(store.engine, SeriesQuery(owner=owner, since=start, until=end, bucket=bucket))
    data = [SeriesPoint(period=r.period, key_id=r.owner, model=r.model, requests=r.requests, errors=r.errors,
                        tokens=UsageTokens(**r.tokens), cost_usd=r.cost_usd) for r in rows]
    body = UsageSeries(key_id=owner, since=start, until=end, bucket=bucket, data=data)
    return JSON(body.model_dump(mode="json"))
