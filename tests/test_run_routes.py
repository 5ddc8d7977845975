"""POST /v1/stream and /v1/generate, plain FastAPI routes: every way a request can be wrong
gets its status and the gateway's JSON error naming the field, in the order the checks run
(body parsed, then the key, then the content type, then the body's fields)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from app.main import create_app
from app.settings import Settings
from tests.auth_support import ADMIN, bearer
from tests.support import parse_sse

GOOD = b'{"model": "mock/echo", "messages": [{"role": "user", "content": "say it back"}]}'
JSON_TYPE = {"content-type": "application/json"}
KEY = bearer(ADMIN)
NOT_JSON = {"code": "invalid_json", "message": "request body is not valid JSON: Expecting value", "retryable": False,
            "field": "body"}
UNPARSABLE = {"code": "invalid_json", "retryable": False, "field": "body",
              "message": "request body is not valid JSON (not UTF-8, or nested too deep)"}
NO_KEY = {"code": "missing_api_key", "retryable": False,
          "message": "an API key is required: Authorization: Bearer <key> or x-api-key: <key>"}
NOT_AN_OBJECT = "Input should be a valid dictionary or object to extract fields from"

PATHS = ["/v1/stream", "/v1/generate"]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(admin_key=ADMIN, records=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        yield c


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("content_type", ["application/json", "application/vnd.api+json",
                                          "application/json; charset=utf-8"])
async def test_a_good_request_runs(client: httpx.AsyncClient, path: str, content_type: str) -> None:
    r = await client.post(path, content=GOOD, headers={"content-type": content_type, **KEY})
    assert r.status_code == 200
    if path == "/v1/stream":
        assert [kind for _, kind, _ in parse_sse(r.content)][-1] == "final"
    else:
        assert r.json()["status"] == "ok" and r.json()["message"]["content"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("headers", "body", "status", "error"), [
    pytest.param({**JSON_TYPE, **KEY}, b'{"model": "mock/echo", "messages": [}', 400, NOT_JSON, id="bad-json"),
    pytest.param(JSON_TYPE, b'{"model": ', 400, NOT_JSON, id="bad-json-before-the-key"),
    pytest.param({**JSON_TYPE, **KEY}, b"\xff\xfe{}", 400, NOT_JSON, id="not-utf8"),
    pytest.param({**JSON_TYPE, **KEY}, b"[" * 100_000 + b"]" * 100_000, 400, UNPARSABLE, id="nested-too-deep"),
    pytest.param(JSON_TYPE, GOOD, 401, NO_KEY, id="no-key"),
    pytest.param({"content-type": "text/plain"}, GOOD, 401, NO_KEY, id="no-key-before-content-type"),
    pytest.param({**JSON_TYPE, **bearer("fgw-not-a-key")}, GOOD, 401,
                 {"code": "invalid_api_key", "retryable": False,
                  "message": "the API key is malformed (gateway keys look like fgw-...)"}, id="malformed-key"),
    pytest.param({**JSON_TYPE, "authorization": "Basic dXNlcjpwYXNz"}, GOOD, 401,
                 {"code": "invalid_authorization", "retryable": False,
                  "message": "Authorization must be `Bearer <key>`"}, id="not-bearer"),
    pytest.param({**JSON_TYPE, "x-api-key": "fgw-" + "a" * 43}, GOOD, 401,
                 {"code": "invalid_api_key", "retryable": False, "message": "unknown or revoked API key"},
                 id="unknown-x-api-key"),
    pytest.param({"content-type": "text/plain", **KEY}, GOOD, 415,
                 {"code": "unsupported_media_type", "retryable": False, "field": "content-type",
                  "message": "the request body must be application/json, not 'text/plain'"}, id="wrong-content-type"),
    pytest.param({**JSON_TYPE, **KEY}, b'{"model": "nowhere/m", "messages": [{"role": "user", "content": "x"}]}',
                 404, {"code": "model_not_found", "message": "unknown provider 'nowhere'; served: mock",
                       "retryable": False, "field": "model"}, id="unknown-model"),
    pytest.param({**JSON_TYPE, **KEY}, b'{"model": "mock/echo", "messages": [{"role": "user", "content": "\\ud800"}]}',
                 422, {"code": "invalid_unicode", "retryable": False, "field": "messages.0.content",
                       "message": "messages.0.content: not valid Unicode (a lone surrogate at character 0)"},
                 id="lone-surrogate"),
])
async def test_a_bad_request_is_refused_naming_why(client: httpx.AsyncClient, path: str, headers: dict[str, str],
                                                   body: bytes, status: int, error: dict[str, Any]) -> None:
    r = await client.post(path, content=body, headers=headers)
    assert r.status_code == status
    assert _error(r) == error
    assert r.headers.get("www-authenticate") == ("Bearer" if status == 401 else None)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("headers", "body", "field", "message"), [
    pytest.param(KEY, GOOD, "body", NOT_AN_OBJECT, id="no-content-type"),  # the body is then left unparsed
    pytest.param({**JSON_TYPE, **KEY}, b"", "body", "Field required", id="missing-body"),
    pytest.param({**JSON_TYPE, **KEY}, b"[1, 2]", "body", NOT_AN_OBJECT, id="not-an-object"),
    pytest.param({**JSON_TYPE, **KEY}, b'{"messages": []}', "model", "Field required", id="fields-missing"),
    pytest.param({**JSON_TYPE, **KEY}, b'{"model": "mock/echo", "messages": [{"role": "user", "content": "x"}], '
                                       b'"temprature": 1}', "temprature", "Extra inputs are not permitted",
                 id="unknown-field"),
])
async def test_an_invalid_body_is_422_naming_the_field(client: httpx.AsyncClient, path: str, headers: dict[str, str],
                                                       body: bytes, field: str, message: str) -> None:
    r = await client.post(path, content=body, headers=headers)
    assert r.status_code == 422
    error = _error(r)
    assert (error["code"], error["field"], error["message"]) == ("invalid_request", field, f"{field}: {message}")
    assert error["errors"][0]["field"] == field


def test_the_run_routes_are_plain_api_routes() -> None:
    """APIRoutes whose one addition is FastAPI's documented custom-`Request` hook (their bodies
    parsed by orjson: app/api/json_body.py), nothing of FastAPI's internals."""
    from app.api.json_body import JSONBodyRoute
    from app.api.routes import generate, stream

    routes = {(r.path, m): r for router in (stream.router, generate.router) for r in router.routes
              if isinstance(r, APIRoute) for m in r.methods}
    for key in (("/v1/stream", "POST"), ("/v1/generate", "POST")):
        assert type(routes[key]) is JSONBodyRoute
    assert [name for name in vars(JSONBodyRoute) if not name.startswith("__")] == ["get_route_handler"]
    app: FastAPI = create_app(Settings(records=False))
    assert not hasattr(app.state, "direct_routes")


