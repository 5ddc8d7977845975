"""A lane is one text stream the gate validates: the answer (`token` events) or the reasoning.

It maps token events onto character offsets of the lane's text, feeds the chunker, keeps how far
the text was chunked, validated and released, and the redactions validators asked for. Offsets
count the original text; redactions are spans of it, so a token is rewritten by the spans that
cross it (a span's replacement goes where the span starts; later tokens drop their part of it).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import replace

from app.core.events import ReasoningEvent, TokenEvent
from app.validation.checks import Member
from app.validation.chunking import Chunker
from app.validation.validators.base import CheckContext, Lane, Verdict

__all__ = ["TextLane"]

_COMPACT_AT = 1024


class TextLane:
    __slots__ = (
        "kind", "chunker", "members", "fed", "chunked", "validated", "chunks", "turn_chars",
        "parts", "parts_chars", "redactions", "_red_starts", "_red_ends", "_red_texts",
        "_starts", "_head", "released_tokens", "_out_index",
    )

    def __init__(self, kind: Lane, chunker: Chunker, members: list[Member]) -> None:
        self.kind = kind
        self.chunker = chunker
        self.members = members
        self.fed = 0  # characters admitted
        self.chunked = 0  # characters handed to validators as chunks
        self.validated = 0  # characters whose chunk passed
        self.chunks = 0
        self.turn_chars = 0  # where the current assistant turn began in the validated (released-form) text
        self.parts: list[str] = []  # validated text as released (redactions applied)
        self.parts_chars = 0
        self.redactions = 0
        self._red_starts: list[int] = []
        self._red_ends: list[int] = []
        self._red_texts: list[str] = []
        self._starts: list[int] = []  # start offsets of held token events (from _head)
        self._head = 0
        self.released_tokens = 0
        self._out_index = 0

    @property
    def pending(self) -> bool:
        """Text admitted but not yet handed out as a chunk (the chunker holds it)."""
        return self.fed > self.chunked

    def admit(self, content: str) -> tuple[int, int]:
        """Register a token's text; its (start, end) offsets in the lane."""
        start = self.fed
        self.fed = start + len(content)
        self._starts.append(start)
        return start, self.fed

    def new_turn(self) -> None:
        """A tool result closed the assistant turn (`ToolResultEvent.closes_turn`). The gate
        flushed the lane first, so the turn starts on a chunk boundary."""
        self.turn_chars = self.parts_chars

    def turn_text(self) -> str:
        """The current turn's validated text as released: what the final checks judge."""
        return "".join(self.parts)[self.turn_chars:]

    def pass_through(self) -> None:
        """An ungated lane (no validator judges it): everything admitted counts as validated."""
        self.chunked = self.validated = self.fed

    def context(self, end: int, tool_calls: int) -> CheckContext:
        held_before = bisect_left(self._starts, end, self._head) - self._head
        return CheckContext(
            lane=self.kind, index=self.chunks, tokens=self.released_tokens + held_before,
            tool_calls=tool_calls, parts=self.parts, chars=self.parts_chars,
        )

    def final_context(self, tool_calls: int) -> CheckContext:
        """For final checks: `before` is the text of earlier turns (only its length is kept)."""
        return CheckContext(
            lane=self.kind, index=self.chunks, tokens=self.released_tokens + len(self._starts) - self._head,
            tool_calls=tool_calls, parts=[], chars=self.turn_chars,
        )

    def accept(self, chunk: str, start: int, verdicts: list[Verdict], *, validated: bool = True) -> None:
        """The chunk at `start` passed: record its redactions; its text counts as validated (unless
        `validated` is False: pipelined checks of it are still in flight; the gate sets it later)."""
        end = start + len(chunk)
        spans = sorted(
            (start + max(0, r.start), start + min(len(chunk), r.end), r.replacement)
            for v in verdicts for r in v.redactions if r.end > r.start
        )
        for s, e, text in spans:
            if self._red_ends and s < self._red_ends[-1]:  # overlaps the previous span: merge
                self._red_ends[-1] = max(self._red_ends[-1], e)
                continue
            self._red_starts.append(s)
            self._red_ends.append(e)
            self._red_texts.append(text)
            self.redactions += 1
        rendered = self.render(chunk, start) if spans else chunk
        self.parts.append(rendered)
        self.parts_chars += len(rendered)
        if validated:
            self.validated = end
        self.chunks += 1

    def render(self, text: str, offset: int) -> str:
        """`text`, which sits at `offset` of the lane, as released (redactions applied)."""
        ends = self._red_ends
        i = bisect_right(ends, offset)
        if i == len(ends):
            return text
        stop = offset + len(text)
        out: list[str] = []
        cursor = offset
        starts = self._red_starts
        while i < len(ends) and starts[i] < stop:
            if starts[i] > cursor:
                out.append(text[cursor - offset : starts[i] - offset])
            if starts[i] >= offset:
                out.append(self._red_texts[i])
            cursor = max(cursor, ends[i])
            i += 1
        if cursor < stop:
            out.append(text[cursor - offset :])
        return "".join(out)

    def emit(self, event: TokenEvent | ReasoningEvent, start: int) -> TokenEvent | ReasoningEvent | None:
        """The held event as released: rewritten by redactions, re-indexed; None when emptied."""
        self.released_tokens += 1
        self._head += 1
        if self._head >= _COMPACT_AT:
            del self._starts[: self._head]
            self._head = 0
        content = self.render(event.content, start)
        if not content:
            return None
        index = self._out_index
        self._out_index = index + 1
        if index == event.index and content is event.content:
            return event
        return replace(event, index=index, content=content)
