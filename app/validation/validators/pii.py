"""The `pii` validator: emails, phone numbers, card numbers (Luhn) and IBANs (mod 97).

Action `block` fails the stream; `redact` rewrites the held chunk before release. Text already
sent is never touched: a match that starts in released text cannot be redacted, so it fails
(closed) instead - use the sentence chunker (the default), whose chunks keep such numbers whole.
Reasons name the kind, never the data.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from app.validation.validators.base import (
    PASS,
    CheckContext,
    GateEnv,
    Redaction,
    ToolCallCheck,
    Validator,
    ValidatorConfig,
    Verdict,
    map_strings,
    string_leaves,
    with_tail,
)

__all__ = ["Pii", "find_pii", "luhn_ok"]

Kind = Literal["email", "phone", "card", "iban"]
ALL_KINDS: tuple[Kind, ...] = ("email", "phone", "card", "iban")

_EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}(?![\w-])")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d])")
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}[ .-]?\(?\d{1,4}\)?(?:[ .-]?\d{2,5}){1,4}"  # +44 20 7946 0958, +15551234567
    r"|\(\d{2,4}\)[ .-]?\d{2,4}(?:[ .-]?\d{2,5}){1,3}"  # (555) 123-4567
    r"|\d{2,4}(?:[ .-]\d{2,5}){2,4}"  # 555-123-4567, 020 7946 0958
    r")(?![\w])"
)
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])")
_IPV4_LIKE = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _iban_ok(text: str) -> bool:
    iban = text.replace(" ", "")
    if not 15 <= len(iban) <= 34:
        return False
    rotated = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rotated)) % 97 == 1


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def _phone_ok(text: str) -> bool:
    n = len(_digits(text))
    if text.startswith("+"):
        return 8 <= n <= 15
    return 9 <= n <= 15 and not _IPV4_LIKE.match(text)


def find_pii(text: str, kinds: tuple[Kind, ...] = ALL_KINDS) -> list[tuple[int, int, Kind]]:
    """Non-overlapping (start, end, kind) spans in order; cards win over phones on overlap."""
    found: list[tuple[int, int, Kind]] = []
    if "card" in kinds:
        found += [(m.start(), m.end(), "card") for m in _CARD.finditer(text) if luhn_ok(_digits(m.group()))]
    if "iban" in kinds:
        found += [(m.start(), m.end(), "iban") for m in _IBAN.finditer(text) if _iban_ok(m.group())]
    if "email" in kinds and "@" in text:
        found += [(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]
    if "phone" in kinds:
        found += [(m.start(), m.end(), "phone") for m in _PHONE.finditer(text) if _phone_ok(m.group())]
    found.sort(key=lambda s: (s[0], -s[1]))
    out: list[tuple[int, int, Kind]] = []
    for span in found:
        if out and span[0] < out[-1][1]:
            continue  # overlaps an earlier, longer or higher-priority span
        out.append(span)
    return out


class PiiConfig(ValidatorConfig):
    action: Literal["block", "redact"] = "block"
    kinds: list[Kind] = Field(default_factory=lambda: list(ALL_KINDS), min_length=1)
    replacement: str = Field(
        default="[{kind}]", max_length=100, description="Redaction text; {kind} becomes EMAIL, PHONE, CARD or IBAN."
    )
    lookbehind: int = Field(default=64, ge=0, le=1000, description="Released characters searched with each chunk.")


class Pii(Validator):
    name = "pii"
    Config = PiiConfig

    def __init__(self, config: PiiConfig, env: GateEnv) -> None:
        super().__init__(config, env)
        self._kinds: tuple[Kind, ...] = tuple(dict.fromkeys(config.kinds))
        self._redact = config.action == "redact"
        self._template = config.replacement
        self._lookbehind = config.lookbehind


    @property
    def rewrites(self) -> bool:
        return self._redact

    def _replacement(self, kind: str) -> str:
        return self._template.replace("{kind}", kind.upper())

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        text, fresh = with_tail(chunk, ctx, self._lookbehind)
        spans = [s for s in find_pii(text, self._kinds) if s[1] > fresh]
        if not spans:
            return PASS
        if not self._redact:
            return Verdict.fail(f"{spans[0][2]} found")
        if spans[0][0] < fresh:
            return Verdict.fail(f"{spans[0][2]} spans text already released; cannot redact")
        return Verdict(
            kind="pass",
            redactions=tuple(Redaction(s - fresh, e - fresh, self._replacement(k)) for s, e, k in spans),
        )

    async def check_tool_call(self, call: ToolCallCheck, ctx: CheckContext) -> Verdict:
        kinds = self._kinds
        hits = [span for leaf in string_leaves(call.arguments) for span in find_pii(leaf, kinds)]
        if not hits:
            return PASS
        if not self._redact:
            return Verdict.fail(f"{hits[0][2]} found in the arguments of tool call {call.id}")
        return Verdict(kind="pass", arguments=map_strings(call.arguments, self._redact_string))

    def _redact_string(self, text: str) -> str:
        spans = find_pii(text, self._kinds)
        for start, end, kind in reversed(spans):
            text = text[:start] + self._replacement(kind) + text[end:]
        return text
