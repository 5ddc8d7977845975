"""The gateway's edge work (request id, body limit, the request log line, metrics) is one pure-ASGI
middleware, and no second body limiter wraps every request's receive and send."""

from __future__ import annotations

from app.api.middleware import RequestContextMiddleware
from app.main import create_app
from app.settings import Settings


def test_the_edge_is_one_pure_asgi_middleware() -> None:
    app = create_app(Settings(records=False))
    assert [m.cls for m in app.user_middleware] == [RequestContextMiddleware]
    assert getattr(app, "max_body_size", None) is None  # the limit is the gateway's (JSON 413), not Starlette's as well
