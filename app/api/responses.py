"""Response classes: JSON rendered by orjson (FastAPI deprecated its own ORJSONResponse)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse

__all__ = ["JSON"]


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