def test_the_caller_is_authenticated_in_one_dependency_that_solves_none_of_its_own() -> None:
    """FastAPI solves every sub-dependency with a pass of its own (about 45 us a request for the two
    security schemes on the 2-core machine): `principal_of` reads both headers itself, and the
    schemes stay in the OpenAPI document (tests/test_openapi.py holds it byte for byte)."""
    from app.api.access import principal_of
    from app.api.routes import stream

    route = next(r for r in stream.router.routes if isinstance(r, APIRoute) and r.path == "/v1/stream/{stream_id}")
    found = [d for d in _walk(route.dependant) if d.call is principal_of]
    assert found and all(d.dependencies == [] for d in found), [d.call for f in found for d in _walk(f)]
    doc = create_app(Settings(records=False)).openapi()
    assert doc["paths"]["/v1/stream/{stream_id}"]["get"]["security"] == [{"HTTPBearer": []}, {"APIKeyHeader": []}]
    assert set(doc["components"]["securitySchemes"]) == {"HTTPBearer", "APIKeyHeader"}
    assert "security" not in doc["paths"]["/healthz"]["get"]


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/stream"), ("POST", "/v1/generate"),
                                             ("POST", "/v1/chat/completions"), ("POST", "/v1/messages"),
                                             ("POST", "/v1/messages/count_tokens"), ("POST", "/v1/responses")])
def test_a_route_that_opens_a_run_solves_its_caller_as_one_dependency(method: str, path: str) -> None:
    """The caller and its key were two levels of dependencies (`json_caller_of` on `principal_of`):
    0.08M of a short request's 3.28M instructions (`python bench/instructions.py`, 2.5%) went on
    FastAPI solving the second. The caller's dependency authenticates itself; the document still
    lists both schemes on the route (tests/test_openapi.py holds it byte for byte)."""
    app = create_app(Settings(records=False))
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)  # FastAPI 0.16x: routers stay whole
    routes = contexts(app.routes) if contexts is not None else app.routes
    route = next(getattr(r, "route", r) for r in routes
                 if isinstance(getattr(r, "route", r), APIRoute) and r.path_format == path and method in r.methods)
    solved = [d.call for d in _walk(route.dependant)[1:]]
    assert len(solved) == 1, solved
    assert app.openapi()["paths"][path][method.lower()]["security"] == [{"HTTPBearer": []}, {"APIKeyHeader": []}]


def _walk(dependant: Any) -> list[Any]:
    return [dependant] + [d for sub in dependant.dependencies for d in _walk(sub)]


@pytest.mark.parametrize("headers", [{**KEY, "x-api-key": ""}, {"x-api-key": ADMIN}])
async def test_a_key_in_either_header_authenticates_and_an_empty_one_is_none(client: httpx.AsyncClient,
                                                                            headers: dict[str, str]) -> None:
    r = await client.post("/v1/generate", content=GOOD, headers={**JSON_TYPE, **headers})
    assert r.status_code == 200, r.text
