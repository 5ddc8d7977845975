"""Secret scrubbing: the gateway's own credentials never reach a client, a log line or a record.

Upstream error text can quote the key the gateway sent (OpenAI's "Incorrect API key provided:
sk-..."). Every `GatewayError` message and detail passes through `scrub()` when it is built, and
every log line does too (app/observability.py). Two nets: the exact values the operator configured
(`remember()`, called once at start with the settings' secrets), and tokens shaped like the
providers' known key formats, configured here or not.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "remember", "scrub", "scrub_value"]

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


def remember(*values: str | None) -> None:
    """Add configured secret values (API keys, tokens) to scrub wherever they appear."""
    global _known_re
    added = {v.strip() for v in values if v and len(v.strip()) >= _MIN_SECRET}
    if not added - _known:
        return
    _known.update(added)
    _known_re = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


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
