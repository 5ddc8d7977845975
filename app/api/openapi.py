"""The OpenAPI document, with the SSE event payloads as named component schemas."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

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
        doc["x-sse-events"] = {
            event: {"$ref": f"#/components/schemas/{model.__name__}"} for event, model in EVENT_SCHEMAS.items()
        }
        app.openapi_schema = doc
        return doc

    setattr(app, "openapi", openapi)  # noqa: B010 (FastAPI's documented override; mypy: method-assign)
