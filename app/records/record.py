"""The typed record of one finished run, and the content-free form of a transcript.

A `RunRecord` is what the writer stores: built once per run when its `final` is known
(app/recording.py), plain data, no I/O. `without_content` strips every piece of message text from
a transcript (request messages, answers, thinking, tool inputs, fragments and outputs) for
operators who must not store it (FOUNDRY_RECORD_CONTENT=false).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from app.core.cost import Cost
from app.core.events import Usage

__all__ = ["COST_FIELDS", "RunRecord", "as_utc", "validation_without_content", "without_content"]

USAGE_FIELDS = ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "cache_write_tokens",
                "reasoning_tokens", "cache_write_1h_tokens")
COST_FIELDS = ("input_usd", "cache_read_usd", "cache_write_usd", "output_usd")
"""The parts of a run's cost (`Cost`), each in a `cost_<part>` column."""


@dataclass(slots=True, kw_only=True)
class RunRecord:
    stream_id: str
    request_id: str | None
    owner: str | None = None
    """The id of the API key that ran it (None in open mode and for the admin key)."""
    created_at: datetime
    finished_at: datetime
    model: str
    """As requested (`provider/model` or an alias)."""
    served_model: str | None
    """As the provider reported it."""
    provider: str
    status: str
    stop_reason: str | None
    error_code: str | None
    usage: Usage = field(default_factory=Usage)
    steps: int
    tools_run: int
    validation: dict[str, Any] | None
    ttft_ms: float | None
    duration_ms: float
    content_recorded: bool
    cost_usd: float | None = None
    """`usage.cost`'s total (the operator's price or the library's); None when the model has no price."""
    judge_calls: int = 0
    """`llm_judge` calls the run made (their lines by model: `validation.judge`)."""
    judge_tokens: int = 0
    judge_cost_usd: float | None = None
    opened: bool | None = True
    """The run had a stream (False: no target served, nothing to resume; None: recorded before this was kept)."""
    cache_hit: bool | None = False
    """The response cache answered it (app/cache; None: recorded before this was kept)."""
    cache_charged: bool | None = None
    """A hit counted against its key's budget (its rule's `charge`); None: not a hit."""
    transcript: dict[str, Any] | None
    """As GET /v1/stream/{id}/transcript shows it (without content when content is not recorded)."""

    def row(self) -> dict[str, Any]:
        """The `runs` table row."""
        usage: dict[str, Any] = {name: getattr(self.usage, name) for name in USAGE_FIELDS}
        if self.usage.output_unknown:
            usage["output_tokens"] = usage["total_tokens"] = None
        cost = self.usage.cost
        return {
            "id": self.stream_id, "request_id": self.request_id, "owner": self.owner,
            "created_at": self.created_at, "finished_at": self.finished_at, "model": self.model,
            "served_model": self.served_model, "provider": self.provider, "status": self.status,
            "stop_reason": self.stop_reason, "error_code": self.error_code,
            **usage, "price_source": cost.source if cost is not None else None,
            **{f"cost_{part}": getattr(cost, part) if cost is not None else None for part in COST_FIELDS},
            "steps": self.steps, "tools_run": self.tools_run, "validation": self.validation,
            "ttft_ms": self.ttft_ms, "duration_ms": self.duration_ms, "content_recorded": self.content_recorded,
            "cost_usd": self.cost_usd, "judge_calls": self.judge_calls, "judge_tokens": self.judge_tokens,
            "judge_cost_usd": self.judge_cost_usd, "opened": self.opened,
            "cache_hit": self.cache_hit, "cache_charged": self.cache_charged,
        }

    def out_of_bounds(self) -> str | None:
        """The first count no column can hold (negative, or past 64 bits), or None: checked before
        the database, whose refusal would cost a round trip per split of the batch."""
        counts = {**{name: getattr(self.usage, name) for name in USAGE_FIELDS}, "steps": self.steps, "tools_run": self.tools_run,
                  "judge_calls": self.judge_calls, "judge_tokens": self.judge_tokens}
        for name, value in counts.items():
            if isinstance(value, int) and not 0 <= value <= _BIGINT:
                return f"{name} out of range: {value}"[:200]
        return None

    def payload(self) -> bytes:
        """The record without its transcript, as JSON: what travels with the run's final in the
        shared stream store (its outbox), so that another replica can write it (`from_payload`)."""
        return orjson.dumps(self.row())

    @classmethod
    def from_payload(cls, payload: bytes, transcript: dict[str, Any] | None) -> RunRecord:
        row = orjson.loads(payload)
        row["created_at"], row["finished_at"] = (datetime.fromisoformat(row[k]) for k in ("created_at", "finished_at"))
        return cls.from_row(row, transcript)

    @classmethod
    def from_row(cls, row: Mapping[Any, Any], transcript: dict[str, Any] | None = None) -> RunRecord:
        """The record a `runs` row holds (as `row()` makes it, or as the database returns it)."""
        # output_tokens null: the run ended before the provider reported its output
        usage = Usage(output_unknown=row["output_tokens"] is None, cost_usd=row["cost_usd"])
        for name in USAGE_FIELDS:
            setattr(usage, name, row.get(name) or 0)
        if row.get("price_source") is not None:  # recorded before 0010: the total alone
            usage.cost = Cost(source=row["price_source"], **{part: row[f"cost_{part}"] or 0.0 for part in COST_FIELDS})
        return cls(stream_id=row["id"], created_at=as_utc(row["created_at"]), finished_at=as_utc(row["finished_at"]),
                   usage=usage, transcript=transcript, **{name: row[name] for name in _PLAIN_FIELDS})


_BIGINT = (1 << 63) - 1

_PLAIN_FIELDS = ("request_id", "owner", "model", "served_model", "provider", "status", "stop_reason", "error_code",
                 "steps", "tools_run", "validation", "ttft_ms", "duration_ms", "content_recorded", "cost_usd",
                 "judge_calls", "judge_tokens", "judge_cost_usd", "opened", "cache_hit", "cache_charged")


def as_utc(value: datetime) -> datetime:
    """A time in UTC; a time without a zone is UTC already (SQLite keeps none: every stored time is UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Keys whose values are message content wherever they appear in a transcript.
_CONTENT_KEYS = frozenset({"content", "input", "output", "arguments", "reasoning", "text", "signature", "data"})


def without_content(value: Any) -> Any:
    """A copy of a transcript (or any JSON value) with content fields emptied: strings and objects
    under a content key become None, argument fragments an empty list; ids, names, roles, states,
    counts and timestamps stay."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _CONTENT_KEYS:
                out[key] = None
            elif key == "fragments":
                out[key] = []
            else:
                out[key] = without_content(item)
        return out
    if isinstance(value, list):
        return [without_content(item) for item in value]
    return value


def validation_without_content(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """The validation summary without the block reason (a reason may quote the matched text)."""
    if summary is None or "blocked" not in summary:
        return summary
    blocked = summary["blocked"]
    return {**summary, "blocked": {"validator": blocked.get("validator"), "reason": None}}
