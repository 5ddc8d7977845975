"""Response classes: JSON rendered by orjson (FastAPI deprecated its own ORJSONResponse)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from app.core import safejson
from app.core.events import FinalEvent

__all__ = ["JSON", "final_status_code"]

_ERROR_STATUS = {"internal_error": 500, "upstream_timeout": 504, "overloaded": 503, "shutdown": 503, "key_revoked": 401}
"""HTTP status of a run that ended in error, by error code; any other failure is the upstream's (502)."""


def final_status_code(final: FinalEvent) -> int:
    """The HTTP status of a JSON answer (POST /v1/generate): 200 for ok and blocked (the answer is
    the final payload), else the failure's: 500 the gateway's own, 503 shutting down, 401 its key
    revoked meanwhile, 504 a timeout, 502 otherwise."""
    if final.status in ("ok", "blocked"):
        return 200
    code = final.error["code"] if final.error is not None else "internal_error"
    return _ERROR_STATUS.get(code, 502)


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return safejson.dumps(content)
