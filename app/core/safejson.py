"""JSON in and out, whatever the text: lone surrogates (invalid Unicode) become U+FFFD instead of an error.

Caller input with lone surrogates is refused at the edge, but provider output is not the
caller's: an upstream JSON escape like "\\udfff" decodes to a lone surrogate that orjson cannot
encode, and orjson refuses to decode. Neither step may break a stream: `loads` reads such a
document with the standard library's parser and cleans it, `dumps` falls back to a cleaned copy.
A surrogate pair split across two provider events is two lone surrogates: two U+FFFD.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["dumps", "first_surrogate", "loads", "scrub_surrogates"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def first_surrogate(text: str) -> int:
    """Index of the first lone surrogate in `text`, or -1."""
    m = _SURROGATE.search(text)
    return -1 if m is None else m.start()


def scrub_surrogates(value: Any) -> Any:
    """A copy with every lone surrogate in strings (and keys) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_surrogates(v) for v in value]
    return value


def dumps(value: Any) -> bytes:
    """orjson.dumps, retried on a cleaned copy when the value holds invalid Unicode."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(scrub_surrogates(value))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: str | bytes) -> Any:
    """orjson.loads; a document it refuses only for a lone surrogate escape is read by the standard
    library's parser (NaN and Infinity still refused) with each lone surrogate made U+FFFD.
    Raises orjson.JSONDecodeError otherwise, as orjson.loads does."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in str(exc):
            raise
        try:
            return scrub_surrogates(json.loads(data, parse_constant=_refuse_constant))
        except ValueError:
            raise exc from None
