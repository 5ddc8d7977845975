"""`ResponseCache`: what the gateway asks of the cache around each run.

`plan` decides whether a request is cacheable (a rule names its model or route, the caller and
its key allow it, every gateway tool the run offers is declared deterministic) and computes its
key; `find` gives a replay source (a stored answer, or an identical run in flight here) or
makes the request the leader of its key; `opened` publishes the leader's log to the requests
that wait on it; `finished` stores an `ok` leader's log and lets the key go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from app.cache.config import CacheChoice, CacheRule, rule_for
from app.cache.entry import CorruptEntry, decode_entry, encode_entry
from app.cache.key import cache_key
from app.cache.replay import EntrySource, FollowSource, ReplaySource
from app.cache.store import CacheStore
from app.observability import Metrics
from app.providers.base import ProviderRequest
from app.run import Run
from app.streams.log import StreamLog
from app.validation import ValidatorSpec

__all__ = ["CachePlan", "ResponseCache"]


@dataclass(slots=True, kw_only=True)
class CachePlan:
    """One cacheable request: its key, the rule that applies and what the caller allows."""

    key: str
    rule: CacheRule
    lookup: bool
    store: bool
    leading: bool = False
    """Set by `find`: this request's run is the one identical requests here follow."""


class ResponseCache:
    def __init__(self, *, rules: list[CacheRule], store: CacheStore, metrics: Metrics,
                 deterministic_tools: Iterable[str], operator_validators: list[ValidatorSpec],
                 default_chunking: str) -> None:
        self.rules, self.store, self.metrics = rules, store, metrics
        self.deterministic = frozenset(deterministic_tools)
        self.operator_validators = operator_validators
        self.default_chunking = default_chunking
        self._inflight: dict[str, asyncio.Future[StreamLog | None]] = {}
        """Each key's leading run on this replica, until it ended (its log once it opened)."""

    def plan(self, *, model: str, targets: Iterable[str], request: ProviderRequest, gateway_tools: Iterable[str],
             validators: Iterable[ValidatorSpec], chunking: str | None, owner: str | None,
             choice: CacheChoice) -> CachePlan | None:
        """The request's plan; None when no rule applies, the caller refused both, its key is
        denied, or the run offers a tool the operator did not declare deterministic."""
        rule = rule_for(self.rules, model)
        if rule is None or not (choice.lookup or choice.store):
            return None
        if rule.deny_keys and {owner, choice.key_name} & set(rule.deny_keys):
            return None
        if any(name not in self.deterministic for name in gateway_tools):
            return None
        scope = f"shared:{rule.scope}" if rule.scope is not None else f"key:{owner or ''}"
        key = cache_key(scope=scope, targets=targets, request=request,
                        validators=[*validators, *self.operator_validators], chunking=chunking or self.default_chunking)
        return CachePlan(key=key, rule=rule, lookup=choice.lookup, store=choice.store)

    async def find(self, plan: CachePlan) -> ReplaySource | None:
        """A stored answer, or the log of the identical run in flight here (its leader opened);
        None: a miss, and this request leads its key when the rule collapses."""
        metrics = self.metrics
        if plan.lookup:
            data = await self.store.get(plan.key)
            if data is not None:
                try:
                    cached = decode_entry(data)
                except CorruptEntry:
                    metrics.child(metrics.cache_misses, "corrupt").inc()
                else:
                    metrics.child(metrics.cache_hits, "stored").inc()
                    return EntrySource(cached, paced=plan.rule.replay == "paced", charged=plan.rule.charge)
            leader = self._inflight.get(plan.key) if plan.rule.collapse else None
            if leader is not None:
                log = await asyncio.shield(leader)
                if log is not None:
                    metrics.child(metrics.cache_hits, "in_flight").inc()
                    return FollowSource(log, charged=plan.rule.charge)
        if plan.lookup:
            metrics.child(metrics.cache_misses, "absent").inc()
        if plan.rule.collapse and plan.key not in self._inflight:
            self._inflight[plan.key] = asyncio.get_running_loop().create_future()
            plan.leading = True
        return None

    def opened(self, plan: CachePlan, run: Run) -> None:
        """The leader's run opened (its log exists): the requests waiting on it follow it."""
        leader = self._inflight.get(plan.key)
        if plan.leading and leader is not None and not leader.done():
            leader.set_result(run.log)

    async def keep(self, plan: CachePlan, run: Run) -> None:
        """Store the run's answer if it ended `ok` whole (a replay is never stored again)."""
        log, report = run.log, run.report
        final = log.final
        if plan.store and final is not None and final.status == "ok" and final.cache is None \
                and log.first_seq == 1 and report is not None:
            value = encode_entry(log.frames_after(0), created_at=time.time(), ttft=run.ttft, duration=report.duration)
            await self.store.put(plan.key, value, plan.rule.ttl_seconds)

    def release(self, plan: CachePlan) -> None:
        """The leader's run ended or never opened: later requests look up (or lead) again; those
        still waiting on one that never opened open their own."""
        if plan.leading:
            leader = self._inflight.pop(plan.key, None)
            if leader is not None and not leader.done():
                leader.set_result(None)

    async def aclose(self) -> None:
        await self.store.aclose()
