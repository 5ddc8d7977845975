"""JSON request bodies parsed by orjson, for the routes that take one (FastAPI's documented
extension point: a custom `Request` class through the route's `route_class`).

FastAPI reads a JSON body through Starlette's `Request.json()`, which is the standard library's
`json.loads`. A coding agent's request carries its whole conversation, often tens or hundreds of
kilobytes, and is parsed on every turn. Measured with `timeit` on a 64 KB Messages body (120 turns, 20
tools): 477 us with `json.loads`, 154 with `orjson.loads`; a small body 11 against 1 us (a slow
2-core machine; docs/performance.md).

A body orjson refuses is parsed by `json.loads`, as before: the standard library accepts what
orjson does not (lone surrogate escapes, NaN and Infinity, integers past 64 bits, UTF-16 and
UTF-32, a byte-order mark), and a body neither accepts fails with the standard library's error,
which FastAPI turns into its usual answer. Whatever orjson accepts, the standard library reads the
same.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

__all__ = ["JSONBodyRequest", "JSONBodyRoute"]

_UNREAD = object()


class JSONBodyRequest(Request):
    """A request whose `json()` is orjson's, with the standard library's as the fallback."""

    _parsed: Any = _UNREAD

    async def json(self) -> Any:
        if self._parsed is _UNREAD:
            try:
                self._parsed = orjson.loads(await self.body())
            except orjson.JSONDecodeError:
                self._parsed = await super().json()
        return self._parsed


class JSONBodyRoute(APIRoute):
    """An APIRoute whose handler reads the request as a `JSONBodyRequest` (its `route_class`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def json_body_handler(request: Request) -> Response:
            return await handler(JSONBodyRequest(request.scope, request.receive))

        return json_body_handler
