"""Every failure known before the first event becomes `{"error": {code, message, ...}}`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.middleware import note_refusal
from app.api.responses import JSON
from app.core.errors import GatewayError, RequestError
from app.core.parts import CONTENT_TAGS, PART_KINDS
from app.observability import get_logger

__all__ = ["error_response", "install_error_handlers", "require_json"]

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
_BODY_UNPARSABLE = "There was an error parsing the body"  # FastAPI: not UTF-8, or nested too deep
_log = get_logger("foundry.http")


async def require_json(request: Request) -> None:
    """A request body must be JSON: 415 for a declared content type that is not."""
    declared = request.headers.get("content-type")
    if declared is None:
        return  # FastAPI (strict content type) then leaves the body unparsed: 422, the body is not an object
    media = declared.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise RequestError(f"the request body must be application/json, not {media[:100]!r}",
                           code="unsupported_media_type", status=415, field="content-type")


def error_response(status: int, error: Mapping[str, Any], headers: dict[str, str] | None = None) -> JSON:
    return JSON({"error": error}, status_code=status, headers=headers)


def gateway_error_response(exc: GatewayError) -> JSON:
    headers = dict(getattr(exc, "headers", None) or {})  # AccessDenied: WWW-Authenticate, x-ratelimit-*
    retry_after = exc.retry_after
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return error_response(exc.status, exc.to_dict(), headers)


def _field_path(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    if "content" in parts:  # `content.parts.1.image.data` -> `content.1.data` (app/core/messages.py)
        at = parts.index("content") + 1
        if parts[at:at + 1] == [CONTENT_TAGS[0]]:
            del parts[at]
        elif parts[at:at + 1] == [CONTENT_TAGS[1]]:
            del parts[at]
            if len(parts) > at + 1 and parts[at + 1] in PART_KINDS:
                del parts[at + 1]
    return ".".join(parts) or "body"


def _validation_response(exc: RequestValidationError) -> JSON:
    errors = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            return error_response(400, {
                "code": "invalid_json",
                "message": f"request body is not valid JSON: {err.get('ctx', {}).get('error', err.get('msg'))}",
                "retryable": False,
                "field": "body",
            })
        message = str(err.get("msg", "invalid value"))
        message = message.removeprefix("Value error, ")
        errors.append({"field": _field_path(tuple(err.get("loc", ()))), "message": message, "type": err.get("type")})
    first = errors[0] if errors else {"field": "body", "message": "invalid request"}
    return error_response(422, {
        "code": "invalid_request",
        "message": f"{first['field']}: {first['message']}",
        "retryable": False,
        "field": first["field"],
        "errors": errors,
    })


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def _gateway(request: Request, exc: GatewayError) -> JSON:
        note_refusal(request.scope, exc.code, exc.field if isinstance(exc.field, str) else None, exc.message)
        return gateway_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSON:
        response = _validation_response(exc)
        error = orjson.loads(response.body)["error"]
        note_refusal(request.scope, error["code"], error.get("field"), error["message"])
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSON:
        if exc.status_code == 400 and exc.detail == _BODY_UNPARSABLE:
            return error_response(400, {"code": "invalid_json", "retryable": False, "field": "body",
                                        "message": "request body is not valid JSON (not UTF-8, or nested too deep)"})
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, {"code": code, "message": str(exc.detail), "retryable": False},
                              dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSON:
        # The safety net: JSON, never a plain-text 500; the type only (its text may quote content).
        _log.error("unhandled_error", exception=type(exc).__name__)
        return error_response(500, {"code": "internal_error", "message": "internal gateway error",
                                    "retryable": True})
