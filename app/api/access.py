"""Access control at the HTTP edge: the `Principal` dependency every /v1 route takes, the admin
dependency, and `open_run`, the one seam through which a route starts a run for a caller
(model check, limits, ownership, the key's validators, the x-ratelimit-* headers).

A facade route (OpenAI/Anthropic shapes) attaches `dependencies=[Authenticated]` to its router
and starts its runs with `open_run`; nothing else is needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.security import APIKeyHeader, HTTPBearer
from starlette.routing import BaseRoute

from app.accounting import KeyAccountant
from app.api.middleware import RequestLog
from app.api.readers import opened
from app.auth import Auth, Principal
from app.auth.service import AccessDenied
from app.pipeline import Gateway, RunHandle, RunSpec

__all__ = ["AdminDep", "Authenticated", "PrincipalDep", "document_security", "not_found_unless_owner", "open_run",
           "principal_of"]

# The security schemes of the OpenAPI document. They are not `Security()` dependencies of
# `principal_of`: FastAPI would run each as a dependency of its own on every request (~25-35 us of
# CPU each here, deps.py), only to parse headers `principal_of` parses anyway (a malformed one is a
# 401 with a reason rather than "missing"). `document_security` writes them into the document for
# every route that authenticates, as FastAPI would have.
_SCHEMES = {
    "HTTPBearer": HTTPBearer(auto_error=False, description="Authorization: Bearer fgw-..."),
    "APIKeyHeader": APIKeyHeader(name="x-api-key", auto_error=False, description="x-api-key: fgw-... (Anthropic clients)"),
}


async def principal_of(request: Request) -> Principal:
    auth: Auth = request.app.state.auth
    principal = await auth.authenticate(request.headers.get("authorization"), request.headers.get("x-api-key"))
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


def document_security(doc: dict[str, Any], routes: Iterable[BaseRoute]) -> None:
    """Declare the security schemes in an OpenAPI document, and on each operation of a route
    that depends on `principal_of` (directly or through the admin dependency)."""
    requirement: list[dict[str, list[str]]] = [{name: []} for name in _SCHEMES]
    used = False
    for context in iter_route_contexts(list(routes)):  # as get_openapi walks them (included routers too)
        route: Any = context
        if not (isinstance(context.original_route, APIRoute) and route.include_in_schema
                and _authenticates(route.dependant)):
            continue
        for method in route.methods or ():
            operation = doc.get("paths", {}).get(route.path_format, {}).get(method.lower())
            if operation is not None:
                operation["security"] = requirement
                used = True
    if used:
        doc.setdefault("components", {})["securitySchemes"] = {
            name: jsonable_encoder(scheme.model, by_alias=True, exclude_none=True) for name, scheme in _SCHEMES.items()}


def _authenticates(dependant: Dependant) -> bool:
    return any(d.call is principal_of or _authenticates(d) for d in dependant.dependencies)


def not_found_unless_owner(principal: Principal, owner: str | None, error: Exception) -> None:
    """Another key's stream, transcript or run is unknown to the caller: 404, never 403 (ids are
    not confirmed to outsiders). The admin key and open mode see everything."""
    if not principal.may_see(owner):
        raise error


async def open_run(request: Request, gateway: Gateway, spec: RunSpec, principal: Principal,
                   record: RequestLog) -> tuple[RunHandle, dict[str, str]]:
    """Admit the caller (403 model, 429 limits or budget), start the run as theirs and wait until it
    opened (app/api/readers.py), and give the x-ratelimit-* headers for the response. A run that
    fails to open gives its slot back; one that opened settles the key's accounts when it ends."""
    auth: Auth = request.app.state.auth
    ticket = await auth.admit(principal, spec.model, gateway.settings.aliases.get(spec.model, ""))
    if principal.key is not None:
        spec = replace(spec, owner=principal.key.id, policy_validators=principal.key.validators)
    record.model = spec.model
    accountant: KeyAccountant = request.app.state.accountant
    try:
        handle = gateway.start(spec, request_id=record.request_id or None,
                               observers=(accountant.settle(ticket),) if ticket is not None else ())
        record.run = await opened(request, handle)
    except BaseException:
        await auth.abandon(ticket)
        raise
    return handle, ticket.headers if ticket is not None else {}
