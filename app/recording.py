"""The seam between a finished run and its durable record (app/records).

`run_record()` is the ONE place that reads a run's result (its `RunReport`, app/core/report.py)
to build a `RunRecord`; `RunRecorder` is the Gateway's run observer that hands each record to the
background writer. The writer never sees a run, and a run never waits on the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from app.core.events import STOP_REASON_FOR_STATUS, Usage
from app.core.report import RunReport
from app.core.transcript import Transcript
from app.records import RecordWriter, RunRecord, validation_without_content, without_content
from app.streams.errors import ClaimedRun, SweptRecord
from app.streams.log import StreamLog

__all__ = ["RunRecorder", "claimed_record", "live_transcript", "run_record", "swept_record", "transcript_document"]


def transcript_document(stream_id: str, model: str, provider: str, created_at: float,
                        transcript: Transcript) -> dict[str, Any]:
    """A transcript as GET /v1/stream/{id}/transcript shows it."""
    return _document(stream_id, model, provider, created_at, transcript.snapshot())


def _document(stream_id: str, model: str, provider: str, created_at: float, snapshot: dict[str, Any], *,
              content: bool = True) -> dict[str, Any]:
    """A transcript snapshot as GET /v1/stream/{id}/transcript shows it; as a record stores it
    without content when content is not recorded."""
    document = {"stream_id": stream_id, "model": model, "provider": provider, "created_at": created_at,
                **snapshot, "content_recorded": True}
    if content:
        return document
    stripped: dict[str, Any] = without_content(document)
    stripped["content_recorded"] = False
    return stripped


def live_transcript(log: StreamLog) -> dict[str, Any] | None:
    """A live stream's transcript document; None if it has none."""
    info = log.info
    if info.transcript is None:
        return None
    document = transcript_document(info.stream_id, info.model, info.provider, info.created_at, info.transcript)
    if log.final is not None and log.final.attempts:  # as the run's record will keep them
        document["attempts"] = [dict(attempt) for attempt in log.final.attempts]
    return document


def run_record(report: RunReport, *, content: bool) -> RunRecord:
    """The record of a run that ended."""
    transcript = _document(report.stream_id, report.model, report.provider, report.started_at,
                           report.transcript.snapshot(), content=content)
    if report.final.attempts:
        transcript["attempts"] = [dict(attempt) for attempt in report.final.attempts]
    validation: dict[str, Any] | None = dict(report.validation) if report.validation is not None else None
    if not content:
        validation = validation_without_content(validation)
    judged = report.validation.get("judge", {}) if report.validation is not None else {}
    costs = [line["cost_usd"] for line in judged.values() if "cost_usd" in line]
    return RunRecord(
        stream_id=report.stream_id,
        request_id=report.request_id,
        owner=report.owner,
        created_at=datetime.fromtimestamp(report.started_at, UTC),
        finished_at=datetime.fromtimestamp(report.started_at + report.duration, UTC),
        model=report.model,
        served_model=report.served_model,
        provider=report.provider,
        status=report.status,
        stop_reason=report.stop_reason,
        error_code=report.error_code,
        usage=report.usage,
        steps=report.steps,
        tools_run=report.tools_run,
        validation=validation,
        ttft_ms=round(report.ttft * 1000, 3) if report.ttft is not None else None,
        duration_ms=round(report.duration * 1000, 3),
        content_recorded=content,
        cost_usd=report.usage.cost_usd,
        judge_calls=sum(line["calls"] for line in judged.values()),
        judge_tokens=sum(line["total_tokens"] for line in judged.values()),
        judge_cost_usd=round(sum(costs), 10) if costs else None,
        opened=report.opened,
        cache_hit=report.final.cache is not None,
        cache_charged=report.final.cache["charged"] if report.final.cache is not None else None,
        transcript=transcript,
    )


def claimed_record(run: ClaimedRun, *, content: bool) -> RunRecord:
    """The record of a run another replica ended for its lost owner (`replica_lost`), as far as the
    shared store had it: the transcript's last snapshot, the usage of the steps that ended (the
    output of the last one unknown, null)."""
    now = datetime.now(UTC)
    snapshot = run.transcript
    transcript = None if snapshot is None else _document(run.stream_id, run.model, run.provider, run.created_at,
                                                         snapshot, content=content)
    seen = (snapshot or {}).get("usage") or {}
    usage = Usage(input_tokens=seen.get("input_tokens") or 0, cache_read_tokens=seen.get("cache_read_tokens") or 0,
                  cache_write_tokens=seen.get("cache_write_tokens") or 0,
                  reasoning_tokens=seen.get("reasoning_tokens") or 0, output_unknown=True)
    created = datetime.fromtimestamp(run.created_at, UTC) if run.created_at else now
    return RunRecord(
        stream_id=run.stream_id, request_id=run.tags.request_id, owner=run.owner, created_at=created,
        finished_at=now, model=run.model, served_model=None, provider=run.provider, status=run.status,
        stop_reason=STOP_REASON_FOR_STATUS[run.status], error_code=run.error["code"], usage=usage,
        steps=int((snapshot or {}).get("steps") or 1), tools_run=0, validation=None, ttft_ms=None,
        duration_ms=round(max(0.0, (now - created).total_seconds()) * 1000, 3), content_recorded=content,
        transcript=transcript,
    )


def swept_record(swept: SweptRecord, *, content: bool) -> RunRecord:
    """The record another replica built and left in the stream store's outbox, with the final
    transcript snapshot written beside it, as `run_record` would have stored it."""
    record = RunRecord.from_payload(swept.payload, None)
    if swept.transcript is not None:
        record.transcript = _document(record.stream_id, record.model, record.provider, record.created_at.timestamp(),
                                      swept.transcript, content=record.content_recorded)
    return record


class RunRecorder:
    """The Gateway's run observer: every finished run becomes a record in the writer's queue, and
    travels with its final in a shared stream store (`stage`: its outbox), for another replica to
    write if this one cannot.

    A run's observers are called as its final is appended, before the readers waiting for that
    final have run: the record is built in a callback after them (`call_soon`), off the path of
    the final to its client. A store that keeps an outbox needs it at once (written with the
    final): it asks for it, and the callback hands on the one it built."""

    def __init__(self, writer: RecordWriter, *, content: bool,
                 stage: Callable[[str, Callable[[], bytes]], None] | None = None) -> None:
        self.writer = writer
        self.content = content
        self.stage = stage

    def __call__(self, report: RunReport) -> None:
        built: list[RunRecord] = []

        def record() -> RunRecord:
            if not built:
                built.append(run_record(report, content=self.content))
            return built[0]

        if self.stage is not None and report.opened:
            self.stage(report.stream_id, lambda: record().payload())
        asyncio.get_running_loop().call_soon(self._submit, record, report.stream_id)

    def _submit(self, record: Callable[[], RunRecord], stream_id: str) -> None:
        try:
            self.writer.submit(record())
        except Exception as exc:  # a record that cannot be built is lost, never the loop's callbacks
            self.writer.log.error("record_build_failed", stream_id=stream_id, error=type(exc).__name__,
                                  detail=str(exc)[:200])
