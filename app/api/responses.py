"""Response classes: JSON rendered by orjson (FastAPI deprecated its own ORJSONResponse)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from app.core import safejson

__all__ = ["JSON"]


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return safejson.dumps(content)
