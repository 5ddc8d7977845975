"""The OpenAPI document, with the SSE event payloads as named component schemas and the security
schemes of every route that authenticates its caller."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, routing
from fastapi.dependencies.models import Dependant
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from app.api.access import AUTHENTICATING, SECURITY_SCHEMES
from app.api.schemas import EVENT_SCHEMAS

__all__ = ["install_openapi"]


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        _, defs = TypeAdapter.json_schemas(
            [(event, "serialization", TypeAdapter(schema)) for event, schema in EVENT_SCHEMAS.items()],
            ref_template="#/components/schemas/{model}",
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in defs.get("$defs", {}).items():
            schemas.setdefault(name, schema)
        _add_security(app, doc)
        doc["x-sse-events"] = {
            event: {"$ref": f"#/components/schemas/{model.__name__}"} for event, model in EVENT_SCHEMAS.items()
        }
        app.openapi_schema = doc
        return doc

    setattr(app, "openapi", openapi)  # noqa: B010 (FastAPI's documented override; mypy: method-assign)


def _add_security(app: FastAPI, doc: dict[str, Any]) -> None:
    """The security schemes (`SECURITY_SCHEMES`) on every operation whose route depends on one of
    `AUTHENTICATING`, as FastAPI writes them for a `Security` dependency: one requirement a scheme."""
    schemes = {scheme.scheme_name: jsonable_encoder(scheme.model, by_alias=True, exclude_none=True)
               for scheme in SECURITY_SCHEMES}
    secured = False
    # FastAPI 0.16x keeps an included router as one entry of `app.routes` and lists its routes, with
    # the prefix and dependencies of each include, through `iter_route_contexts`; before, `app.routes`
    # held every route.
    contexts = getattr(routing, "iter_route_contexts", None)
    for route in contexts(app.routes) if contexts is not None else app.routes:
        dependant = getattr(route, "dependant", None)
        if not (isinstance(dependant, Dependant) and getattr(route, "include_in_schema", False)
                and _authenticates(dependant)):
            continue
        operations = doc.get("paths", {}).get(getattr(route, "path_format", None), {})
        for method in getattr(route, "methods", None) or ():
            operation = operations.get(method.lower())
            if operation is not None:
                operation.setdefault("security", []).extend({name: []} for name in schemes)
                secured = True
    if secured:
        doc.setdefault("components", {}).setdefault("securitySchemes", {}).update(schemes)


def _authenticates(dependant: Dependant) -> bool:
    return any(sub.call in AUTHENTICATING or _authenticates(sub) for sub in dependant.dependencies)
