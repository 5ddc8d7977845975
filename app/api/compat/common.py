"""What both facades share: driving a run as batches of canonical events, telling the caller's
tool calls from the gateway's, the facade route class that answers errors in the client's format,
and the request field paths those errors name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, ClassVar, Protocol

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.responses import Response

from app.core.errors import GatewayError
from app.core.events import FinalEvent, StreamEvent, ToolCallEvent
from app.run import Run

__all__ = ["ErrorWriter", "FacadeError", "FacadeRoute", "Translator", "caller_call", "collect", "field_path", "translate"]


class FacadeError(Exception):
    """A request the facade refuses before anything runs (status 400 unless said otherwise)."""

    def __init__(self, message: str, *, param: str | None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code


class ErrorWriter(Protocol):
    """Renders a failure known before the first byte in one client's error format."""

    def request_error(self, message: str, param: str | None, status: int, code: str | None) -> Response: ...

    def gateway_error(self, exc: GatewayError) -> Response: ...


class FacadeRoute(APIRoute):
    """An APIRoute whose errors (bad body, refused field, gateway failure before the stream)
    are answered in the facade's own format instead of the gateway's `{"error": {code, ...}}`.
    Each facade subclasses it with its `writer` and gives it to its APIRouter as `route_class`."""

    writer: ClassVar[ErrorWriter]

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        writer = self.writer

        async def facade_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                message, param = _first_problem(exc.errors())
                return writer.request_error(message, param, 400, None)
            except ValidationError as exc:
                message, param = _first_problem(exc.errors())
                return writer.request_error(message, param, 400, None)
            except FacadeError as exc:
                return writer.request_error(exc.message, exc.param, exc.status, exc.code)
            except GatewayError as exc:
                return writer.gateway_error(exc)

        return facade_handler


def field_path(loc: Iterable[Any]) -> str:
    """`("body", "messages", 0, "content")` -> `messages[0].content`, the way the SDKs' docs write it."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _first_problem(errors: Any) -> tuple[str, str]:
    errors = list(errors)
    if not errors:
        return "invalid request", "body"
    err = errors[0]
    if err.get("type") == "json_invalid":
        return "the request body is not valid JSON", "body"
    # pydantic puts the union member's tag into loc (`function-after[...]`, `str`): drop those.
    loc = [p for p in err.get("loc", ()) if isinstance(p, int) or ("[" not in str(p) and p not in _TAGS)]
    param = field_path(loc)
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        message = f"unrecognized request argument: {param}"
    return f"{param}: {message}" if not message.startswith(param) else message, param


_TAGS = {"str", "list", "dict", "int", "float", "bool", "none", "literal"}


def caller_call(run: Run, event: ToolCallEvent) -> bool:
    """A call the client must answer: not a provider-run (server) tool, not one the gateway runs.
    The gateway's tools are offered only under names the request did not declare, so a name the
    gateway runs is never the caller's."""
    return not event.server and not run.tools.runs(event.name)


class Translator(Protocol):
    def feed(self, events: list[StreamEvent]) -> bytes: ...


async def translate(run: Run, translator: Translator) -> AsyncIterator[bytes]:
    """Drive the run as `/v1/stream` does, through the same log (so the stream can be followed and
    replayed by id), and yield the translator's bytes for each released batch. Closing this
    generator (client gone) closes the run's, which cancels the run and closes the upstream."""
    events: list[StreamEvent] = []
    run.listener = events.append
    frames = run.frames()
    try:
        async for _ in frames:
            if events:
                out = translator.feed(events)
                events.clear()
                if out:
                    yield out
    finally:
        await frames.aclose()


async def collect(run: Run) -> tuple[list[StreamEvent], FinalEvent]:
    """Drive the run to its end without a live reader; every released event, and the final."""
    events: list[StreamEvent] = []
    run.listener = events.append
    final = await run.drain()
    return events, final
