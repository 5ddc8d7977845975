"""Each facade's spelling of a content part -> the canonical parts (app/core/parts.py).

OpenAI Chat: `text`, `refusal` (assistant), `image_url` (a data URL or an https URL), `file` (a
PDF as a data URL in `file_data`). Anthropic: `text`, `image` and `document` blocks with a `base64`
or `url` source, `cache_control` kept. Responses: `input_text`/`output_text`, `input_image`,
`input_file`. Malformed or mistyped media is 422 naming the part; a form the gateway cannot carry
(an uploaded `file_id`, audio) is 400 naming it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from app.api.compat.common import FacadeError, validation_reason
from app.core.parts import CacheControl, ContentPart, DocumentPart, ImagePart, TextPart

__all__ = ["anthropic_part", "openai_chat_part", "responses_content", "responses_part", "text_part"]

_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)(?:;[\w.+-]+=[\w.+-]+)*;base64,(?P<data>.*)$", re.DOTALL)


def _invalid(where: str, reason: str) -> FacadeError:
    return FacadeError(f"{where}: {reason}", param=where, status=422, code="invalid_content_part")


def _build(cls: type[Any], where: str, **fields: Any) -> Any:
    try:
        return cls(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise _invalid(where, validation_reason(exc)) from None


def text_part(where: str, text: Any, cache_control: Any = None) -> TextPart:
    if not isinstance(text, str):
        raise FacadeError(f"{where}.text: must be a string", param=f"{where}.text")
    return _build(TextPart, where, type="text", text=text, cache_control=cache_control)


def _from_url(kind: type[ImagePart] | type[DocumentPart], where: str, url: Any, **extra: Any) -> ContentPart:
    """A data URL (`data:<type>;base64,<bytes>`) or an https URL, as the OpenAI wires spell media."""
    if not isinstance(url, str):
        raise FacadeError(f"{where}: must be a string (a data URL or an https URL)", param=where)
    if url.startswith("data:"):
        match = _DATA_URL.match(url)
        if match is None:
            raise _invalid(where, "a data URL must read data:<media type>;base64,<data>")
        return _build(kind, where, media_type=match["type"], data=match["data"], **extra)
    if not url.startswith("https://"):
        raise _invalid(where, "must be a data URL or an https URL (the gateway never fetches a URL itself)")
    return _build(kind, where, url=url, **extra)


_KEYS = {"text": {"type", "text", "cache_control"}, "refusal": {"type", "refusal"}, "image_url": {"type", "image_url"},
         "file": {"type", "file"}, "input_text": {"type", "text"}, "output_text": {"type", "text", "annotations"},
         "input_image": {"type", "image_url", "detail", "file_id"},
         "input_file": {"type", "file_data", "file_url", "filename", "file_id"}}


def _only(where: str, value: dict[str, Any], allowed: set[str]) -> None:
    """Refuse what a part carries beyond `allowed`: accepted means carried."""
    extra = sorted(set(value) - allowed)
    if extra:
        raise FacadeError(f"{where}.{extra[0]}: not carried by the gateway", param=f"{where}.{extra[0]}")


def openai_chat_part(where: str, part: dict[str, Any], *, role: str) -> ContentPart:
    """One Chat Completions content part. A text part's `cache_control` (as OpenRouter and LiteLLM
    spell Anthropic's breakpoint here) is carried."""
    kind = part.get("type")
    if kind in _KEYS:
        _only(where, part, _KEYS[str(kind)])
    if kind == "text" or (role == "assistant" and kind == "refusal"):
        return text_part(where, part.get(kind), _cache_control(where, part.get("cache_control")))
    if kind == "image_url" and role == "user":
        image = part.get("image_url")
        if not isinstance(image, dict):
            raise FacadeError(f"{where}.image_url: must be an object with a url", param=f"{where}.image_url")
        _only(f"{where}.image_url", image, {"url", "detail"})
        return _from_url(ImagePart, f"{where}.image_url.url", image.get("url"), type="image",
                         detail=image.get("detail"))
    if kind == "file" and role == "user":
        file = part.get("file")
        if not isinstance(file, dict) or "file_data" not in file or file.get("file_id") is not None:
            raise FacadeError(f"{where}.file: only file_data (a PDF as a data URL) is carried; the gateway holds "
                              "no uploaded files (file_id)", param=f"{where}.file")
        _only(f"{where}.file", file, {"file_data", "filename", "file_id"})
        return _from_url(DocumentPart, f"{where}.file.file_data", file["file_data"], type="document",
                         title=file.get("filename"))
    if kind in ("image_url", "file", "input_audio"):
        raise FacadeError(f"{where}.type: {kind} content is not carried in a {role} message", param=f"{where}.type")
    raise FacadeError(f"{where}.type: unknown content part type {kind!r}", param=f"{where}.type")


