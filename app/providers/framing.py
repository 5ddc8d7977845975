"""Framing as a seam: bytes -> provider events (a `FrameDecoder`), then events -> patches (the
provider's `StreamNormalizer`), for any framing (DESIGN.md section 4).

A `FrameDecoder[E]` is incremental and pure: `feed(chunk)` returns the events the bytes complete
(bytes may be split anywhere), `flush()` those the end of the body completes, `encode(event)` one
event again as its provider sent it (the same-wire relay, DESIGN.md section 10). Every decoder is
bounded by the `ReadLimits` it is built with: a line, an event, a frame past its cap, and more than
`max_idle_lines` frames that carry nothing (SSE blank and comment lines; an event-stream frame with
no payload) raise `FrameLimitExceeded`, which ends the stream with `upstream_protocol_error`.
The SSE decoder (app/providers/sse.py) is one; an AWS event-stream decoder (binary frames with
CRCs, e.g. on botocore's public `botocore.eventstream.EventStreamBuffer`) or an NDJSON one fit
the same protocol: events of their own type, a normalizer typed on them.

`FramePatchStream` is the one pump: it reads the body's chunks, feeds the decoder, feeds each
event to the normalizer and yields a batch of patches per read; a read that completes no event
(a decompressed piece, a partial frame) yields the event loop, so a fast upstream never starves it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

from app.core.errors import GatewayError, UpstreamError
from app.core.patches import Patch, Relay
from app.providers.config import DEFAULT_LIMITS, ReadLimits

__all__ = ["FrameDecoder", "FrameLimitExceeded", "FramePatchStream", "StreamNormalizer"]

E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)


class FrameLimitExceeded(ValueError):
    """A line, event or frame past the decoder's cap, or too many frames that carry nothing."""


class FrameDecoder(Protocol[E]):
    """Bytes -> provider events, incrementally; bounded (module docstring)."""

    def feed(self, chunk: bytes) -> list[E]: ...

    def flush(self) -> list[E]:
        """The end of the body: the events it completes (or FrameLimitExceeded / nothing)."""

    def encode(self, event: E) -> bytes:
        """The event as its provider framed it (the same-wire relay)."""


class StreamNormalizer(Protocol[E_contra]):
    """Provider events -> normalized patches. Pure: no I/O, one instance per response."""

    def feed(self, event: E_contra, out: list[Patch]) -> None: ...

    def finish(self, out: list[Patch]) -> None:
        """The body ended. Emit the closing patches, or raise UpstreamError when cut short."""


class FramePatchStream:
    """A provider's body, parsed once: bytes -> decoder -> normalizer -> patch batches.

    `read_errors` maps a transport failure while reading (app/providers/errors.py); a decoder's
    `FrameLimitExceeded` ends the stream with `upstream_protocol_error`. `relay`: each event also
    as a `Relay` patch (its frame re-encoded), after the patches made from it."""

    __slots__ = ("_chunks", "_decoder", "_normalizer", "_close", "_provider", "_closed", "_relay", "_read_errors")

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        normalizer: StreamNormalizer[E],
        *,
        close: Callable[[], Awaitable[None]],
        provider: str,
        decoder: FrameDecoder[E] | None = None,
        limits: ReadLimits = DEFAULT_LIMITS,
        relay: bool = False,
        read_errors: Callable[[str], contextlib.AbstractContextManager[None]] | None = None,
    ) -> None:
        if decoder is None:
            from app.providers.sse import SSEDecoder  # the default framing

            self._decoder: FrameDecoder[Any] = SSEDecoder.bounded(limits)
        else:
            self._decoder = decoder
        self._relay = relay
        self._chunks = chunks
        self._normalizer = normalizer
        self._close = close
        self._provider = provider
        self._closed = False
        self._read_errors = read_errors or _no_mapping

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        decoder = self._decoder
        try:
            with self._read_errors(self._provider), _decoding_limits(self._provider):
                async for chunk in self._chunks:
                    events = decoder.feed(chunk)
                    del chunk  # none of this read is held while the next waits (app/routing/stream.py)
                    if not events:  # reads that end no event (decompressed without I/O) yield the loop
                        await asyncio.sleep(0)
                        continue
                    out: list[Patch] = []
                    try:
                        self._feed(events, out)
                    except GatewayError:
                        if out:  # what arrived in the same read before the failure still counts
                            yield out
                        raise
                    del events
                    if out:
                        yield out
                        del out
                out = []
                try:
                    self._feed(decoder.flush(), out)
                    self._normalizer.finish(out)
                except GatewayError:
                    if out:
                        yield out
                    raise
                if out:
                    yield out
        finally:
            await self.aclose()

    def _feed(self, events: list[Any], out: list[Patch]) -> None:
        feed = self._normalizer.feed
        if not self._relay:
            for event in events:
                feed(event, out)
            return
        encode = self._decoder.encode
        for event in events:
            feed(event, out)
            out.append(Relay(frame=encode(event)))

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                await self._close()


@contextlib.contextmanager
def _no_mapping(provider: str) -> Iterator[None]:
    yield


@contextlib.contextmanager
def _decoding_limits(provider: str) -> Iterator[None]:
    try:
        yield
    except FrameLimitExceeded as exc:
        raise UpstreamError(f"{provider}: {exc}", code="upstream_protocol_error", provider=provider) from None
