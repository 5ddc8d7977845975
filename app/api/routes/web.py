"""GET /: the playground page, and its static assets under /web/.

The files live in `app/web/` inside the package (package data), so a plain `pip install` serves
them; nothing is fetched from another origin. The page gets a strict Content-Security-Policy:
it only ever loads its own scripts and styles and talks to this gateway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles

__all__ = ["WEB_DIR", "install_playground"]

WEB_DIR = Path(__file__).resolve().parents[2] / "web"

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {
    "content-security-policy": _CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}

router = APIRouter(tags=["playground"])


class _Assets(StaticFiles):
    """The page's scripts and styles: revalidated on every load (ETag), so an upgraded gateway
    never runs a stale module next to a new one."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update({"cache-control": "no-cache", "x-content-type-options": "nosniff"})
        return response


@router.get("/", include_in_schema=False)
async def playground() -> Response:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)


def install_playground(app: FastAPI) -> None:
    """Serve the page at `/` and its assets at `/web/`."""
    app.include_router(router)
    app.mount("/web", _Assets(directory=WEB_DIR), name="web")
