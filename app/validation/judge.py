"""The `llm_judge` validator's backend: one short, deterministic completion from a provider.

The validation layer knows no router: the gateway gives the backend a callable that opens a
provider stream for `provider/model` (or a route), and the backend reads it to its end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from app.core.accumulator import Accumulator
from app.core.errors import UpstreamError
from app.core.messages import Message
from app.providers.base import PatchStream, ProviderRequest, drive

__all__ = ["JudgeBackend", "OpenStream"]

OpenStream = Callable[[ProviderRequest], Awaitable[PatchStream]]
"""Opens a stream for the request's `model` as the caller names it (`provider/model` or a route)."""


class JudgeBackend:
    """`await backend(model, prompt)` -> the completion's text (the validators' `Judge`)."""

    __slots__ = ("_open",)

    def __init__(self, open_stream: OpenStream) -> None:
        self._open = open_stream

    async def __call__(self, model: str, prompt: str) -> str:
        request = ProviderRequest(model=model, messages=(Message(role="user", content=prompt),),
                                  temperature=0.0, max_tokens=256)
        stream = await self._open(request)
        provider = model.partition("/")[0]
        final = await drive(stream, Accumulator(model=model, provider=provider))
        if final.error is not None:
            raise UpstreamError(f"judge {model}: {final.error['message']}", code=final.error["code"],
                                retryable=final.error["retryable"])
        return final.message.content
