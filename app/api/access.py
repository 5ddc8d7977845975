"""Access control at the HTTP edge: the `Principal` dependency every /v1 route takes, the admin
dependency, and `open_run`, the one seam through which a route starts a run for a caller
(model check, limits, ownership, the key's validators, the x-ratelimit-* headers).

A route that opens a run takes one `CallerDep` (`JsonCallerDep` for a JSON body) and starts the
run with `open_run`; any other authenticated route takes `PrincipalDep`. Either is solved once per
request: FastAPI walks a dependency's sub-dependencies again each time it is named, even when its
value is cached, so neither is also named on the router.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPBearer

from app.accounting import KeyAccountant, estimate
from app.api.deps import accountant_in, auth_in, gateway_in, log_of, writer_in
from app.api.errors import require_json
from app.api.media import check_media
from app.api.middleware import RequestLog
from app.api.readers import opened
from app.auth import Auth, Principal
from app.auth.service import AccessDenied
from app.cache.config import CacheChoice
from app.pipeline import Gateway, RunHandle, RunSpec
from app.records import RecordWriter
from app.validation import called_models

__all__ = ["AUTHENTICATING", "SECURITY_SCHEMES", "AdminDep", "Caller", "CallerDep", "JsonCallerDep", "PrincipalDep",
           "admit_request", "not_found_unless_owner", "open_run", "principal_of"]

# The security schemes of every route that authenticates its caller (AUTHENTICATING), as FastAPI's own classes
# describe them; app/api/openapi.py puts them in the OpenAPI document. Neither refuses a request
# (auto_error=False): the gateway answers a missing, malformed or unknown key with its own 401 and
# reason (app/auth/service.py). They are not dependencies of `principal_of`: FastAPI solves each
# sub-dependency with a pass of its own, and the two cost about 45 us a request on the 2-core
# machine (docs/performance.md) for headers read here anyway.
SECURITY_SCHEMES = (HTTPBearer(auto_error=False, description="Authorization: Bearer fgw-..."),
                    APIKeyHeader(name="x-api-key", auto_error=False, description="x-api-key: fgw-... (Anthropic clients)"))


async def principal_of(request: Request) -> Principal:
    """The caller, from `Authorization: Bearer <key>` or `x-api-key: <key>`; 401 with a reason.

    The raw Authorization header is read rather than a Bearer parse, which reads a malformed header
    as none at all: the caller is told which of the two it sent. An empty `x-api-key` is none, as
    FastAPI's `APIKeyHeader` reads it."""
    headers = request.headers
    principal = await auth_in(request).authenticate(headers.get("authorization"), headers.get("x-api-key") or None)
    record = request.scope.get("state", {}).get("record")
    if isinstance(record, RequestLog):  # the log line names the key by id and name, never the key
        record.key_id = principal.owner or principal.kind
        record.key_name = principal.key.name if principal.key is not None else None
    return principal


async def _admin(request: Request, principal: Annotated[Principal, Depends(principal_of)]) -> Principal:
    if principal.kind == "admin":
        return principal
    if not auth_in(request).has_admin:
        raise AccessDenied("key administration needs FOUNDRY_ADMIN_KEY on this gateway", code="admin_disabled",
                           status=403)
    raise AccessDenied("this call needs the admin key", code="admin_only", status=403)


PrincipalDep = Annotated[Principal, Depends(principal_of)]
AdminDep = Annotated[Principal, Depends(_admin)]


@dataclass(slots=True, frozen=True)
class Caller:
    """What a request that opens a run needs, solved as one dependency: the caller and the
    services that admit, start and account for its run."""

    request: Request
    principal: Principal
    gateway: Gateway
    auth: Auth
    accountant: KeyAccountant
    record: RequestLog
    records: RecordWriter | None
    """The run-record writer (None: records off), where a request's earlier runs are looked up."""


def _caller(request: Request, principal: Principal) -> Caller:
    return Caller(request=request, principal=principal, gateway=gateway_in(request), auth=auth_in(request),
                  accountant=accountant_in(request), record=log_of(request), records=writer_in(request))


# The caller's dependencies authenticate it themselves rather than depend on `principal_of`: FastAPI
# solves each level of dependencies in a pass of its own, 0.06-0.08M of a short request's 3.28M
# instructions (`python bench/instructions.py`). The OpenAPI document lists the security schemes
# on their routes all the same (AUTHENTICATING, app/api/openapi.py).
async def caller_of(request: Request) -> Caller:
    return _caller(request, await principal_of(request))


