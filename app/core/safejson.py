"""JSON out, whatever the text: lone surrogates (invalid Unicode) become U+FFFD instead of an error.

Caller input with lone surrogates is refused at the edge, but provider output is not the
caller's: an upstream JSON escape like "\\udfff" decodes to a lone surrogate that orjson cannot
encode. Encoding must never be the step that breaks a stream, so it falls back to a cleaned copy.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["dumps", "first_surrogate", "scrub_surrogates"]

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
