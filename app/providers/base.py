"""What every provider module implements, and the shared machinery to implement it with.

A provider module is three things: request mapping (Foundry -> wire), a `StreamNormalizer`
(provider events, decoded by its framing, -> normalized patches: app/providers/framing.py) and an
adapter whose `open_stream()` performs the HTTP request (app/providers/upstream.py: `HttpAdapter`,
on the gateway's own aiohttp client). `open_stream()` raises `GatewayError` for failures known
before the first byte of the body (they become HTTP errors); the returned `PatchStream` raises
`GatewayError` for failures after it (they become `final{status: "error"}`). `generate()` (one
request answered whole, reference/foundry-adapters.md) is written once, in app/providers/reference.py,
on `open_stream()`: an adapter gets it by naming `ProviderAdapter` as its base.
"""

from __future__ import annotations

import contextlib
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError, UpstreamError
from app.core.events import FinalEvent, ReasoningBlockEnd, StreamEvent
from app.core.messages import JsonObject, Message, ToolSpec
from app.core.patches import Patch
from app.core.released import Released
from app.providers.errors import CONNECTION_ERRORS, read_error
from app.providers.framing import StreamNormalizer
from app.providers.passthrough import Passthrough

__all__ = [
    "PatchStream",
    "ProviderAdapter",
    "ProviderRequest",
    "StreamNormalizer",
    "TokenCounter",
    "ToolChoice",
    "drive",
    "incomplete",
    "mid_stream_errors",
    "released_batches",
    "response_events",
    "to_final",
]

ToolChoice = Literal["auto", "none", "required"] | str
"""`auto`, `none`, `required`, or the name of one tool the model must call."""


@dataclass(slots=True, kw_only=True)
class ProviderRequest:
    """One call to one provider, already checked at the edge; `model` has no provider prefix."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    temperature: float | None = None
    """None: not sent, the provider's own default applies (nothing is invented for the caller)."""
    max_tokens: int | None = None
    options: JsonObject = field(default_factory=dict)
    """`provider_options` from the request: wire extras the caller asked for explicitly."""
    stop: tuple[str, ...] = ()
    """Stop sequences: OpenAI `stop`, Anthropic `stop_sequences`, Gemini `stopSequences`."""
    parallel_tool_calls: bool | None = None
    """False: at most one tool call per response (OpenAI `parallel_tool_calls`, Anthropic
    `tool_choice.disable_parallel_tool_use`); None: the provider's default."""
    output_schema: JsonObject | None = None
    """Structured output: the answer is JSON following this JSON Schema (Anthropic
    `output_config.format`, OpenAI `response_format` / `text.format`, Gemini `responseJsonSchema`)."""
    cache_control: JsonObject | None = None
    """Anthropic's top-level prompt-cache breakpoint (automatic caching); a provider that caches by
    itself (OpenAI, Gemini) has nothing to send for it."""
    trace_headers: Mapping[str, str] | None = None
    """Trace context for the upstream (`traceparent`, ...), sent as request headers when tracing is on."""
    passthrough: Passthrough | None = None
    """The client's own request, for a provider of the facade's wire (a same-wire route)."""


@runtime_checkable
class TokenCounter(Protocol):
    """A provider that counts a request's input tokens without running it (Anthropic's
    `POST /v1/messages/count_tokens`)."""

    async def count_tokens(self, request: ProviderRequest) -> int: ...


class PatchStream(Protocol):
    """An open upstream response: batches of patches, one batch per upstream read."""

    def __aiter__(self) -> AsyncIterator[list[Patch]]: ...

    async def aclose(self) -> None:
        """Close the upstream response (the provider stops generating). Idempotent."""


