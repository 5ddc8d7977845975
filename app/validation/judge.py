"""The `llm_judge` validator's backend: one short, deterministic completion from a provider.

The validation layer knows no router: the gateway gives the backend a callable that opens a
provider stream for `provider/model` (or a route), and the backend reads it to its end.

A judge call is a model call like any other: each run gets its own `RunJudge`, which
allows at most `max_calls` calls (past it a check raises `JudgeCapReached`, which the validator's
`on_error` turns into a block, by default, or `unknown`: never a silent pass), at most
`concurrency` at once, and keeps the usage per judge model (`lines()`): it goes into the run's
`final.validation.judge`, its record, the key's tpm and budget, and GET /v1/usage. The key's
model allow-list is checked at the HTTP edge (`called_models`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from app.core.accumulator import Accumulator
from app.core.errors import UpstreamError
from app.core.events import FinalEvent, JudgeUsageData, Usage
from app.core.messages import Message
from app.providers.base import PatchStream, ProviderRequest, drive
from app.validation.validators.base import MAX_REASON_CHARS

__all__ = ["MAX_REASON_CHARS", "JudgeBackend", "JudgeCapReached", "OpenStream", "Pricer", "RunJudge", "clip"]

OpenStream = Callable[[ProviderRequest], Awaitable[PatchStream]]
Span = Callable[[str], AbstractContextManager[object]]
"""A judge call's trace span by its model (app/tracing.py's `Tracing.judge`), when tracing is on."""
"""Opens a stream for the request's `model` as the caller names it (`provider/model` or a route)."""
Pricer = Callable[[str, Usage], float | None]
"""(model, usage) -> USD, None when the model has no price."""


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` cut to `limit` characters (code points: never half a character), marked with ..."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class JudgeCapReached(Exception):
    """The run made its judge calls: the check is not made (on_error decides: block or unknown)."""


class JudgeBackend:
    """`await backend(model, prompt)` -> the completion's text (the validators' `Judge`)."""

    __slots__ = ("_open", "_span")

    def __init__(self, open_stream: OpenStream, span: Span | None = None) -> None:
        self._open = open_stream
        self._span = span

    async def complete(self, model: str, prompt: str) -> FinalEvent:
        """The judge's whole answer, its usage and its error (if it failed) as its `final`."""
        request = ProviderRequest(model=model, messages=(Message(role="user", content=prompt),),
                                  temperature=0.0, max_tokens=256)
        with self._span(model) if self._span is not None else nullcontext():
            stream = await self._open(request)
            provider = model.partition("/")[0]
            return await drive(stream, Accumulator(model=model, provider=provider))

    async def __call__(self, model: str, prompt: str) -> str:
        return _text(model, await self.complete(model, prompt))


def _text(model: str, final: FinalEvent) -> str:
    if final.error is not None:
        raise UpstreamError(f"judge {model[:256]}: {clip(final.error['message'])}", code=final.error["code"],
                            retryable=final.error["retryable"])
    return final.message.content


@dataclass(slots=True)
class _Line:
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None


class RunJudge:
    """One run's judge (a `Judge`): capped, bounded in concurrency, metered per judge model."""

    __slots__ = ("_backend", "max_calls", "calls", "_slots", "_price", "_lines")

    def __init__(self, backend: JudgeBackend, *, max_calls: int, concurrency: int, price: Pricer | None = None) -> None:
        self._backend = backend
        self.max_calls = max_calls
        self.calls = 0
        self._slots = asyncio.Semaphore(concurrency)
        self._price = price
        self._lines: dict[str, _Line] = {}

    async def __call__(self, model: str, prompt: str) -> str:
        if self.calls >= self.max_calls:
            raise JudgeCapReached(f"this run made its {self.max_calls} judge calls (FOUNDRY_JUDGE_MAX_CALLS)")
        self.calls += 1
        line = self._lines.setdefault(model, _Line())
        line.calls += 1
        async with self._slots:
            final = await self._backend.complete(model, prompt)
        usage = final.usage
        line.usage.add(usage)
        if not usage.total_tokens:
            line.usage.total_tokens += usage.input_tokens + usage.output_tokens
        cost = self._price(model, usage) if self._price is not None else None
        if cost is not None:
            line.cost_usd = round((line.cost_usd or 0.0) + cost, 10)
        return _text(model, final)

    def lines(self) -> dict[str, JudgeUsageData]:
        """Usage per judge model, as `final.validation.judge` and the run record show it."""
        out: dict[str, JudgeUsageData] = {}
        for model, line in self._lines.items():
            data: JudgeUsageData = {"calls": line.calls, "input_tokens": line.usage.input_tokens,
                                    "output_tokens": line.usage.output_tokens,
                                    "total_tokens": line.usage.total_tokens}
            if line.cost_usd is not None:
                data["cost_usd"] = line.cost_usd
            out[model] = data
        return out
