"""Access control at the HTTP edge: the `Principal` dependency every /v1 route takes, the admin
dependency, and `open_run`, the one seam through which a route starts a run for a caller
(model check, limits, ownership, the key's validators, the x-ratelimit-* headers).

A facade route (OpenAI/Anthropic shapes) attaches `dependencies=[Authenticated]` to its router
and starts its runs with `open_run`; nothing else is needed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.accounting import KeyAccountant, estimate
from app.api.media import check_media
from app.api.middleware import RequestLog
from app.api.readers import opened
from app.auth import Auth, Principal
from app.auth.service import AccessDenied
from app.cache.config import CacheChoice
from app.pipeline import Gateway, RunHandle, RunSpec
from app.validation import called_models

__all__ = ["AdminDep", "Authenticated", "PrincipalDep", "admit_request", "not_found_unless_owner", "open_run",
           "principal_of"]

# The security schemes: FastAPI puts them in the OpenAPI document for every route that depends on
# `principal_of`. Neither refuses a request itself (auto_error=False): the gateway answers a
# missing, malformed or unknown key with its own 401 and reason (app/auth/service.py).
_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer fgw-...")
_api_key = APIKeyHeader(name="x-api-key", auto_error=False, description="x-api-key: fgw-... (Anthropic clients)")


async def principal_of(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    api_key: Annotated[str | None, Security(_api_key)],
) -> Principal:
    """The caller, from `Authorization: Bearer <key>` or `x-api-key: <key>`; 401 with a reason.

    The raw Authorization header is checked rather than HTTPBearer's parse (`bearer`), which
    reads a malformed header as none at all: the caller is told which of the two it sent."""
    auth: Auth = request.app.state.auth
    principal = await auth.authenticate(request.headers.get("authorization"), api_key)
    record = request.scope.get("state", {}).get("record")
    if isinstance(record, RequestLog):  # the log line names the key by id and name, never the key
        record.key_id = principal.owner or principal.kind
        record.key_name = principal.key.name if principal.key is not None else None
    return principal


async def _admin(request: Request, principal: Annotated[Principal, Depends(principal_of)]) -> Principal:
    if principal.kind == "admin":
        return principal
    auth: Auth = request.app.state.auth
    if not auth.has_admin:
        raise AccessDenied("key administration needs FOUNDRY_ADMIN_KEY on this gateway", code="admin_disabled",
                           status=403)
    raise AccessDenied("this call needs the admin key", code="admin_only", status=403)


PrincipalDep = Annotated[Principal, Depends(principal_of)]
AdminDep = Annotated[Principal, Depends(_admin)]
Authenticated = Depends(principal_of)
"""For `APIRouter(dependencies=[Authenticated])`."""


def not_found_unless_owner(principal: Principal, owner: str | None, error: Exception) -> None:
    """Another key's stream, transcript or run is unknown to the caller: 404, never 403 (ids are
    not confirmed to outsiders). The admin key and open mode see everything."""
    if not principal.may_see(owner):
        raise error


async def admit_request(request: Request, gateway: Gateway, principal: Principal, model: str) -> dict[str, str]:
    """Admit a request that starts no run (Anthropic's count_tokens) through the same check as a
    run, against the key's models and requests per minute only (403, 429), and give the
    x-ratelimit-* headers. It produces no tokens, holds no run and costs nothing, so the key's
    tokens per minute, runs at once and budget are not asked (and nothing is settled after)."""
    auth: Auth = request.app.state.auth
    key = principal.key
    if key is not None:
        principal = replace(principal, key=replace(key, tpm=None, max_concurrent=None, budget_usd=None))
    ticket = await auth.admit(principal, model, gateway.settings.aliases.get(model, ""))
    return ticket.headers if ticket is not None else {}


async def open_run(request: Request, gateway: Gateway, spec: RunSpec, principal: Principal,
                   record: RequestLog) -> tuple[RunHandle, dict[str, str]]:
    """Bound the images and documents (413), admit the caller (403 model, 429 limits or budget),
    start the run as theirs and wait until it opened (app/api/readers.py), and give the
    x-ratelimit-* headers for the response. A run that fails to open gives its slot back; one that
    opened settles the key's accounts when it ends."""
    check_media(spec.request.messages, gateway.settings, request)
    auth: Auth = request.app.state.auth
    aliases = gateway.settings.aliases
    judges = [(field, model, aliases.get(model, "")) for field, model in called_models(spec.validators)]
    settings = gateway.settings
    rates = gateway.opener.prices.rates(spec.model)
    reserve = estimate(spec.request.messages, spec.request.max_tokens, settings.output_estimate_tokens, rates)
    ticket = await auth.admit(principal, spec.model, aliases.get(spec.model, ""), also=judges, reserve=reserve)
    if principal.key is not None:
        key_tools = principal.key.mcp_tools  # the key's MCP policy; the request's may only narrow it
        spec = replace(spec, owner=principal.key.id, policy_validators=principal.key.validators,
                       slot=ticket.slot if ticket is not None else None,
                       mcp_filters=spec.mcp_filters + ((key_tools,) if key_tools is not None else ()))
    spec = replace(spec, cache=cache_choice(spec.cache, request.headers.get("cache-control"), principal))
    record.model = spec.model
    accountant: KeyAccountant = request.app.state.accountant
    try:
        handle = gateway.start(spec, request_id=record.request_id or None,
                               observers=(accountant.settle(ticket),) if ticket is not None else ())
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
