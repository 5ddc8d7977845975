"""Response schemas of the run-record API (GET /v1/runs, GET /v1/runs/{id})."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.api.schemas import UsageData
from app.records import RunRecord

__all__ = ["RunList", "RunOut"]

RunStatus = Literal["ok", "blocked", "error", "cancelled"]


class RunOut(BaseModel):
    """The durable record of one run, written when its final was known."""

    id: str = Field(description="The stream id.")
    request_id: str | None
    owner: str | None = Field(description="The id of the API key that ran it (null in open mode or for the admin key).")
    created_at: datetime
    finished_at: datetime
    model: str = Field(description="As requested (provider/model or an alias).")
    served_model: str | None = Field(description="As the provider reported it.")
    provider: str
    status: RunStatus
    stop_reason: str | None
    error_code: str | None
    usage: UsageData = Field(description="Summed over the run's steps.")
    steps: int = Field(description="Provider calls made.")
    tools_run: int = Field(description="Tool calls the gateway executed.")
    validation: dict[str, Any] | None = Field(description="Verdict counts per validator (as final.validation).")
    ttft_ms: float | None = Field(description="Time to the first released content event.")
    duration_ms: float = Field(description="Request to final.")
    content_recorded: bool = Field(description="False: recorded with FOUNDRY_RECORD_CONTENT=false (no text).")
    cache_hit: bool | None = Field(default=False, description="The response cache answered it (null: recorded "
                                   "before the gateway kept this).")
    transcript_url: str

    @classmethod
    def of(cls, record: RunRecord) -> RunOut:
        return cls(
            id=record.stream_id, request_id=record.request_id, owner=record.owner, created_at=record.created_at,
            finished_at=record.finished_at, model=record.model, served_model=record.served_model,
            provider=record.provider, status=record.status, stop_reason=record.stop_reason,
            error_code=record.error_code, usage=record.usage.to_dict(), steps=record.steps,
            tools_run=record.tools_run, validation=record.validation, ttft_ms=record.ttft_ms,
            duration_ms=record.duration_ms, content_recorded=record.content_recorded, cache_hit=record.cache_hit,
            transcript_url=f"/v1/stream/{record.stream_id}/transcript",
        )


class RunList(BaseModel):
    data: list[RunOut] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")
