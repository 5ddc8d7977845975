"""The `Auth` service: who is calling (401), may they use this model (403), are they within their
limits and budget (429), and the bookkeeping when a run ends (release, tokens, spend, metrics).

Key lookups are cached for `cache_seconds` (hits and misses alike), so a key revoked or changed on
one replica is refused by every replica within that time, and the database sees at most one
lookup per key per replica per period.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

from app.auth.keys import hash_key, looks_like_key
from app.auth.keystore import KeyStore, KeysUnavailable
from app.auth.limiter import Admission, Denied, Limiter, Limits
from app.auth.policy import ConfiguredKey, KeyPolicy, Principal, model_allowed
from app.core.errors import ErrorData, GatewayError
from app.observability import get_logger
from app.records import spend
from app.records.spend import SpendTotal, month_of

__all__ = ["AccessDenied", "Auth", "Ticket"]

_CACHE_MAX = 10_000


class AccessDenied(GatewayError):
    """401, 403 or 429 before any work; `headers` go on the response (WWW-Authenticate, x-ratelimit-*)."""

    def __init__(self, message: str, *, code: str, status: int, headers: Mapping[str, str] | None = None,
                 field: str | None = None, retry_after: int | None = None, **extra: Any) -> None:
        super().__init__(message, code=code, status=status, retryable=status in (429, 503), field=field,
                         retry_after=str(retry_after) if retry_after is not None else None)
        self.headers = dict(headers or {})
        self.extra = extra
        """Further fields of the error body: which limit (`limit`), spend and budget."""

    def to_dict(self) -> ErrorData:
        return cast(ErrorData, {**super().to_dict(), **self.extra})


def store_unavailable(exc: BaseException) -> AccessDenied:
    """The counter store (Redis) cannot answer: the same 503 the stream store gives, retryable."""
    return AccessDenied(f"the store is unreachable ({type(exc).__name__}); retry later", code="store_unavailable",
                        status=503)


def unauthorized(message: str, code: str = "invalid_api_key") -> AccessDenied:
    return AccessDenied(message, code=code, status=401, headers={"WWW-Authenticate": "Bearer"})


@dataclass(slots=True, kw_only=True, frozen=True)
class Reservation:
    """What a run is expected to take, reserved at admission and settled to its real usage at the end:
    its prompt and output tokens (an estimate) and their price (0 when the model has none)."""

    tokens: int = 0
    usd: float = 0.0


@dataclass(slots=True, kw_only=True)
class Ticket:
    """One admitted request of a key: the concurrency slot to give back, the tokens and budget it
    reserved, and the headers to send."""

    key: KeyPolicy
    slot: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    done: bool = False
    reserved: Reservation = field(default_factory=Reservation)
    window: int = 0
    """The minute whose tokens hold the reservation."""
    hold: str | None = None
    """The id of the budget hold (None: the key has no budget)."""
    month: str = ""


def _next_month(now: datetime) -> datetime:
    return datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)


class Auth:
    def __init__(
        self,
        *,
        admin_key: str | None,
        admin_key_previous: str | None = None,
        config_keys: list[ConfiguredKey],
        keystore: KeyStore | None,
        limiter: Limiter,
        cache_seconds: float = 2.0,
        on_outcome: Callable[[str, str], None] = lambda name, outcome: None,
    ) -> None:
        self._admin_hash = hashlib.sha256(admin_key.encode()).digest() if admin_key else None
        # The key being rotated out counts only beside a current one (never an admin of its own).
        self._admin_hashes = tuple(hashlib.sha256(k.encode()).digest()
                                   for k in (admin_key, admin_key_previous if admin_key else None) if k)
        self._config = {k.hash: KeyPolicy.of(k.key_id(), k, "config") for k in config_keys}
        self.keystore = keystore
        self.limiter = limiter
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, KeyPolicy | None]] = {}
        self._on_outcome = on_outcome
        self._tasks: set[asyncio.Task[Any]] = set()
        self.log = get_logger("foundry.auth")

    @property
    def mode(self) -> Literal["open", "keys"]:
        """Open (anyone may call) only when neither an admin key nor configured keys exist."""
        return "keys" if self._admin_hash is not None or self._config else "open"

    @property
    def has_admin(self) -> bool:
        return self._admin_hash is not None

    # -- who is calling -------------------------------------------------------------------------

    async def authenticate(self, authorization: str | None, x_api_key: str | None) -> Principal:
        if self.mode == "open":
            return Principal(kind="open")
        token = _token(authorization, x_api_key)
        digest = hashlib.sha256(token.encode()).digest()
        if any([hmac.compare_digest(digest, admin) for admin in self._admin_hashes]):  # each compared, always
            return Principal(kind="admin")
        if not looks_like_key(token):
            raise unauthorized("the API key is malformed (gateway keys look like fgw-...)")
        policy = await self._lookup(hash_key(token))
        if policy is None:
            raise unauthorized("unknown or revoked API key")
        if policy.expired(datetime.now(UTC)):
            raise unauthorized(f"API key {policy.id} expired", code="key_expired")
        return Principal(kind="key", key=policy)

    async def _lookup(self, key_hash: str) -> KeyPolicy | None:
        configured = self._config.get(key_hash)
        if configured is not None:
            return configured
        if self.keystore is None:
            return None
        now = time.monotonic()
        hit = self._cache.get(key_hash)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            policy = await self.keystore.by_hash(key_hash)
        except KeysUnavailable:
            raise
        except Exception as exc:  # the database's failure, told as such
            raise KeysUnavailable.of(exc) from None
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[key_hash] = (now + self.cache_seconds, policy)
        return policy

    def configured_keys(self) -> list[KeyPolicy]:
        return list(self._config.values())

    def configured(self, key_id: str) -> KeyPolicy | None:
        return next((p for p in self._config.values() if p.id == key_id), None)

    def forget(self) -> None:
        """Drop cached lookups (this replica's own admin changes take effect at once)."""
        self._cache.clear()

    # -- may they run this ----------------------------------------------------------------------

    async def admit(self, principal: Principal, model: str, alias_target: str = "",
                    also: Sequence[tuple[str, str, str]] = (), reserve: Reservation = Reservation()) -> Ticket | None:
        """Check the model (and `also`: (field, model, alias target) of every other model the run
        calls, e.g. an llm_judge's) and take the key's limits, reserving `reserve` of its tokens per
        minute and budget until the run ends; None for the admin key and open mode."""
        key = principal.key
        if key is None:
            return None
        for field_name, name, target in (("model", model, alias_target), *also):
            if not model_allowed(key.models, name, target):
                self._on_outcome(key.name, "model_denied")
                raise AccessDenied(f"API key {key.id} may not use model {name[:256]!r}", code="model_not_allowed",
                                   status=403, field=field_name)
        ticket = Ticket(key=key, reserved=reserve if key.tpm or key.budget_usd is not None else Reservation())
        if key.budget_usd is not None:
            try:
                await self._hold_budget(ticket)
            except (AccessDenied, KeysUnavailable):
                raise
            except Exception as exc:  # the counter store's failure, as the rate limits tell it
                raise store_unavailable(exc) from None
        limits = Limits(rpm=key.rpm, tpm=key.tpm, max_concurrent=key.max_concurrent)
        if not limits.any:
            self._on_outcome(key.name, "admitted")
            return ticket
        try:
            admission = await self._limits(ticket, limits)
        except BaseException:
            await self._release_hold(ticket)
            raise
        return self._admitted(ticket, admission)

    def _admitted(self, ticket: Ticket, admission: Admission) -> Ticket:
        self._on_outcome(ticket.key.name, "admitted")
        ticket.slot, ticket.headers, ticket.window = admission.slot, admission.headers, admission.window
        return ticket

    async def _release_hold(self, ticket: Ticket) -> None:
        if ticket.hold is not None:
            hold, ticket.hold = ticket.hold, None
            with contextlib.suppress(Exception):  # it expires with its lease anyway
                await self.limiter.release_holds(ticket.key.id, [hold], recorded=False)

    async def _limits(self, ticket: Ticket, limits: Limits) -> Admission:
        key = ticket.key
        try:
            return await self.limiter.admit(key.id, limits, ticket.reserved.tokens if key.tpm else 0)
        except Denied as denied:
            self._on_outcome(key.name, f"limited_{denied.reason}")
            what = {"requests": f"{key.rpm} requests per minute", "tokens": f"{key.tpm} tokens per minute",
                    "concurrency": f"{key.max_concurrent} runs at once"}[denied.reason]
            raise AccessDenied(f"rate limit of API key {key.id}: {what}", code="rate_limited", status=429,
                               headers=denied.headers, retry_after=denied.retry_after, limit=denied.reason) from None
        except Exception as exc:  # the counter store's failure: refuse fast, never unlimited
            raise store_unavailable(exc) from None

    async def _hold_budget(self, ticket: Ticket) -> None:
        """Hold the run's estimated cost of the month's budget, or refuse (429) when the recorded
        spend and the holds of runs in progress reach it."""
        key = ticket.key
        now = datetime.now(UTC)
        month = month_of(now)
        hold = secrets.token_hex(8)
        held = await self.limiter.hold(key.id, month, hold, ticket.reserved.usd, key.budget_usd or 0.0)
        if held is None:  # a counter Redis lost (or never had): rebuilt from the records
            total = await self._recorded_spend(key.id, month)
            await self.limiter.put_spend(key.id, month, total.usd, total.runs)
            held = await self.limiter.hold(key.id, month, hold, ticket.reserved.usd, key.budget_usd or 0.0)
        if held is None:  # the counter went again at once: admitted unheld (the next check rebuilds it)
            return
        taken, counted = held
        if taken:
            ticket.hold, ticket.month = hold, month
            return
        self._on_outcome(key.name, "budget_exceeded")
        retry = max(1, int((_next_month(now) - now).total_seconds()))
        raise AccessDenied(f"API key {key.id} spent its budget of {key.budget_usd} USD for {month}",
                           code="budget_exceeded", status=429, retry_after=retry,
                           headers={}, spent_usd=round(counted, 6), budget_usd=key.budget_usd)

    async def _recorded_spend(self, key_id: str, month: str) -> SpendTotal:
        """This month's spend from the run records, judge calls included (the key_spend table)."""
        if self.keystore is None:
            return SpendTotal(owner=key_id, month=month, usd=0.0, runs=0)
        try:
            async with self.keystore.engine.connect() as conn:
                return await spend.read(conn, key_id, month)
        except Exception as exc:  # the records database is the key database
            raise KeysUnavailable.of(exc) from None

    async def spend_recorded(self, totals: Sequence[SpendTotal]) -> None:
        """Keys' spend totals the records writer just committed: each counter takes its total when
        newer than what it holds (so it equals the records, whatever order totals arrive in)."""
        for total in totals:
            try:
                await self.limiter.put_spend(total.owner, total.month, total.usd, total.runs)
            except Exception as exc:  # the next budget check rebuilds a counter it cannot read
                self.log.warning("spend_counter_failed", key_id=total.owner, error=type(exc).__name__)

    # -- when the run ends ----------------------------------------------------------------------

    async def abandon(self, ticket: Ticket | None) -> None:
        """The run never started (open failed): give the slot, the tokens and the hold back."""
        if ticket is not None and not ticket.done:
            ticket.done = True
            if ticket.slot is not None:
                await self.limiter.release(ticket.key.id, ticket.slot)
            if ticket.key.tpm and ticket.reserved.tokens:
                await self.limiter.settle_tokens(ticket.key.id, ticket.window, ticket.reserved.tokens, 0)
            await self._release_hold(ticket)

    def run_ended(self, ticket: Ticket, tokens: int, cost_usd: float | None, run_id: str) -> None:
        """Release the slot, settle the tokens and the spend (in the background: observers never wait)."""
        if ticket.done:
            return
        ticket.done = True
        task = asyncio.get_running_loop().create_task(self._settle(ticket, tokens, cost_usd, run_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, ticket: Ticket, tokens: int, cost_usd: float | None, run_id: str) -> None:
        key = ticket.key
        try:
            if ticket.slot is not None:
                await self.limiter.release(key.id, ticket.slot)
            if key.tpm and (tokens or ticket.reserved.tokens):
                await self.limiter.settle_tokens(key.id, ticket.window, ticket.reserved.tokens, tokens)
            if ticket.hold is not None:
                # Without records the counter adds the cost here. With records the hold keeps the real
                # cost until the writer's commit counts the run (runs_recorded), so that no moment
                # has the run in neither the counter nor a hold.
                await self.limiter.settle_hold(key.id, ticket.month, ticket.hold, cost_usd or 0.0,
                                               run_id if self.keystore is not None else None)
            elif key.budget_usd is not None and cost_usd and self.keystore is None:
                await self.limiter.add_spend(key.id, month_of(datetime.now(UTC)), cost_usd)
        except Exception as exc:  # the lease expires by itself; say so
            self.log.warning("limit_settle_failed", key_id=key.id, error=type(exc).__name__)

    async def runs_recorded(self, runs: Sequence[tuple[str, str]]) -> None:
        """(key id, run id) of runs whose records the writer just committed: their budget holds go
        (their costs are in the totals `spend_recorded` just set)."""
        by_key: dict[str, list[str]] = {}
        for owner, run_id in runs:
            by_key.setdefault(owner, []).append(run_id)
        for owner, run_ids in by_key.items():
            try:
                await self.limiter.release_holds(owner, run_ids, recorded=True)
            except Exception as exc:  # they expire with their lease
                self.log.warning("spend_holds_failed", key_id=owner, error=type(exc).__name__)

    async def settled(self) -> None:
        """Wait until every ended run's slot, tokens and spend are counted."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        await self.settled()
        await self.limiter.aclose()


def _token(authorization: str | None, x_api_key: str | None) -> str:
    """The key from `Authorization: Bearer <key>` or `x-api-key: <key>`; 401 for anything else."""
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise unauthorized("Authorization must be `Bearer <key>`", code="invalid_authorization")
        return token
    if x_api_key is not None and x_api_key.strip():
        return x_api_key.strip()
    raise unauthorized("an API key is required: Authorization: Bearer <key> or x-api-key: <key>",
                       code="missing_api_key")