_ANTHROPIC_MEDIA_KEYS = frozenset({"type", "source", "cache_control", "title"})


def anthropic_part(where: str, block: dict[str, Any]) -> ContentPart:
    """One Messages API `text`, `image` or `document` block."""
    kind = block.get("type")
    cache = _cache_control(where, block.get("cache_control"))
    if kind == "text":
        extra = set(block) - {"type", "text", "cache_control", "citations"}
        if extra or block.get("citations"):
            name = sorted(extra)[0] if extra else "citations"
            raise FacadeError(f"{where}.{name}: not carried by the gateway", param=f"{where}.{name}")
        return text_part(where, block.get("text"), cache)
    extra = set(block) - _ANTHROPIC_MEDIA_KEYS
    if extra:
        name = sorted(extra)[0]
        raise FacadeError(f"{where}.{name}: not carried by the gateway", param=f"{where}.{name}")
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("base64", "url"):
        raise FacadeError(f"{where}.source: a base64 or url source is carried (not {_kind(source)})",
                          param=f"{where}.source")
    cls = ImagePart if kind == "image" else DocumentPart
    fields: dict[str, Any] = {"type": kind, "cache_control": cache}
    if kind == "document":
        fields["title"] = block.get("title")
    elif "title" in block:
        raise FacadeError(f"{where}.title: not a field of an image block", param=f"{where}.title")
    if source["type"] == "base64":
        return _build(cls, where, media_type=source.get("media_type"), data=source.get("data"), **fields)
    return _build(cls, where, url=source.get("url"), **fields)


def _kind(source: Any) -> str:
    return repr(source.get("type")) if isinstance(source, dict) else "that"


def _cache_control(where: str, value: Any) -> CacheControl | None:
    if value is None:
        return None
    try:
        return CacheControl.model_validate(value)
    except ValidationError as exc:
        raise FacadeError(f"{where}.cache_control: {validation_reason(exc)}", param=f"{where}.cache_control") from None


def responses_part(where: str, part: dict[str, Any], *, role: str) -> ContentPart:
    """One Responses API input content part: `input_text` (`output_text` on an assistant turn),
    `input_image` (`image_url`: a data or https URL) and `input_file` (`file_data` or `file_url`)."""
    kind = part.get("type")
    if kind in _KEYS:
        _only(where, part, _KEYS[str(kind)])
    if kind == "input_text" or (role == "assistant" and kind in ("output_text", "refusal")):
        return text_part(where, part.get("refusal" if kind == "refusal" else "text"))
    if kind == "input_image" and role in ("user", "tool"):
        if part.get("file_id") is not None or "image_url" not in part:
            raise FacadeError(f"{where}.image_url: required (a data or https URL); the gateway holds no uploaded "
                              "files (file_id)", param=f"{where}.image_url")
        detail = part.get("detail")
        return _from_url(ImagePart, f"{where}.image_url", part["image_url"], type="image", detail=detail)
    if kind == "input_file" and role in ("user", "tool"):
        title = part.get("filename")
        if part.get("file_data") is not None:
            return _from_url(DocumentPart, f"{where}.file_data", part["file_data"], type="document", title=title)
        if part.get("file_url") is not None:
            return _from_url(DocumentPart, f"{where}.file_url", part["file_url"], type="document", title=title)
        raise FacadeError(f"{where}: file_data or file_url is carried; the gateway holds no uploaded files "
                          "(file_id)", param=where)
    raise FacadeError(f"{where}.type: {kind!r} content is not carried in a {role} message", param=f"{where}.type")


def responses_content(parts: Any, param: str, *, role: str) -> tuple[ContentPart, ...]:
    """A Responses message's `content` list (`role` user, system, developer or assistant), or a
    `function_call_output`'s `output` list (`role` tool), as canonical parts; `param` names the list
    (`input[0].content`). Several text parts stay several."""
    if not isinstance(parts, list) or not parts:
        raise FacadeError(f"{param}: must be a non-empty list of content parts", param=param)
    role = "system" if role == "developer" else role
    out: list[ContentPart] = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise FacadeError(f"{param}[{j}]: must be an object", param=f"{param}[{j}]")
        out.append(responses_part(f"{param}[{j}]", part, role=role))
    return tuple(out)
