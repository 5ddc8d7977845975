"""The run routes served straight from the request middleware, once FastAPI has routed them once.

Between the gateway's own middleware and a route's handler, FastAPI runs its exception
middleware, an exit-stack middleware, its router (included routers tried one after another) and
the route's request wrapper with two more exit stacks. For `POST /v1/stream` and `/v1/generate`
that was ~40 us of each request's time to first token and ~65 us of its CPU (`bench/compare.py`
against the commit before, same run). Their handlers (`RunRoute`, app/api/run_route.py) need
none of it: one fixed shape, no dependency with `yield`, no path parameters.

So the first request FastAPI routes to such a handler teaches `DirectRoutes` its path, its
handler and what routing put in the scope (the route, which the request log and metrics name,
and the exception handlers). Later requests to that path are served by the same handler under
Starlette's own exception wrapping (`wrap_app_handling_exceptions`, as FastAPI's request wrapper
uses), so an error answers exactly as through FastAPI; anything no handler takes goes on up to
the server-error middleware as before. Every other request goes through FastAPI as always.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette._exception_handler import wrap_app_handling_exceptions
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["DirectRoutes"]

Handler = Callable[[Request], Awaitable[Response]]

_ROUTED = ("route", "endpoint", "path_params", "router", "fastapi", "starlette.exception_handlers")
"""What FastAPI's routing adds to a request's scope before the handler runs."""


class DirectRoutes:
    """Paths whose POST FastAPI routed to a `RunRoute` handler, with that handler."""

    __slots__ = ("_routes",)

    def __init__(self) -> None:
        self._routes: dict[str, tuple[Handler, dict[str, Any]]] = {}

    def learn(self, scope: Scope, handler: Handler) -> None:
        """A handler's report that FastAPI routed this request to it."""
        if scope["method"] == "POST" and scope["path"] not in self._routes \
                and "starlette.exception_handlers" in scope:
            self._routes[scope["path"]] = (handler, {key: scope[key] for key in _ROUTED if key in scope})

    def __contains__(self, path: str) -> bool:
        return path in self._routes

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Serve a POST to a learned path (True), or do nothing (False)."""
        learned = self._routes.get(scope["path"])
        if learned is None:
            return False
        handler, routed = learned
        for key, value in routed.items():  # a dict of routing's (path params, FastAPI's own) is each request's
            scope[key] = value.copy() if type(value) is dict else value
        request = Request(scope, receive, send)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            response = await handler(request)
            await response(scope, receive, send)

        await wrap_app_handling_exceptions(app, request)(scope, receive, send)
        return True
