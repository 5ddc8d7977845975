"""The routes that open runs, served without FastAPI's per-request dependency machinery.

FastAPI resolves a route's dependencies anew on every request (~25-35 us of CPU for each here)
and wraps the endpoint in its general handler. On `POST /v1/stream` that machinery was ~14% of
the gateway's CPU per request and 0.4-0.55 ms of its time to first token (`bench/compare.py`
against a bare route, same run). `RunRoute` serves an endpoint of one fixed shape,
`(body: <model>, request: Request, principal: PrincipalDep)` behind the router's `Authenticated`
and the route's `require_json`, by doing FastAPI's steps itself, in FastAPI's order:
1. read the body and parse it as FastAPI does (JSON for a JSON content type; the same errors:
   `json_invalid`, or 400 "There was an error parsing the body");
2. the dependencies, in their declared order: the principal, then `require_json`;
3. validate the body with the route's own body field (FastAPI's error locations), and call the
   endpoint.
The declaration stays FastAPI's: the signature, the OpenAPI document, the exception handlers. A
route whose declared dependencies or parameters differ from that shape fails at startup rather
than being served differently from what it declares.
"""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any

import fastapi.routing
import orjson
from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from app.api.access import principal_of
from app.api.errors import require_json

__all__ = ["RunRoute"]

# The route as included: FastAPI sets it while it builds an included route's handler (its own
# `get_route_handler` reads it the same way).
_included: Any = getattr(fastapi.routing, "_effective_route_context_var", None)

_MISSING = [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]


class RunRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        if _included is None:  # a FastAPI without it: its own handler serves (the same answers, slower)
            return super().get_route_handler()
        route: Any = self
        context = _included.get()
        if context is not None and context.original_route is self:
            route = context
        if not _served_shape(route):
            raise TypeError(f"RunRoute {self.path}: the endpoint must take (body, request, principal) behind "
                            f"Authenticated and require_json, and nothing else")
        endpoint, body_field = self.endpoint, route.body_field
        strict = route.strict_content_type
        strict = getattr(strict, "value", strict)  # FastAPI's DefaultPlaceholder

        async def handler(request: Request) -> Response:
            direct = getattr(request.app.state, "direct_routes", None)
            if direct is not None:  # FastAPI routed here: later requests to the path come straight (direct_routes.py)
                direct.learn(request.scope, handler)
            body = await _json_body(request, strict=bool(strict))
            principal = await principal_of(request)
            await require_json(request)
            if body is _ABSENT:
                value, errors = None, _MISSING
            else:
                value, errors = body_field.validate(body, {}, loc=("body",))
            if errors:
                raise RequestValidationError(errors, body=None if body is _ABSENT else body)
            return await endpoint(body=value, request=request, principal=principal)

        return handler


_ABSENT: Any = object()


async def _json_body(request: Request, *, strict: bool) -> Any:
    """The body as FastAPI reads it for a JSON body field: parsed for a JSON content type (or,
    when not strict, none), else the bytes (which then fail validation); `_ABSENT` when empty."""
    try:
        raw = await request.body()
        if not raw:
            return _ABSENT
        declared = request.headers.get("content-type")
        if declared == "application/json":  # what nearly every client sends: no header parsing
            return _loads(raw)
        if not declared:
            return _loads(raw) if not strict else raw
        message = email.message.Message()
        message["content-type"] = declared
        if message.get_content_maintype() == "application":
            subtype = message.get_content_subtype()
            if subtype == "json" or subtype.endswith("+json"):
                return _loads(raw)
        return raw
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from exc
    except HTTPException:
        raise
    except Exception as exc:  # not UTF-8, nested too deep: as FastAPI answers it
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc


def _loads(raw: bytes) -> Any:
    """`json.loads(raw)`, as FastAPI parses, by orjson where it can: orjson takes a strict subset
    of what `json.loads` takes (UTF-8 only, no NaN, integers within 64 bits, no lone surrogates,
    nesting under 1024) and builds the same values from it; anything it refuses goes to
    `json.loads`, whose answer (a value, or the error FastAPI reports) is then the one given.
    ~4x faster on a typical request body (a few messages)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _served_shape(route: Any) -> bool:
    dependant = route.dependant
    calls = [d.call for d in dependant.dependencies]
    return (
        route.body_field is not None
        and [p.name for p in dependant.body_params] == ["body"]
        and not (dependant.path_params or dependant.query_params or dependant.header_params
                 or dependant.cookie_params)
        and dependant.request_param_name == "request"
        and calls == [principal_of, require_json, principal_of]
        and [d.name for d in dependant.dependencies] == [None, None, "principal"]
    )
