"""The validator interface: verdicts, the check context, the base class and its common config.

A validator judges a chunk (`check_chunk`), the whole text at the end (`check_final`) and each
complete tool call (`check_tool_call`); each returns pass, fail(reason) or unknown. A fresh
instance serves one text stream of one request, so instance state never leaks between requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.messages import ToolSpec

__all__ = [
    "MAX_REASON_CHARS",
    "PASS",
    "UNKNOWN",
    "CheckContext",
    "GateEnv",
    "Judge",
    "Lane",
    "Redaction",
    "ToolCallCheck",
    "Validator",
    "ValidatorConfig",
    "Verdict",
    "map_strings",
    "string_leaves",
    "with_tail",
]

Lane = Literal["text", "reasoning"]
MAX_REASON_CHARS = 200
"""A verdict's or a failed check's reason is cut here: never more of a judge's raw answer."""
Judge = Callable[[str, str], Awaitable[str]]
"""(model "provider/model", prompt) -> completion text; the pipeline runs the named provider."""


@dataclass(slots=True, frozen=True)
class Redaction:
    """Replace chunk[start:end] by `replacement` before release (offsets within the chunk)."""

    start: int
    end: int
    replacement: str


@dataclass(slots=True, frozen=True, kw_only=True)
class Verdict:
    """pass, fail (with a reason) or unknown; a pass may rewrite the held text or tool arguments."""

    kind: Literal["pass", "fail", "unknown"]
    reason: str | None = None
    redactions: tuple[Redaction, ...] = ()
    arguments: dict[str, Any] | None = None
    """For a tool call: the arguments to release instead (redacted)."""

    @staticmethod
    def fail(reason: str) -> Verdict:
        return Verdict(kind="fail", reason=reason)


PASS = Verdict(kind="pass")
UNKNOWN = Verdict(kind="unknown")


class CheckContext:
    """What a check may know besides its chunk: the lane's text validated before it, and counts.

    `before` joins lazily (most rule checks need only `tail`), so long streams stay linear.
    """

    __slots__ = ("lane", "index", "tokens", "tool_calls", "_parts", "_chars")

    def __init__(self, *, lane: Lane, index: int, tokens: int, tool_calls: int, parts: list[str], chars: int) -> None:
        self.lane = lane
        self.index = index
        """The chunk's number in its lane, from 0."""
        self.tokens = tokens
        """Token events of the lane that began before the chunk's end."""
        self.tool_calls = tool_calls
        """Tool calls seen so far in the stream."""
        self._parts = parts
        self._chars = chars

    @property
    def before_chars(self) -> int:
        return self._chars

    @property
    def before(self) -> str:
        """The lane's text validated before this chunk, as released (redactions applied)."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]  # compact in place: later contexts join once more only
        return parts[0] if parts else ""

    def tail(self, n: int) -> str:
        """The last `n` characters of `before` (for matches that span a chunk boundary)."""
        if n <= 0:
            return ""
        got: list[str] = []
        size = 0
        for part in reversed(self._parts):
            got.append(part)
            size += len(part)
            if size >= n:
                break
        return "".join(reversed(got))[-n:]


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolCallCheck:
    """A complete tool call to judge: its arguments as the accumulator parsed them (plain JSON)."""

    id: str
    name: str
    arguments: dict[str, Any]
    server: bool = False


@dataclass(slots=True, frozen=True, kw_only=True)
class GateEnv:
    """What validators may be built with: the request's tools and the judge backend."""

    tools: Mapping[str, ToolSpec]
    judge: Judge | None = None


class ValidatorConfig(BaseModel):
    """Config keys every validator takes: a timeout per check and what an error means."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # "10" is not 10

    timeout: float = Field(default=5.0, gt=0, le=300, description="Seconds per check (awaiting validators).")
    on_error: Literal["fail", "ignore"] = Field(
        default="fail", description="fail: a check that errors or times out blocks (fail closed); ignore: unknown."
    )


class Validator:
    """Base validator: every check is `unknown` unless a subclass knows better.

    `inline` validators are pure CPU and never await: the gate runs them in place (no task, no
    timeout, microseconds). Others (`llm_judge`) run as concurrent tasks under their timeout.
    """

    name: ClassVar[str]
    Config: ClassVar[type[ValidatorConfig]] = ValidatorConfig
    inline: ClassVar[bool] = True
    pipelined: ClassVar[bool] = False
    """An awaiting validator that only judges (never redacts): its checks of later chunks may
    start before earlier ones ended (up to the gate's `max_pending`); its context's `before` is
    then the last 20,000 characters."""
    lanes: ClassVar[tuple[Lane, ...]] = ("text", "reasoning")

    def __init__(self, config: ValidatorConfig, env: GateEnv) -> None:
        self.config = config

    @property
    def rewrites(self) -> bool:
        """May release text or arguments other than the provider's (a redaction): a provider's own
        events, which carry the original, cannot then be relayed as sent."""
        return False

    @classmethod
    def models(cls, config: ValidatorConfig) -> tuple[str, ...]:
        """The models this validator calls (`provider/model` or an alias): a caller's key must be
        allowed each of them, as the request's own `model`."""
        return ()

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        return UNKNOWN

    async def check_final(self, text: str, ctx: CheckContext) -> Verdict:
        """`text`: the lane's current turn as released (the final message's content, for the
        answer); `ctx.before_chars` counts the earlier turns of a multi-step run."""
        return UNKNOWN

    async def check_tool_call(self, call: ToolCallCheck, ctx: CheckContext) -> Verdict:
        return UNKNOWN


def with_tail(chunk: str, ctx: CheckContext, lookbehind: int) -> tuple[str, int]:
    """The chunk with up to `lookbehind` characters of released text before it, and the tail's
    length: a match ending past that offset is new (matches wholly before it were judged)."""
    tail = ctx.tail(lookbehind)
    return tail + chunk, len(tail)


def string_leaves(value: Any) -> list[str]:
    """Every string in a JSON value (keys and values), in document order."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Mapping):
            for k, v in reversed(list(item.items())):
                stack.append(v)
                stack.append(k)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
    return out


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """A copy of a JSON value with `fn` applied to every string value (keys kept)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {k: map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [map_strings(v, fn) for v in value]
    return value
