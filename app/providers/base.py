"""What every provider module implements, and the shared machinery to implement it with.

A provider module is three things: request mapping (Foundry -> wire), a `StreamNormalizer`
(provider events, decoded by its framing, -> normalized patches: app/providers/framing.py) and an
adapter whose `open_stream()` performs the HTTP request (app/providers/upstream.py: `HttpAdapter`,
on the gateway's own aiohttp client; the SDK adapters for injected SDK clients).
`open_stream()` raises `GatewayError` for failures known
before the first byte of the body (they become HTTP errors); the returned `PatchStream` raises
`GatewayError` for failures after it (they become `final{status: "error"}`). `generate()` (one
request answered whole, reference/foundry-adapters.md) is written once, here, on `open_stream()`:
an adapter gets it by naming `ProviderAdapter` as its base.
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

import httpx2

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError, UpstreamError
from app.core.events import FinalEvent, ReasoningBlockEnd, StreamEvent
from app.core.messages import AdapterError, Message, ToolSpec, assistant_message
from app.core.patches import Patch
from app.core.released import Released
from app.providers.config import DEFAULT_LIMITS, ReadLimits
from app.providers.errors import CONNECTION_ERRORS, read_error
from app.providers.framing import FramePatchStream, StreamNormalizer
from app.providers.http import bounded_body
from app.providers.passthrough import Passthrough

__all__ = [
    "RAW_STREAM",
    "PatchStream",
    "ProviderAdapter",
    "ProviderRequest",
    "SSEPatchStream",
    "StreamNormalizer",
    "TokenCounter",
    "ToolChoice",
    "drive",
    "incomplete",
    "mid_stream_errors",
    "raw_stream",
    "response_events",
    "to_final",
    "sse_body",
]

RAW_STREAM: Any = {"headers": {"X-Stainless-Raw-Response": "stream"}, "max_retries": 0, "follow_redirects": False}
"""`options=` for the official SDKs' documented `client.post(path, cast_to=httpx2.Response, ...)`:
their own marker (`_constants.RAW_RESPONSE_HEADER`) for "hand me the response unread". The SDK
keeps auth, base URL and typed errors; we skip its typed-params transform, a per-request CPU cost
that buys nothing here (bench/run.py, docs/performance.md), and parse the bytes once. `max_retries: 0`: streamed requests are
retried by the routing layer (app/routing), which counts each attempt once and falls back.
`follow_redirects: False`: the request carries the gateway's credential, which must not follow a
redirect to another origin (DESIGN.md section 4), whatever the injected client's own setting."""



def raw_stream(headers: Mapping[str, str] | None, passthrough: Passthrough | None = None) -> Any:
    """`RAW_STREAM`, with the request's extra headers (its trace context) when it has any, and a
    passthrough's namespace headers and query string."""
    if passthrough is not None:
        headers = {**(headers or {}), **passthrough.headers}
    if not headers and (passthrough is None or not passthrough.query):
        return RAW_STREAM
    options = {**RAW_STREAM, "headers": {**RAW_STREAM["headers"], **(headers or {})}}
    if passthrough is not None and passthrough.query:
        options["params"] = dict(passthrough.query)
    return options


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
    options: dict[str, Any] = field(default_factory=dict)
    """`provider_options` from the request: wire extras the caller asked for explicitly."""
    stop: tuple[str, ...] = ()
    """Stop sequences: OpenAI `stop`, Anthropic `stop_sequences`, Gemini `stopSequences`."""
    parallel_tool_calls: bool | None = None
    """False: at most one tool call per response (OpenAI `parallel_tool_calls`, Anthropic
    `tool_choice.disable_parallel_tool_use`); None: the provider's default."""
    output_schema: dict[str, Any] | None = None
    """Structured output: the answer is JSON following this JSON Schema (Anthropic
    `output_config.format`, OpenAI `response_format` / `text.format`, Gemini `responseJsonSchema`)."""
    cache_control: dict[str, Any] | None = None
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
        """One request answered whole: the assistant message (reference/foundry-adapters.md).

        The run's own path (`open_stream`, the accumulator, the released message), so every
        provider answers as it streams; further keywords are `provider_options`. `temperature`
        is 0 unless given; `messages` and `stream` are not the caller's to set. Raises the
        GatewayError that ended the response.
        """
        if "messages" in options or "stream" in options:
            raise AdapterError("generate() takes the messages as its first argument and does not stream")
        if not model:
            raise AdapterError("model is required")
        request = ProviderRequest(model=model, messages=tuple(messages), tools=tuple(tools), tool_choice=tool_choice,
                                  temperature=temperature, max_tokens=max_tokens, options=options)
        released = Released(provider=self.name)
        stream = await self.open_stream(request)
        accumulator = Accumulator(model=model, provider=self.name, block_ends=True)
        async with contextlib.aclosing(_released_batches(stream, accumulator, released)) as batches:
            async for _ in batches:
                pass
        message = released.message()
        return assistant_message(message.content, message.tool_calls, message.reasoning)


@contextlib.contextmanager
def mid_stream_errors(provider: str) -> Iterator[None]:
    """Map transport failures while reading a body to UpstreamError (after the first event)."""
    try:
        yield
    except GatewayError:
        raise
    except CONNECTION_ERRORS as exc:
        raise read_error(exc, provider) from exc


SSEPatchStream = FramePatchStream
"""The pump with its default framing (SSE): app/providers/framing.py."""


async def sse_body(response: httpx2.Response, normalizer: StreamNormalizer[Any], *, provider: str,
                   limits: ReadLimits = DEFAULT_LIMITS, relay: bool = False) -> FramePatchStream:
    """An open streaming response as patches.

    A JSON body where an event stream was asked for (a proxy that dropped `stream`, Gemini's
    `alt=sse` ignored) is an upstream error before the first event, with the body's start (read
    no further than that).
    """
    if response.headers.get("content-type", "").startswith("application/json"):
        with mid_stream_errors(provider):
            text = (await bounded_body(response, 500)).decode("utf-8", "replace")
        raise UpstreamError(f"{provider}: expected an event stream, got JSON: {text}", provider=provider)
    chunks = response.aiter_bytes()  # decoded as the response says (gzip, br), in pieces of at most 1 MiB
    return FramePatchStream(chunks, normalizer, close=response.aclose, provider=provider, limits=limits, relay=relay,
                            read_errors=mid_stream_errors)


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
        if out:
            yield out
    if not accumulator.completed:
        raise incomplete(accumulator.provider)


async def _released_batches(stream: PatchStream, accumulator: Accumulator, released: Released,
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
        async with contextlib.aclosing(_released_batches(stream, accumulator, released)) as batches:
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