async def json_caller_of(request: Request) -> Caller:
    """The caller of a route whose body must be JSON: authenticated first (401), then the body's
    declared type checked (415)."""
    principal = await principal_of(request)
    await require_json(request)
    return _caller(request, principal)


AUTHENTICATING = (principal_of, caller_of, json_caller_of)
"""The dependencies that authenticate the caller: a route that depends on one lists the security schemes."""


CallerDep = Annotated[Caller, Depends(caller_of)]
JsonCallerDep = Annotated[Caller, Depends(json_caller_of)]


def not_found_unless_owner(principal: Principal, owner: str | None, error: Exception) -> None:
    """Another key's stream, transcript or run is unknown to the caller: 404, never 403 (ids are
    not confirmed to outsiders). The admin key and open mode see everything."""
    if not principal.may_see(owner):
        raise error


async def admit_request(caller: Caller, model: str) -> dict[str, str]:
    """Admit a request that starts no run (Anthropic's count_tokens) through the same check as a
    run, against the key's models and requests per minute only (403, 429), and give the
    x-ratelimit-* headers. It produces no tokens, holds no run and costs nothing, so the key's
    tokens per minute, runs at once and budget are not asked (and nothing is settled after)."""
    principal, key = caller.principal, caller.principal.key
    if key is not None:
        principal = replace(principal, key=replace(key, tpm=None, max_concurrent=None, budget_usd=None))
    ticket = await caller.auth.admit(principal, model, caller.gateway.settings.aliases.get(model, ""))
    return ticket.headers if ticket is not None else {}


async def open_run(caller: Caller, spec: RunSpec) -> tuple[RunHandle, dict[str, str]]:
    """Bound the images and documents (413), admit the caller (403 model, 429 limits or budget),
    start the run as theirs and wait until it opened (app/api/readers.py), and give the
    x-ratelimit-* headers for the response. A run that fails to open gives its slot back; one that
    opened settles the key's accounts when it ends."""
    request, gateway, principal = caller.request, caller.gateway, caller.principal
    record, auth = caller.record, caller.auth
    settings = gateway.settings
    check_media(spec.request.messages, settings, request)
    aliases = settings.aliases
    judges = [(field, model, aliases.get(model, "")) for field, model in called_models(spec.validators)]
    rates = gateway.opener.prices.rates(spec.model)
    reserve = estimate(spec.request.messages, spec.request.max_tokens, settings.output_estimate_tokens, rates)
    ticket = await auth.admit(principal, spec.model, aliases.get(spec.model, ""), also=judges, reserve=reserve)
    cache = cache_choice(spec.cache, request.headers.get("cache-control"), principal)
    if principal.key is not None:
        key_tools = principal.key.mcp_tools  # the key's MCP policy; the request's may only narrow it
        spec = replace(spec, owner=principal.key.id, policy_validators=principal.key.validators,
                       slot=ticket.slot if ticket is not None else None, cache=cache,
                       mcp_filters=spec.mcp_filters + ((key_tools,) if key_tools is not None else ()))
    else:
        spec = replace(spec, cache=cache)
    record.model = spec.model
    try:
        handle = gateway.start(spec, request_id=record.request_id or None,
                               observers=(caller.accountant.settle(ticket),) if ticket is not None else ())
        record.trace_id = handle.trace_id
        record.run = await opened(request, handle)
    except BaseException:
        await auth.abandon(ticket)
        raise
    headers = dict(ticket.headers) if ticket is not None else {}
    if handle.cache is not None:
        headers["X-Foundry-Cache"] = handle.cache
    return handle, headers


def cache_choice(choice: CacheChoice, cache_control: str | None, principal: Principal) -> CacheChoice:
    """The caller's say on the response cache (RFC 9111 request directives): `no-cache` skips the
    lookup, `no-store` skips storing; the key is named for the rules' `deny_keys`."""
    directives = {d.strip().split("=", 1)[0].lower() for d in (cache_control or "").split(",")}
    return CacheChoice(lookup=choice.lookup and "no-cache" not in directives,
                       store=choice.store and "no-store" not in directives,
                       key_name=principal.key.name if principal.key is not None else None)
