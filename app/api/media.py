"""Bounds on a request's images and documents, checked at the edge before a run opens.

A part over FOUNDRY_MEDIA_PART_MAX_BYTES, or the parts of one request together over
FOUNDRY_MEDIA_REQUEST_MAX_BYTES, is 413 naming the part. The body limit is raised by the media
allowance's base64 only (app/main.py): what the body holds besides its media parts is held here to
FOUNDRY_MAX_BODY_BYTES, so the allowance never makes room for text.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Request

from app.core.errors import RequestError
from app.core.messages import Message
from app.core.parts import TextPart
from app.settings import Settings

__all__ = ["base64_length", "check_media", "largest_body"]


def base64_length(size: int) -> int:
    """Characters of the base64 of `size` bytes (padded)."""
    return (size + 2) // 3 * 4


def largest_body(settings: Settings) -> int:
    """The most bytes a request body may have at the door (a proxy in front must allow as many):
    FOUNDRY_MAX_BODY_BYTES plus the base64 of FOUNDRY_MEDIA_REQUEST_MAX_BYTES."""
    return settings.max_body_bytes + base64_length(settings.media_request_max_bytes)


def _too_large(message: str, field: str) -> RequestError:
    return RequestError(message, status=413, code="payload_too_large", field=field)


def check_media(messages: Sequence[Message], settings: Settings, request: Request) -> None:
    """413 naming the first part over a bound, or the body when its non-media bytes pass the base limit."""
    total = chars = 0
    for i, message in enumerate(messages):
        for j, part in enumerate(message.content if not isinstance(message.content, str) else ()):
            if isinstance(part, TextPart) or part.data is None:
                continue
            where, size = f"messages.{i}.content.{j}", part.size
            if size > settings.media_part_max_bytes:
                raise _too_large(f"{where}: the {part.type} is {size} bytes, over the {settings.media_part_max_bytes} "
                                 "a part may have (FOUNDRY_MEDIA_PART_MAX_BYTES)", where)
            total, chars = total + size, chars + len(part.data)
            if total > settings.media_request_max_bytes:
                raise _too_large(f"{where}: the request's images and documents pass {settings.media_request_max_bytes}"
                                 " bytes with this part (FOUNDRY_MEDIA_REQUEST_MAX_BYTES)", where)
    body = request.scope.get("state", {}).get("body_bytes")
    if isinstance(body, int) and body - chars > settings.max_body_bytes:
        raise _too_large(f"body: the request body exceeds {settings.max_body_bytes} bytes besides its images and "
                         "documents (FOUNDRY_MAX_BODY_BYTES)", "body")
