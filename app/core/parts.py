"""Content parts: what a message carries besides (or instead of) one plain string.

A part is text (with an optional Anthropic cache breakpoint), an image or a document (PDF), the
media as base64 bytes with their media type or as an `https` URL. The gateway never fetches a URL:
it passes the URL to a provider that takes the URL form, and the provider converters refuse it
where a provider does not. Base64 is checked here (strict alphabet, and the bytes' magic number
must match the declared media type), so every entry point refuses the same things the same way.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CONTENT_TAGS",
    "PART_KINDS",
    "IMAGE_TYPES",
    "DOCUMENT_TYPES",
    "CacheControl",
    "ContentPart",
    "DocumentPart",
    "ImagePart",
    "MediaPart",
    "TextPart",
    "decoded_size",
    "join_text",
    "part_summary",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
DocumentType = Literal["application/pdf"]
IMAGE_TYPES: tuple[str, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")
DOCUMENT_TYPES: tuple[str, ...] = ("application/pdf",)

TEXT_SEPARATOR = "\n\n"
"""Where a wire takes one string (a Responses `instructions`, a Gemini function response), several
text parts are joined with a blank line, never glued."""


def _webp(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"


# The signatures the formats' own specifications open with (PNG 5.2, JFIF SOI, GIF89a/87a, RIFF
# WEBP, PDF 7.5.2): five fixed prefixes, no library needed.
_MAGIC = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda b: b.startswith((b"GIF87a", b"GIF89a")),
    "image/webp": _webp,
    "application/pdf": lambda b: b.startswith(b"%PDF-"),
}


def sniff(data: bytes) -> str | None:
    """The media type the bytes' magic number says, among the ones the gateway takes."""
    return next((kind for kind, test in _MAGIC.items() if test(data)), None)


def decode_base64(data: str) -> bytes:
    """Strict base64 (the standard alphabet, padded); ValueError on anything else."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("data is not valid base64 (standard alphabet, padded)") from None


def decoded_size(data: str) -> int:
    """Bytes that a valid base64 string decodes to, without decoding it."""
    return len(data) // 4 * 3 - data[-2:].count("=") if data else 0


class CacheControl(BaseModel):
    """An Anthropic prompt-cache breakpoint; other providers cache on their own (a no-op there)."""

    model_config = _FROZEN
    type: Literal["ephemeral"] = "ephemeral"
    ttl: Literal["5m", "1h"] | None = None


class TextPart(BaseModel):
    model_config = _FROZEN
    type: Literal["text"]
    text: str = Field(min_length=1)
    cache_control: CacheControl | None = None


class MediaPart(BaseModel):
    """Bytes (base64 `data` with its `media_type`) or an `https` `url`, exactly one of them."""

    model_config = _FROZEN
    data: str | None = Field(default=None, min_length=1, description="Base64 (standard alphabet, padded).")
    url: str | None = Field(default=None, min_length=9, max_length=8192, pattern=r"^https://\S+$",
                            description="An https URL the provider fetches; the gateway never does.")
    cache_control: CacheControl | None = None

    @model_validator(mode="after")
    def _check_source(self) -> MediaPart:
        media_type: str | None = getattr(self, "media_type", None)
        if (self.data is None) == (self.url is None):
            raise ValueError("give exactly one of data (base64 with media_type) or url (https)")
        if self.data is not None:
            if media_type is None:
                raise ValueError("media_type is required with data")
            found = sniff(decode_base64(self.data)[:16])
            if found != media_type:
                raise ValueError(f"media_type says {media_type} but the bytes are "
                                 f"{found or 'none of ' + ', '.join(_MAGIC)}")
        return self

    @property
    def size(self) -> int:
        return decoded_size(self.data) if self.data is not None else 0


class ImagePart(MediaPart):
    type: Literal["image"]
    media_type: ImageType | None = None
    detail: Literal["auto", "low", "high"] | None = Field(
        default=None, description="OpenAI's resolution hint; carried to OpenAI, a no-op elsewhere.")


class DocumentPart(MediaPart):
    type: Literal["document"]
    media_type: DocumentType | None = None
    title: str | None = Field(default=None, max_length=500)


ContentPart = Annotated[TextPart | ImagePart | DocumentPart, Field(discriminator="type")]
PART_KINDS = ("text", "image", "document")
CONTENT_TAGS = ("string", "parts")
"""The tags of a message content's union (a string, or parts), which validation errors carry in
their location after `content`, as they carry a part's kind after its index."""


def join_text(content: str | tuple[Any, ...]) -> str:
    """A message content's text: the string, or its text parts joined with a blank line."""
    if isinstance(content, str):
        return content
    return TEXT_SEPARATOR.join(p.text for p in content if isinstance(p, TextPart))


def part_summary(part: TextPart | ImagePart | DocumentPart, *, keep_bytes: bool = False) -> dict[str, Any]:
    """A part as a record keeps it: media as kind, media type, size and SHA-256 (the bytes only
    with `keep_bytes`), a URL as itself; text as it is."""
    if isinstance(part, TextPart):
        return part.model_dump(mode="json", exclude_none=True)
    out: dict[str, Any] = {"type": part.type}
    if part.media_type is not None:
        out["media_type"] = part.media_type
    if part.url is not None:
        out["url"] = part.url
    if part.data is not None:
        raw = base64.b64decode(part.data)
        out["size"] = len(raw)
        out["sha256"] = hashlib.sha256(raw).hexdigest()
        if keep_bytes:
            out["data"] = part.data
    return out
