"""Chunkers: split a text stream into the units validators judge (DESIGN.md section 5).

`feed(text)` returns the chunks that became final; `flush()` returns the trailing fragment at
the end of the stream. Chunks join back to the text exactly (whitespace stays on the chunk it
follows). A boundary is final only once text after it has begun, and every decision is a
function of the text alone, so the same text gives the same chunks however it was sliced.
A size cap force-flushes long unterminated text (code, lists) so holding never grows unbounded.

The sentence rules are our own rather than a segmentation library: pysbd and its kin segment a
whole text per call (re-running on every token is quadratic and costs milliseconds), and their
split of a prefix can change as text arrives. One regex pass resumed where it stopped, with a
lookahead of one character past the whitespace, is incremental by construction.
"""

from __future__ import annotations

import re
from typing import Protocol

__all__ = ["CHUNKERS", "DEFAULT_CHUNKING", "DEFAULT_MAX_CHARS", "Chunker", "build_chunker"]

DEFAULT_CHUNKING = "sentence"
DEFAULT_MAX_CHARS = 1000
"""Force-flush cap: a chunk never exceeds this many characters (bounds held text)."""


class Chunker(Protocol):
    def feed(self, text: str) -> list[str]: ...

    def flush(self) -> list[str]: ...


class _BoundaryChunker:
    """Pending buffer, a boundary search resumed where it stopped, and the size cap.

    Subclasses give `_PATTERN` and `_decide(m)`: True (boundary at m.end()), False (no
    boundary; search on past it) or None (undecided: wait for more text).
    """

    _PATTERN: re.Pattern[str]
    __slots__ = ("_buf", "_pos", "_max", "_line_start")

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if max_chars < 1:
            raise ValueError("max_chars must be positive")
        self._buf = ""
        self._pos = 0
        self._max = max_chars
        self._line_start = True  # the character before the buffer is a newline, or there is none

    def feed(self, text: str) -> list[str]:
        if not text:
            return []
        self._buf += text
        out: list[str] = []
        while True:
            cut = self._next_boundary()
            if cut is None or cut > self._max:
                if len(self._buf) <= self._max:
                    break
                cut = self._force_cut()
            self._emit(cut, out)
        return out

    def flush(self) -> list[str]:
        """The pending text as one last chunk (end of stream, or its text block ended)."""
        if not self._buf:
            return []
        out = [self._buf]
        self._line_start = self._buf[-1] == "\n"
        self._buf = ""
        self._pos = 0
        return out

    def _emit(self, cut: int, out: list[str]) -> None:
        out.append(self._buf[:cut])
        self._line_start = self._buf[cut - 1] == "\n"
        self._buf = self._buf[cut:]
        self._pos = 0  # decisions depend on where the chunk starts: search the new one afresh

    def _next_boundary(self) -> int | None:
        buf = self._buf
        while True:
            m = self._PATTERN.search(buf, self._pos)
            if m is None:
                self._pos = self._resume(buf)
                return None
            if m.end() >= len(buf):  # the match may still grow: wait for the next character
                self._pos = m.start()
                return None
            decision = self._decide(m)
            if decision:
                return m.end()
            self._pos = m.end()

    def _force_cut(self) -> int:
        """Cut at the last whitespace within the cap (keeps words whole), else at the cap."""
        head = self._buf[: self._max]
        stripped = head.rstrip()
        if len(stripped) < len(head):
            return self._max  # the cap falls in whitespace: cut after it
        space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        return space + 1 if space > 0 else self._max

    def _decide(self, m: re.Match[str]) -> bool:
        raise NotImplementedError

    def _resume(self, buf: str) -> int:
        """Where the next search starts when nothing matched: every pattern here matches its
        first character alone, so no match can start before the end (ParagraphChunker differs)."""
        return len(buf)

    def _has_text_before(self, end: int) -> bool:
        return _NON_SPACE.search(self._buf, 0, end) is not None


_NON_SPACE = re.compile(r"\S")

# Titles and Latin abbreviations after which a period never ends a sentence.
_NO_SPLIT = frozenset(
    "mr mrs ms dr prof sr jr st mt gen col lt sgt capt rev hon vs e.g i.e cf viz approx incl fig figs "
    "eq ca al resp dept est".split()
)


class SentenceChunker(_BoundaryChunker):
    """Sentences (and lines): ". ! ? …" before whitespace, CJK "。！？" anywhere, a newline.

    No split after an abbreviation ("e.g.", "Dr."), an initial ("J. Smith"), a list marker at the
    start of a line ("1. "), before a lowercase letter ("approx. five", "wait... what"), or
    without whitespace after the stop (decimals "3.14", URLs, "file.txt").
    """

    __slots__ = ()
    _PATTERN = re.compile(
        r"(?P<t>[.!?…‼⁇⁈⁉]+)[\"'”’»)\]}]*(?P<w>\s*)"
        r"|[。！？｡]+[」』）】〕〉》”’\"')\]]*\s*"
        r"|\n\s*"
    )

    def _decide(self, m: re.Match[str]) -> bool:
        stop = m.group("t")
        if stop is None:
            if m.group(0)[0] == "\n":  # a line break ends a chunk that has text
                return self._has_text_before(m.start())
            return True  # CJK full stop
        space = m.group("w")
        if not space:
            return False
        if "\n" in space:
            return True
        if self._buf[m.end()].islower():
            return False
        if stop == ".":
            word = self._word_before(m.start())
            if word.lower() in _NO_SPLIT:
                return False
            if len(word) == 1 and word.isupper():
                return False  # an initial
            if word.isdigit() and len(word) <= 3 and self._starts_line(m.start() - len(word)):
                return False  # a numbered list marker
        return True

    def _word_before(self, end: int) -> str:
        buf = self._buf
        start = end
        while start > 0 and (buf[start - 1].isalnum() or buf[start - 1] == "."):
            start -= 1
        return buf[start:end]

    def _starts_line(self, index: int) -> bool:
        if index == 0:
            return self._line_start
        before = self._buf[:index].rstrip(" \t")
        return before.endswith("\n") or (not before and self._line_start)


class WordChunker(_BoundaryChunker):
    """Words, each with the whitespace after it (leading whitespace joins the first word)."""

    __slots__ = ()
    _PATTERN = re.compile(r"\s+")

    def _decide(self, m: re.Match[str]) -> bool:
        return m.start() > 0


class ParagraphChunker(_BoundaryChunker):
    """Paragraphs: text up to and including a blank line."""

    __slots__ = ()
    _PATTERN = re.compile(r"\n[ \t\r\f\v]*\n\s*")

    def _decide(self, m: re.Match[str]) -> bool:
        return self._has_text_before(m.start())

    def _resume(self, buf: str) -> int:
        newline = buf.rfind("\n", self._pos)  # a blank line may still complete after it
        return newline if newline >= 0 else len(buf)


class TokenChunker:
    """`none`: every token is its own chunk, final at once (no holding beyond one token)."""

    __slots__ = ()

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        pass

    def feed(self, text: str) -> list[str]:
        return [text] if text else []

    def flush(self) -> list[str]:
        return []


CHUNKERS: dict[str, type] = {
    "sentence": SentenceChunker,
    "word": WordChunker,
    "paragraph": ParagraphChunker,
    "none": TokenChunker,
}


def build_chunker(name: str, max_chars: int = DEFAULT_MAX_CHARS) -> Chunker:
    """A fresh chunker by name; KeyError for an unknown one (names are checked at the edge)."""
    return CHUNKERS[name](max_chars)
