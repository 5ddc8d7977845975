"""RunRoute (app/api/run_route.py) answers what FastAPI's own handler answers for the same route.

The same requests, good and bad, go to two gateways: one as built (POST /v1/stream and
/v1/generate served by RunRoute) and one whose RunRoute hands back FastAPI's own handler. Status,
error body and, for the good ones, the run's events must be the same. A route whose shape RunRoute
does not serve fails when the app is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.routing import APIRoute

from app.api.access import Authenticated, PrincipalDep
from app.api.errors import require_json
from app.api.run_route import RunRoute
from app.api.schemas import GenerateRequest
from app.main import create_app
from app.settings import Settings
from tests.auth_support import ADMIN, bearer
from tests.support import parse_sse

GOOD = b'{"model": "mock/echo", "messages": [{"role": "user", "content": "say it back"}]}'
JSON_TYPE = {"content-type": "application/json"}

# (headers, body): every way a body can be wrong, and the order of the checks (auth, content type, body)
CASES: list[tuple[dict[str, str], bytes]] = [
    ({**JSON_TYPE, **bearer(ADMIN)}, GOOD),
    ({"content-type": "application/vnd.api+json", **bearer(ADMIN)}, GOOD),
    ({"content-type": "application/json; charset=utf-8", **bearer(ADMIN)}, GOOD),
    ({**JSON_TYPE, **bearer(ADMIN)}, b'{"model": "mock/echo", "messages": [}'),  # not JSON
    ({**JSON_TYPE}, b'{"model": '),  # not JSON, and no key: the body is read first
    ({**JSON_TYPE}, GOOD),  # no key
    ({**JSON_TYPE, **bearer("fgw-not-a-key")}, GOOD),
    ({"content-type": "text/plain", **bearer(ADMIN)}, GOOD),  # 415
    ({"content-type": "text/plain"}, GOOD),  # no key and the wrong type: which comes first
    ({**bearer(ADMIN)}, GOOD),  # no content type
    ({**JSON_TYPE, **bearer(ADMIN)}, b""),  # empty
    ({**JSON_TYPE, **bearer(ADMIN)}, b"[1, 2]"),  # not an object
    ({**JSON_TYPE, **bearer(ADMIN)}, b'{"messages": []}'),  # fields missing
    ({**JSON_TYPE, **bearer(ADMIN)}, b'{"model": "mock/echo", "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ({**JSON_TYPE, **bearer(ADMIN)}, b"\xff\xfe{}"),  # not UTF-8
    ({**JSON_TYPE, **bearer(ADMIN)}, b"[" * 100_000 + b"]" * 100_000),  # nested past the parser
    ({**JSON_TYPE, **bearer(ADMIN)}, b'{"model": "nowhere/m", "messages": [{"role": "user", "content": "x"}]}'),
]


@contextlib.asynccontextmanager
async def gateways() -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """(as built, with FastAPI's own handler). FastAPI builds an included route's handler on the
    app's first request, so each app serves one request before the next is made; on the app as
    built, that first request routed by FastAPI also lets the later ones to the same path be served
    without its routing (app/api/direct_routes.py), so each path is asked once before the cases."""
    def client(app: FastAPI) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")

    warm = {"content": GOOD, "headers": {**JSON_TYPE, **bearer(ADMIN)}}
    built = create_app(Settings(admin_key=ADMIN, records=False))
    async with client(built) as lean:
        for path in ("/v1/generate", "/v1/stream"):
            await lean.post(path, **warm)
            assert path in built.state.direct_routes
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(RunRoute, "get_route_handler", APIRoute.get_route_handler)
            own = create_app(Settings(admin_key=ADMIN, records=False))
            async with client(own) as fastapi_own:
                await fastapi_own.post("/v1/generate", **warm)
                assert "/v1/generate" not in own.state.direct_routes  # FastAPI's own handler teaches nothing
                yield lean, fastapi_own


def _comparable(response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [(kind, {k: v for k, v in data.items() if k not in ("stream_id",)} if kind == "start" else
                 data.get("content") if kind == "token" else data.get("status"))
                for _, kind, data in parse_sse(response.content)]
    return response.json() if response.content else None


@pytest.mark.parametrize("path", ["/v1/stream", "/v1/generate"])
@pytest.mark.parametrize(("headers", "body"), CASES, ids=range(len(CASES)))
async def test_run_route_answers_as_fastapi_does(path: str, headers: dict[str, str], body: bytes) -> None:
    async with gateways() as (lean, fastapi_own):
        ours = await lean.post(path, content=body, headers=headers)
        theirs = await fastapi_own.post(path, content=body, headers=headers)
    assert ours.status_code == theirs.status_code
    ours_body, theirs_body = _comparable(ours), _comparable(theirs)
    if path == "/v1/generate" and ours.status_code == 200:  # ids and timings differ run to run
        ours_body = (ours_body["status"], ours_body["message"])
        theirs_body = (theirs_body["status"], theirs_body["message"])
    assert ours_body == theirs_body
    assert ours.headers.get("www-authenticate") == theirs.headers.get("www-authenticate")


async def test_the_comparison_is_between_two_handlers_and_reaches_every_answer() -> None:
    import fastapi.routing

    from app.api.direct_routes import DirectRoutes

    solved = {"calls": 0}
    solve = fastapi.routing.solve_dependencies
    served = {"direct": 0}
    serve = DirectRoutes.serve

    async def counting(*args: Any, **kwargs: Any) -> Any:
        solved["calls"] += 1
        return await solve(*args, **kwargs)

    async def direct(self: DirectRoutes, *args: Any) -> bool:
        took = await serve(self, *args)
        served["direct"] += took
        return took

    statuses = set()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fastapi.routing, "solve_dependencies", counting)
        patch.setattr(DirectRoutes, "serve", direct)
        async with gateways() as (lean, fastapi_own):
            solved["calls"] = 0
            await lean.post("/v1/generate", content=GOOD, headers={**JSON_TYPE, **bearer(ADMIN)})
            assert solved["calls"] == 0  # RunRoute: no dependency solving
            await fastapi_own.post("/v1/generate", content=GOOD, headers={**JSON_TYPE, **bearer(ADMIN)})
            assert solved["calls"] > 0  # FastAPI's own handler
            served["direct"] = 0
            for headers, body in CASES:
                statuses.add((await lean.post("/v1/generate", content=body, headers=headers)).status_code)
            assert served["direct"] == len(CASES)  # the cases were answered without FastAPI's routing
    assert statuses == {200, 400, 401, 404, 415, 422}


async def test_the_run_routes_really_are_run_routes() -> None:
    app = create_app(Settings(records=False))
    served = {(r.path, m) for r in _api_routes(app) if isinstance(r, RunRoute) for m in r.methods}
    assert served == {("/v1/stream", "POST"), ("/v1/generate", "POST")}


def _api_routes(app: FastAPI) -> list[APIRoute]:
    from fastapi.routing import iter_route_contexts

    return [c.original_route for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)]


def test_a_route_of_another_shape_is_refused_when_built() -> None:
    router = APIRouter(dependencies=[Authenticated])

    async def wider(body: GenerateRequest, request: Request, principal: PrincipalDep,
                    verbose: Annotated[bool, Query()] = False) -> None:  # a query parameter RunRoute would drop
        return None

    with pytest.raises(TypeError, match="RunRoute /v1/wider"):
        router.add_api_route("/v1/wider", wider, methods=["POST"], dependencies=[Depends(require_json)],
                             route_class_override=RunRoute)


async def test_the_direct_path_gives_each_request_its_own_routing_dicts() -> None:
    from starlette.responses import Response

    from app.api.direct_routes import DirectRoutes

    seen: list[dict[str, Any]] = []

    async def handler(request: Request) -> Response:
        seen.append(dict(request.scope["fastapi"]))
        request.scope["fastapi"]["touched"] = True  # what one request does to its scope stays its own
        request.scope["path_params"]["x"] = "1"
        return Response(b"ok")

    direct = DirectRoutes()
    route = object()
    direct.learn({"method": "POST", "path": "/v1/stream", "route": route, "path_params": {}, "fastapi": {"a": 1},
                  "starlette.exception_handlers": ({}, {})}, handler)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for _ in range(2):
        scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/stream", "headers": [],
                                 "query_string": b""}
        assert await direct.serve(scope, receive, send)
        assert scope["route"] is route
    assert seen == [{"a": 1}, {"a": 1}] and sent[0]["status"] == 200
    assert not await direct.serve({"type": "http", "method": "POST", "path": "/v1/other", "headers": []}, receive, send)
