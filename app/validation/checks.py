"""Running one round of checks: inline validators in place, the others as concurrent tasks.

Each check is timed and counted; an error or timeout follows the validator's `on_error` (fail
closed by default). The first `fail` raises `Blocked` and cancels the checks still running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from time import perf_counter

from app.core.errors import GatewayError
from app.core.events import StreamEvent
from app.core.validation_data import ValidatorStatsData
from app.validation.judge import clip
from app.validation.validators.base import UNKNOWN, Validator, Verdict

__all__ = ["Blocked", "Member", "Observer", "Stats", "run_checks"]

Observer = Callable[[str, str, str, float], None]
"""observer(validator name, phase "chunk"|"final"|"tool_call", outcome, seconds), once per check.
outcome is "pass", "fail", "unknown", "error" or "timeout"; a hook for Prometheus counters."""

Check = Callable[[Validator], Awaitable[Verdict]]


class Blocked(GatewayError):
    """A validator failed: the stream ends with final{status: "blocked"} and this as `error`."""

    status = 400
    code = "validation_failed"
    retryable = False
    final_status = "blocked"

    def __init__(self, validator: str, reason: str) -> None:
        reason = clip(reason)
        super().__init__(f"validator {validator} failed: {reason}", validator=validator, reason=reason)
        self.label, self.why = validator, reason
        self.released: list[StreamEvent] = []
        """Events validated before the failing chunk and not yet released (pipelined checks
        end in any order): the run appends them before the final."""


@dataclass(slots=True, kw_only=True)
class Stats:
    """Verdict counts and time spent, per configured validator (summed over its lanes)."""

    passed: int = 0
    failed: int = 0
    unknown: int = 0
    errors: int = 0
    seconds: float = 0.0

    def count(self, outcome: str, seconds: float) -> None:
        if outcome == "pass":
            self.passed += 1
        elif outcome == "unknown":
            self.unknown += 1
        elif outcome == "fail":
            self.failed += 1
        else:
            self.errors += 1
        self.seconds += seconds

    def to_dict(self) -> ValidatorStatsData:
        return {
            "pass": self.passed,
            "fail": self.failed,
            "unknown": self.unknown,
            "error": self.errors,
            "checks": self.passed + self.failed + self.unknown + self.errors,
            "seconds": round(self.seconds, 6),
        }


@dataclass(slots=True, kw_only=True)
class Member:
    """One validator instance in one lane of one gate, with its policy and shared stats."""

    label: str
    name: str
    validator: Validator
    timeout: float
    fail_on_error: bool
    stats: Stats = field(default_factory=Stats)

    def error_verdict(self, reason: str) -> Verdict:
        return Verdict.fail(reason) if self.fail_on_error else UNKNOWN

    def record(self, phase: str, outcome: str, seconds: float, observer: Observer | None) -> None:
        self.stats.count(outcome, seconds)
        if observer is not None:
            observer(self.name, phase, outcome, seconds)


async def _timed(member: Member, phase: str, check: Check, observer: Observer | None) -> Verdict:
    started = perf_counter()
    outcome: str
    try:
        async with asyncio.timeout(member.timeout):
            verdict = await check(member.validator)
        outcome = verdict.kind
    except TimeoutError:
        verdict, outcome = member.error_verdict(f"check timed out after {member.timeout:g}s"), "timeout"
    except Exception as exc:  # a validator's bug or its backend's failure: on_error decides
        verdict, outcome = member.error_verdict(clip(f"check failed: {type(exc).__name__}: {exc}")), "error"
    member.record(phase, outcome, perf_counter() - started, observer)
    return verdict


async def _concurrently(members: list[Member], phase: str, check: Check, observer: Observer | None) -> list[Verdict]:
    if len(members) == 1:
        verdict = await _timed(members[0], phase, check, observer)
        if verdict.kind == "fail":
            raise Blocked(members[0].label, verdict.reason or "failed")
        return [verdict]
    tasks = [asyncio.create_task(_timed(m, phase, check, observer)) for m in members]
    verdicts: list[Verdict] = []
    try:
        pending: set[asyncio.Task[Verdict]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for member, task in zip(members, tasks, strict=True):
                if task in done:
                    verdict = task.result()
                    if verdict.kind == "fail":
                        raise Blocked(member.label, verdict.reason or "failed")
                    verdicts.append(verdict)
    finally:
        running = [t for t in tasks if not t.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
    return verdicts


async def run_checks(members: list[Member], phase: str, check: Check, observer: Observer | None) -> list[Verdict]:
    """Every member's verdict on one check; raises Blocked on the first fail."""
    verdicts: list[Verdict] = []
    awaiting: list[Member] = []
    for member in members:
        if not member.validator.inline:
            awaiting.append(member)
            continue
        started = perf_counter()
        outcome: str
        try:
            verdict = await check(member.validator)
            outcome = verdict.kind
        except Exception as exc:
            verdict, outcome = member.error_verdict(clip(f"check failed: {type(exc).__name__}: {exc}")), "error"
        member.record(phase, outcome, perf_counter() - started, observer)
        if verdict.kind == "fail":
            raise Blocked(member.label, verdict.reason or "failed")
        verdicts.append(verdict)
    if awaiting:
        verdicts += await _concurrently(awaiting, phase, check, observer)
    return verdicts