class ProviderAdapter(Protocol):
    name: str

    async def open_stream(self, request: ProviderRequest) -> PatchStream: ...

    def ready(self) -> bool:
        """Configured and usable (credentials present); shown by /readyz."""

    async def generate(
        self,
        messages: Sequence[Message],
        /,
        *,
        model: str,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        **options: Any,
    ) -> Message:
        """One request answered whole: the assistant message (reference/foundry-adapters.md), on
        this adapter's `open_stream()`: app/providers/reference.py `generate`, the one body."""
        from app.providers.reference import generate  # the reference helpers build on this module

        return await generate(self, messages, model=model, tools=tools, tool_choice=tool_choice,
                              temperature=temperature, max_tokens=max_tokens, **options)


@contextlib.contextmanager
def mid_stream_errors(provider: str) -> Iterator[None]:
    """Map transport failures while reading a body to UpstreamError (after the first event)."""
    try:
        yield
    except GatewayError:
        raise
    except CONNECTION_ERRORS as exc:
        raise read_error(exc, provider) from exc


def incomplete(provider: str) -> UpstreamError:
    """The body ended before the provider said it finished."""
    return UpstreamError(f"{provider}: the stream ended before the provider finished", code="upstream_incomplete",
                         retryable=True, provider=provider)


async def response_events(stream: AsyncIterable[list[Patch]], accumulator: Accumulator,
                          ) -> AsyncGenerator[list[StreamEvent], None]:
    """One provider response: its patches through the accumulator, a batch of canonical events
    per upstream read. Raises the stream's GatewayError (after the events that came before it
    in the same read), and `upstream_incomplete` when the body ended before the provider finished.
    The run's step pump, `drive()` and the conformance tests all read responses through this."""
    push_all = accumulator.push_all
    async for batch in stream:
        out: list[StreamEvent] = []
        try:
            push_all(batch, out)
        except GatewayError:
            if out:
                yield out
            raise
        del batch  # nothing of this read is held while the next waits (app/routing/stream.py)
        if out:
            yield out
            del out
        if accumulator.completed:  # the provider said it finished: an upstream holding its body open
            break  # after that ([DONE], message_stop) is not waited for (the caller closes the stream)
    if not accumulator.completed:
        raise incomplete(accumulator.provider)


async def released_batches(stream: PatchStream, accumulator: Accumulator, released: Released,
                            ) -> AsyncGenerator[list[StreamEvent], None]:
    """One response's public batches, each event first observed by `released` (reasoning
    blocks' signatures reach its message; their markers are never yielded). Raises what ended
    the response; closes the stream."""
    accumulator.block_ends = True
    observe = released.observe
    try:
        async with contextlib.aclosing(response_events(stream, accumulator)) as batches:
            async for batch in batches:
                for event in batch:
                    observe(event)
                public = [e for e in batch if e.__class__ is not ReasoningBlockEnd]
                if public:
                    yield public
    finally:
        await stream.aclose()


async def to_final(stream: PatchStream, accumulator: Accumulator) -> AsyncGenerator[list[StreamEvent], None]:
    """One response driven to its end: batches of canonical events, the last one `[final]` (ok,
    or the error that ended the response), its message built from the events (app/core/released.py).
    Closes the stream."""
    released = Released(provider=accumulator.provider)
    try:
        async with contextlib.aclosing(released_batches(stream, accumulator, released)) as batches:
            async for batch in batches:
                yield batch
        final = released.final(accumulator)
    except GatewayError as exc:
        final = released.final(accumulator, exc.final_status, error=exc.to_dict())
    yield [final]


async def drive(stream: PatchStream, accumulator: Accumulator, events: list[StreamEvent] | None = None) -> FinalEvent:
    """Drive one response to its final event; `events` collects every event, the final last.
    Used by the judge, `BaseStreamIterator` and the tests' drivers (tests/support.py,
    tests/upstream_fakes.py), so they all exercise this production path."""
    out = events if events is not None else []
    async with contextlib.aclosing(to_final(stream, accumulator)) as batches:
        async for batch in batches:
            out.extend(batch)
    final = out[-1]
    assert isinstance(final, FinalEvent)
    return final
