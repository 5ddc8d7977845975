"""Caller patterns are data: they are compiled by RE2 (google-re2), a linear-time engine.

Python's `re` backtracks: a pattern like `(.*a){12}b` takes exponential time and, run inside a
validator, stalls the whole event loop. RE2 guarantees time linear in the text and refuses
what it cannot do that way (backreferences, lookaround): such a pattern is the caller's mistake,
a 422 naming the field.
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["MAX_PATTERN_CHARS", "compile_pattern"]

MAX_PATTERN_CHARS = 1000
_MAX_MEM = 8 << 20  # bytes of compiled program per pattern

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # refusals are answered to the caller, not printed to stderr
_OPTIONS.max_mem = _MAX_MEM


def compile_pattern(pattern: str) -> Any:
    """The RE2 program of a caller's pattern; ValueError (a 422 at the edge) if RE2 refuses it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"a pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(
            f"not a pattern the gateway accepts (RE2 syntax: no backreferences or lookaround): {reason}"
        ) from None
