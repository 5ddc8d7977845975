"""The original design's helpers as a Python API (../shared/reference/foundry-adapters.md), written
once on the path the gateway runs: a provider adapter's `open_stream()` (the gateway's own aiohttp
client, app/providers/upstream.py), the provider's frame decoder and normalizer, the accumulator.
No SDK is involved; nothing here is on the gateway's request path.

- `generate(adapter, messages, model=...)`: one request answered whole, the assistant message.
  Every adapter's `generate()` method is this function (app/providers/base.py), so a provider
  answers `generate()` exactly as it streams: `temperature` 0 unless given, `messages` and `stream`
  not the caller's, further keywords are `provider_options`; raises the GatewayError that ended
  the response.
- `BaseStreamIterator`: canonical events (`async for`) from a chunk source: a subclass gives
  `_get_next_chunk()` (a batch of patches, None at the end); the accumulator makes the events and
  the iterator closes itself after the final event, so the source's resources are released.
- `AdapterStreamIterator(adapter, request)`: the events of one request through an adapter; a
  failure (before the body or mid-way) is the final event's error, as in a gateway run.
- `MockStreamIterator(scenario)`: the mock provider's scenarios (`simple`, `tool_call`, ...), no network.
- `replay_stream(iterator)`: an iterator drained into a list, the same list on every replay.
- `openai_adapter(api_key, base_url=...)`: an OpenAI Chat (or compatible server's) adapter on the
  gateway's own client, for the two above (the reference's `OpenAIAdapter`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import aiohttp
from pydantic import SecretStr

from app.core.accumulator import Accumulator
from app.core.events import FinalEvent, StreamEvent
from app.core.messages import AdapterError, Message, ToolSpec, assistant_message
from app.core.patches import Patch
from app.core.released import Released
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, ToolChoice, released_batches, to_final
from app.providers.config import ProviderConfig
from app.providers.mock import arithmetic, conversation_chunks
from app.providers.openai_wire import OPENAI_BASE_URL

__all__ = ["AdapterStreamIterator", "BaseStreamIterator", "MockStreamIterator", "generate", "openai_adapter",
           "replay_stream"]


async def generate(adapter: ProviderAdapter, messages: Sequence[Message], /, *, model: str,
                   tools: Sequence[ToolSpec] = (), tool_choice: ToolChoice | None = None, temperature: float = 0.0,
                   max_tokens: int | None = None, **options: Any) -> Message:
    """One request answered whole through `adapter` (module docstring)."""
    if "messages" in options or "stream" in options:
        raise AdapterError("generate() takes the messages as its first argument and does not stream")
    if not model:
        raise AdapterError("model is required")
    request = ProviderRequest(model=model, messages=tuple(messages), tools=tuple(tools), tool_choice=tool_choice,
                              temperature=temperature, max_tokens=max_tokens, options=options)
    released = Released(provider=adapter.name)
    stream = await adapter.open_stream(request)
    accumulator = Accumulator(model=model, provider=adapter.name, block_ends=True)
    async with contextlib.aclosing(released_batches(stream, accumulator, released)) as batches:
        async for _ in batches:
            pass
    message = released.message()
    return assistant_message(message.content, message.tool_calls, message.reasoning)


class _ChunkSource:
    """A `BaseStreamIterator`'s chunks as a patch stream."""

    def __init__(self, next_chunk: Callable[[], Awaitable[list[Patch] | None]]) -> None:
        self._next_chunk = next_chunk

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        while (chunk := await self._next_chunk()) is not None:
            yield chunk

    async def aclose(self) -> None:
        return None


class BaseStreamIterator:
    """Canonical events from a chunk source (module docstring): subclasses provide
    `_get_next_chunk()`; `close()` releases the source and is called after the final event."""

    def __init__(self, *, model: str, provider: str) -> None:
        self._accumulator = Accumulator(model=model, provider=provider)
        self._events: AsyncIterator[StreamEvent] | None = None
        self.closed = False

    async def _get_next_chunk(self) -> list[Patch] | None:
        raise NotImplementedError

    async def close(self) -> None:
        self.closed = True

    def __aiter__(self) -> BaseStreamIterator:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._events is None:
            self._events = self._run()
        return await self._events.__anext__()

    async def _run(self) -> AsyncGenerator[StreamEvent, None]:
        async with contextlib.aclosing(to_final(_ChunkSource(self._get_next_chunk), self._accumulator)) as batches:
            async for batch in batches:
                for event in batch:
                    if isinstance(event, FinalEvent):
                        await self.close()
                    yield event


class AdapterStreamIterator(BaseStreamIterator):
    """The events of one request through a provider adapter (module docstring); the upstream
    response is opened at the first event and closed with the iterator."""

    def __init__(self, adapter: ProviderAdapter, request: ProviderRequest) -> None:
        super().__init__(model=request.model, provider=adapter.name)
        self._adapter = adapter
        self._request = request
        self._stream: PatchStream | None = None
        self._batches: AsyncIterator[list[Patch]] | None = None

    async def _get_next_chunk(self) -> list[Patch] | None:
        if self._batches is None:
            self._stream = await self._adapter.open_stream(self._request)  # a GatewayError: the final's error
            self._batches = aiter(self._stream)
        return await anext(self._batches, None)

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
        await super().close()


class MockStreamIterator(BaseStreamIterator):
    """Replays a mock scenario as canonical events, the calculator's steps included
    (app/providers/mock.py `conversation_chunks`); the same list on every replay."""

    def __init__(self, scenario: str = "simple", messages: tuple[Message, ...] = (), *,
                 calculator: Callable[[str], str] = arithmetic) -> None:
        super().__init__(model=scenario, provider="mock")
        self._chunks = iter(conversation_chunks(scenario, messages, calculator=calculator))

    async def _get_next_chunk(self) -> list[Patch] | None:
        await asyncio.sleep(0)  # a cooperative turn per chunk, as a network source would give
        return next(self._chunks, None)


async def replay_stream(iterator: BaseStreamIterator) -> list[StreamEvent]:
    """Drain an iterator into a list: the same list on every replay of the same source."""
    return [event async for event in iterator]


def openai_adapter(api_key: str, *, base_url: str = OPENAI_BASE_URL, session: aiohttp.ClientSession | None = None,
                   config: ProviderConfig | None = None) -> ProviderAdapter:
    """OpenAI Chat Completions at `base_url` (a compatible server's too) on the gateway's own
    client: the request built by the gateway's converters, the answer read by its normalizer.
    `session`: an injected `aiohttp.ClientSession` (not closed by the adapter); `config`: timeouts
    and read bounds (the gateway's defaults otherwise). Close the adapter with `aclose()`."""
    from app.providers.openai_chat import build_openai

    base = config or ProviderConfig()
    values = {**base.values, "openai_api_key": SecretStr(api_key), "openai_base_url": base_url}
    return build_openai(replace(base, values=values), {"openai": session} if session is not None else {})["openai"]


