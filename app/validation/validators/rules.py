"""Rule validators, pure CPU: max_length, regex_deny, banned_words.

Caller patterns (regex_deny) are compiled by RE2 (patterns.py): matching takes time linear in
the text, whatever the pattern. Banned words are escaped literals. Patterns are matched over
the chunk plus a tail of the text released before it, so a match
that spans a chunk boundary (two words of a phrase under the `word` chunker) is still caught;
only matches that end inside the new chunk count, so nothing is judged twice.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from app.validation.validators.base import (
    PASS,
    CheckContext,
    GateEnv,
    ToolCallCheck,
    Validator,
    ValidatorConfig,
    Verdict,
    string_leaves,
    with_tail,
)
from app.validation.validators.patterns import compile_pattern

__all__ = ["BannedWords", "MaxLength", "RegexDeny"]

_SHOWN_MATCH = 80
_PLAIN_WORD = re.compile(r"\w+")


class MaxLengthConfig(ValidatorConfig):
    max: int = Field(ge=1, description="Longest answer allowed.")
    unit: Literal["chars", "tokens"] = Field(
        default="chars", description="chars of released text, or token events (the provider's deltas)."
    )


class MaxLength(Validator):
    """Fails as soon as the answer grows past `max` characters or token events."""

    name = "max_length"
    Config = MaxLengthConfig
    lanes = ("text",)

    def __init__(self, config: MaxLengthConfig, env: GateEnv) -> None:
        super().__init__(config, env)
        self._max = config.max
        self._tokens = config.unit == "tokens"

    def _judge(self, chars: int, ctx: CheckContext) -> Verdict:
        size = ctx.tokens if self._tokens else chars
        if size > self._max:
            unit = "tokens" if self._tokens else "characters"
            return Verdict.fail(f"answer longer than {self._max} {unit}")
        return PASS

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        return self._judge(ctx.before_chars + len(chunk), ctx)

    async def check_final(self, text: str, ctx: CheckContext) -> Verdict:
        return self._judge(ctx.before_chars + len(text), ctx)  # earlier turns count too


def _compile(pattern: str) -> Any:
    compiled = compile_pattern(pattern)
    if compiled.match("") is not None:
        raise ValueError("pattern matches the empty string")
    return compiled


class RegexDenyConfig(ValidatorConfig):
    patterns: list[str] = Field(
        min_length=1, max_length=64,
        description="RE2 regexes (linear time: no backreferences or lookaround); (?i) for case-insensitive.",
    )
    lookbehind: int = Field(default=200, ge=0, le=4000, description="Released characters searched with each chunk.")

    @field_validator("patterns")
    @classmethod
    def _compilable(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            _compile(pattern)
        return patterns


def _first_new_match(patterns: list[Any], text: str, fresh: int) -> tuple[Any, str] | None:
    for pattern in patterns:
        for m in pattern.finditer(text):
            if m.end() > fresh and m.end() > m.start():
                return pattern, m.group(0)
    return None


class _Matcher(Validator):
    """Judges the chunk with a tail of released text, and the strings of tool arguments."""

    _lookbehind = 0

    def _verdict(self, text: str, fresh: int) -> Verdict:
        """Fail on a match that ends past `fresh` (matches before it were judged already)."""
        raise NotImplementedError

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        return self._verdict(*with_tail(chunk, ctx, self._lookbehind))

    async def check_tool_call(self, call: ToolCallCheck, ctx: CheckContext) -> Verdict:
        return self._verdict("\n".join(string_leaves(call.arguments)), 0)


class RegexDeny(_Matcher):
    """Fails on the first match of any pattern; the reason shows the pattern and the match."""

    name = "regex_deny"
    Config = RegexDenyConfig

    def __init__(self, config: RegexDenyConfig, env: GateEnv) -> None:
        super().__init__(config, env)
        self._patterns = [_compile(p) for p in config.patterns]
        self._lookbehind = config.lookbehind

    def _verdict(self, text: str, fresh: int) -> Verdict:
        hit = _first_new_match(self._patterns, text, fresh)
        if hit is None:
            return PASS
        pattern, match = hit
        return Verdict.fail(f"matched {pattern.pattern!r}: {match[:_SHOWN_MATCH]!r}")


class BannedWordsConfig(ValidatorConfig):
    words: list[str] = Field(min_length=1, max_length=5000, description="Words or phrases, matched whole, any case.")

    @field_validator("words")
    @classmethod
    def _not_blank(cls, words: list[str]) -> list[str]:
        for word in words:
            if not word.strip():
                raise ValueError("a banned word is blank")
            if len(word) > 200:
                raise ValueError("a banned word is longer than 200 characters")
        return words


class BannedWords(_Matcher):
    """Fails on a banned word or phrase, whole words only, case-insensitive.

    Plain words are looked up in a set (one pass over the text, however long the list);
    phrases and words with punctuation go through one regex.
    """

    name = "banned_words"
    Config = BannedWordsConfig

    def __init__(self, config: BannedWordsConfig, env: GateEnv) -> None:
        super().__init__(config, env)
        words = {w.strip() for w in config.words}
        self._words = {w.lower() for w in words if _PLAIN_WORD.fullmatch(w)}
        others = sorted(words - {w for w in words if _PLAIN_WORD.fullmatch(w)}, key=len, reverse=True)
        alternatives = "|".join(r"\s+".join(map(re.escape, w.split())) for w in others)
        self._phrases = [re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)] if others else []
        self._lookbehind = max(len(w) for w in words) + 1

    def _verdict(self, text: str, fresh: int) -> Verdict:
        banned = self._words
        for m in _PLAIN_WORD.finditer(text):
            if m.end() > fresh and m.group().lower() in banned:
                return Verdict.fail(f"banned word {m.group()!r}")
        hit = _first_new_match(self._phrases, text, fresh)
        return PASS if hit is None else Verdict.fail(f"banned word {hit[1][:_SHOWN_MATCH]!r}")
