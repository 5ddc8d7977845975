"""How a response reads its run: every way out of the gateway is a reader of the run's log.

A run is a task the gateway owns (app/run_tasks.py); a route only waits for it to open, then
reads its log: the SSE frames (`/v1/stream`, subscriptions), the events (a facade translating
them), or the final alone (a JSON answer). A reader whose client leaves cancels the run when
the caller asked for that (`on_disconnect: "cancel"`, the default). A client that leaves before
the response began cancels its run whatever it asked: it never learned the stream's id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

from app.api.middleware import watch_client
from app.core.events import FinalEvent, StreamEvent
from app.pipeline import RunHandle
from app.run import Run

__all__ = ["events_or_gone", "final_or_gone", "opened"]

T = TypeVar("T")


async def opened(request: Request, handle: RunHandle) -> Run:
    """The run once its log exists, or the error that answers the request (a 4xx/5xx)."""
    opening = handle.opening
    if not await _done_or_gone(request, opening):
        handle.cancel("client_gone")
        await asyncio.wait((opening,))
    return opening.result()


async def final_or_gone(request: Request, handle: RunHandle, *, cancel: bool = True) -> FinalEvent | None:
    """The run's final (a JSON answer's whole content); None when the client left first, having
    cancelled the run if `cancel`."""
    log = handle.log
    if log.final is not None:
        return log.final
    return await _or_gone(request, handle, log.wait_final(), cancel=cancel)


async def events_or_gone(request: Request, handle: RunHandle) -> list[StreamEvent] | None:
    """Every event of the run, `start` to `final`, read as they come (a log that keeps events);
    None when the client left first, having cancelled the run."""

    async def read() -> list[StreamEvent]:
        return [event async for batch in handle.log.follow_events(0, hold=True) for event in batch]

    return await _or_gone(request, handle, read(), cancel=True)


async def _or_gone(request: Request, handle: RunHandle, reading: Coroutine[Any, Any, T], *, cancel: bool) -> T | None:
    result = asyncio.ensure_future(reading)
    if await _done_or_gone(request, result):
        return result.result()
    result.cancel()
    if cancel:
        handle.cancel("client_gone")
    return None


async def _done_or_gone(request: Request, waiting: asyncio.Future[Any]) -> bool:
    """Until `waiting` is done or the client has gone; whether it is done. The client is watched by
    the request's one watcher (`RequestLog.watch_gone`), which the response reading the run goes on
    with; without the middleware's log, by one of its own."""
    if not waiting.done():
        gone, shared = watch_client(request.scope, request.receive)
        try:
            await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not shared:
                gone.cancel()
    return waiting.done()
