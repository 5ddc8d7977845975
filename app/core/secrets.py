"""Secret scrubbing: the gateway's own credentials never reach a client, a log line or a record.

Upstream error text can quote the key the gateway sent (OpenAI's "Incorrect API key provided:
sk-..."). Every `GatewayError` message and detail passes through `scrub()` when it is built, and
every log line does too (app/observability.py). Two nets: the exact values the operator configured
(`remember()`, called once at start with the settings' secrets), and tokens shaped like the
providers' known key formats, configured here or not.

Answer text (an upstream that echoes the request's headers) is scrubbed of the configured values
only, as it streams (`HeldText`): a key-shaped token in a model's answer is often what the caller
asked for (an example, a fixture), while the gateway's own credentials never are.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "HeldText", "forget", "guarding", "remember", "scrub", "scrub_value"]

REDACTED = "[redacted]"
_MIN_SECRET = 8  # shorter values would redact ordinary words

_KEY_SHAPES = re.compile(
    r"sk-ant-[A-Za-z0-9_\-*]{6,}"  # Anthropic
    r"|sk-[A-Za-z0-9_\-*.]{6,}"  # OpenAI (sk-, sk-proj-, sk-svcacct-; masked forms with *)
    r"|AIza[0-9A-Za-z_\-]{20,}"  # Google API keys (Gemini)
    r"|ya29\.[0-9A-Za-z_\-.]{10,}"  # Google OAuth access tokens
    r"|fgw-[A-Za-z0-9_\-]{16,}"  # this gateway's own keys (app/auth/keys.py)
    r"|xai-[A-Za-z0-9]{16,}|gsk_[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{12,}=*"
)
_known: set[str] = set()
_known_re: re.Pattern[str] | None = None
_prefixes: set[str] = set()
"""Every proper prefix of a configured value: the text `HeldText` may not release yet."""
_firsts: frozenset[str] = frozenset()
_longest = 0


def remember(*values: str | None) -> None:
    """Add configured secret values (API keys, tokens) to scrub wherever they appear."""
    global _known_re, _firsts, _longest
    added = {v.strip() for v in values if v and len(v.strip()) >= _MIN_SECRET}
    if not added - _known:
        return
    _known.update(added)
    _known_re = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))
    _prefixes.update(v[:i] for v in added for i in range(1, len(v)))
    _firsts = frozenset(v[0] for v in _known)
    _longest = max(len(v) for v in _known)


def forget() -> None:
    """Forget every configured value (a process that builds several apps, as the tests do: one
    app's secrets would hold back another's answer text that merely begins like them)."""
    global _known_re, _firsts, _longest
    _known.clear()
    _prefixes.clear()
    _known_re, _firsts, _longest = None, frozenset(), 0


def guarding() -> bool:
    """Configured secrets exist: answer text must pass a `HeldText`."""
    return _known_re is not None


class HeldText:
    """One stream of answer text, scrubbed of the configured secrets however it is split. A piece
    that ends with three or more characters that could begin a secret keeps them back (never more
    than the longest secret, less one character) until the next piece says whether they do; one or
    two such characters go out (most pieces end with a letter that begins some secret), and a
    secret they turn out to begin is redacted from the next piece on."""

    __slots__ = ("_held", "_tail", "scrubbed")

    def __init__(self) -> None:
        self.scrubbed = False
        """A secret was redacted from this text."""
        self._held = ""
        self._tail = ""
        """The last characters released: a secret may have begun in them."""

    def feed(self, text: str) -> str:
        """What of the text so far may be released now, scrubbed."""
        if _known_re is None:
            return text
        released = len(self._tail)
        whole = self._tail + self._held + text
        joined = _scrub_after(whole, released)
        self.scrubbed = self.scrubbed or joined != whole
        cut = len(joined)
        for i in range(max(0, cut - _longest + 1), cut - _RELEASED):
            if joined[i] in _firsts and joined[i:] in _prefixes:
                cut = max(i, released)
                break
        self._held = joined[cut:]
        self._tail = joined[max(0, cut - _RELEASED):cut]
        return joined[released:cut]

    @property
    def holding(self) -> bool:
        """Characters are kept back: they could begin a secret."""
        return bool(self._held)

    def flush(self) -> str:
        """The text ended: what is held (the start of a secret, cut off: redacted when it is long
        enough to matter)."""
        held, self._held, self._tail = self._held, "", ""
        if len(held) >= _MIN_SECRET:
            self.scrubbed = True
            return REDACTED
        return held


_RELEASED = 2
"""Characters that could begin a secret released before the rest arrives (kept as `_tail`)."""


def _scrub_after(text: str, start: int) -> str:
    """`text` with every configured secret that ends past `start` redacted past `start` (what is
    before it was released already)."""
    assert _known_re is not None
    if len(text) < _MIN_SECRET:
        return text
    out: list[str] = []
    pos = start
    for match in _known_re.finditer(text):
        if match.end() <= start:
            continue
        out += (text[pos:max(match.start(), start)], REDACTED)
        pos = match.end()
    out.append(text[pos:])
    return text[:start] + "".join(out)


def scrub(text: str) -> str:
    """The text with configured secrets and key-shaped tokens replaced by `[redacted]`."""
    if _known_re is not None:
        text = _known_re.sub(REDACTED, text)
    return _KEY_SHAPES.sub(REDACTED, text)


def scrub_value(value: Any) -> Any:
    """`scrub` applied to the strings of a JSON-like value."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(v) for v in value]
    return value
