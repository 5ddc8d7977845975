"""What both facades share: driving a run as batches of canonical events, telling the caller's
tool calls from the gateway's, the facade route class that answers errors in the client's format,
and the request field paths those errors name.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError, model_validator
from starlette.responses import Response

from app.api.access import Caller
from app.api.access import open_run as admit_and_open
from app.api.json_body import JSONBodyRoute
from app.api.middleware import note_refusal
from app.api.readers import events_or_gone
from app.api.responses import JSON, final_status_code
from app.api.schemas import refuse_invalid_unicode
from app.api.sse import SSEResponse
from app.core.errors import GatewayError
from app.core.events import FinalEvent, StreamEvent, ToolCallEvent
from app.pipeline import Gateway, RunHandle, RunSpec
from app.providers.base import ProviderRequest
from app.run import Run
from app.streams.frames import LastFrames
from app.streams.log import StreamLog
from app.validation import ValidatorSpec, check_specs

__all__ = ["ErrorWriter", "FacadeError", "FacadeRoute", "GatewayExtras", "Translator", "answer", "caller_call",
           "failure", "field_path", "forwarded_fields", "lenient", "open_run", "refuse_unknown", "route_responses",
           "run_spec", "translate", "validation_reason"]


_T = TypeVar("_T")


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


class FacadeRoute(JSONBodyRoute):
    """An APIRoute whose errors (bad body, refused field, gateway failure before the stream)
    are answered in the facade's own format instead of the gateway's `{"error": {code, ...}}`.
    Each facade subclasses it with its `writer` and gives it to its APIRouter as `route_class`. Its
    bodies are parsed by orjson (app/api/json_body.py)."""

    writer: ClassVar[ErrorWriter]
    brackets: ClassVar[bool] = True
    """Name list items `messages[0].role` (OpenAI's style) rather than `messages.0.role` (Anthropic's)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        writer, brackets = self.writer, self.brackets

        async def facade_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                message, param = _first_problem(exc.errors(), brackets)
                note_refusal(request.scope, "invalid_request", param, message)
                return writer.request_error(message, param, 400, None)
            except FacadeError as exc:
                note_refusal(request.scope, exc.code, exc.param, exc.message)
                return writer.request_error(exc.message, exc.param, exc.status, exc.code)
            except GatewayError as exc:
                note_refusal(request.scope, exc.code, exc.field if isinstance(exc.field, str) else None, exc.message)
                response = writer.gateway_error(exc)
                response.headers.update(getattr(exc, "headers", None) or {})  # AccessDenied: WWW-Authenticate, x-ratelimit-*
                return response

        return facade_handler


def field_path(loc: Iterable[Any], brackets: bool = True) -> str:
    """`("body", "messages", 0, "content")` -> `messages[0].content` (or `messages.0.content`)."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        if isinstance(part, int) and brackets:
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def validation_reason(exc: ValidationError) -> str:
    """The first problem of a canonical model's ValidationError, as `field: message`."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def _first_problem(errors: Any, brackets: bool) -> tuple[str, str]:
    errors = list(errors)
    if not errors:
        return "invalid request", "body"
    err = errors[0]
    if err.get("type") == "json_invalid":
        return "the request body is not valid JSON", "body"
    # pydantic puts the union member's tag into loc (`function-after[...]`, `str`): drop those.
    loc = [p for p in err.get("loc", ()) if isinstance(p, int) or ("[" not in str(p) and p not in _TAGS)]
    param = field_path(loc, brackets)
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        message = f"unrecognized request argument: {param}"
    return f"{param}: {message}" if not message.startswith(param) else message, param


_TAGS = {"str", "list", "dict", "int", "float", "bool", "none", "literal"}


def refuse_unknown(body: BaseModel, path: str = "", brackets: bool = True) -> None:
    """A translated request carries only the fields the facade knows, at any depth: any other is a
    400 naming it (a same-wire request passes them through instead)."""
    for name in body.model_extra or {}:
        where = f"{path}.{name}" if path else name
        raise FacadeError(f"{where}: unrecognized request argument: {where}", param=where)
    for name in type(body).model_fields:
        value, where = getattr(body, name), f"{path}.{name}" if path else name
        if isinstance(value, BaseModel):
            refuse_unknown(value, where, brackets)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    refuse_unknown(item, f"{where}[{i}]" if brackets else f"{where}.{i}", brackets)


def lenient(convert: Callable[[], _T], passthrough: bool, default: _T) -> _T:
    """`convert()`; on a same-wire request, what cannot be translated is only left out of the
    canonical request (records, validators), since the provider gets the client's own. The
    gateway's own checks of what it carries (a media part that is not what it says, malformed or
    past its bound: 413, 422) hold on every route."""
    try:
        return convert()
    except FacadeError as exc:
        if not passthrough or exc.status != 400:
            raise
        return default


def failure(final: FinalEvent) -> tuple[str, str]:
    """The code and message of a run that did not end ok or blocked."""
    if final.error is None:
        return final.status, "the run failed"
    return final.error["code"], final.error["message"]


def caller_call(run: Run, event: ToolCallEvent) -> bool:
    """A call the client must answer: not a provider-run (server) tool, not one the gateway runs.
    The gateway's tools are offered only under names the request did not declare, so a name the
    gateway runs is never the caller's."""
    return not event.server and not run.tools.runs(event.name)


class Translator(Protocol):
    def feed(self, events: list[StreamEvent]) -> bytes: ...


async def translate(log: StreamLog, translator: Translator) -> AsyncIterator[bytes]:
    """Read the run's log as events (it keeps them: `RunSpec.keep_events`), holding its place (the
    reader owns the run), and yield the translator's bytes for each batch. The stream can also be
    followed and replayed by id. The batch with the final ends the body (`LastFrames`, app/api/sse.py)."""
    # Closed with this generator (the response closes it once it sent the final), not left open for
    # the event loop's finalizer to close in a task of its own.
    async with contextlib.aclosing(log.follow_events(0, hold=True)) as batches:
        async for events in batches:
            out = translator.feed(events)
            if out:
                yield LastFrames(out) if events[-1].__class__ is FinalEvent else out


def run_spec(request: ProviderRequest, extras: GatewayExtras) -> RunSpec:
    """The run of a facade's `request` with the gateway's own options of its body, as /v1/stream
    builds it (validators and chunker checked: 422); `provider_options` win over the options the
    facade carried from the client's fields."""
    check_specs(extras.validators, extras.chunking)
    if extras.provider_options:
        request = replace(request, options={**request.options, **extras.provider_options})
    return RunSpec(request=request, validators=tuple(extras.validators), chunking=extras.chunking,
                   max_steps=extras.max_steps)


async def open_run(caller: Caller, spec: RunSpec, *, body: GatewayExtras, forwards: Iterable[str],
                   held: bool = True) -> tuple[RunHandle, dict[str, str]]:
    """Open the run through the same Gateway and the same admission as /v1/stream (app/api/access.py:
    the key's models, limits, ownership; GatewayError before any event), and give the x-ratelimit-*
    headers. `held`: the response reads the log (not a relayed stream, which has its own bound).
    A refused provider option that the caller sent as a top-level field of `body` (one of the
    facade's `forwards`) is named as that field, which is what the caller wrote."""
    forwarded = forwarded_fields(body, forwards, body.provider_options)
    try:
        return await admit_and_open(caller, replace(spec, keep_events=True, held=held))
    except GatewayError as exc:
        field = exc.field
        prefix, _, key = field.partition(".") if isinstance(field, str) else ("", "", "")
        if prefix == "provider_options" and key.split(".")[0] in set(forwarded):
            raise FacadeError(exc.message.replace(f"provider_options.{key}", key), param=key,
                              status=400 if exc.status == 422 else exc.status, code=exc.code) from None
        raise


def forwarded_fields(body: BaseModel, names: Iterable[str], provider_options: dict[str, Any]) -> list[str]:
    """The client fields passed on as provider options (set, and not overridden by provider_options)."""
    return [n for n in names if getattr(body, n) is not None and n not in provider_options]


_ERROR_STATUSES = (400, 401, 403, 404, 413, 429, 502, 503, 504)


def route_responses(*, answer: str, errors: str, example: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of a facade's POST route: its answer (`answer`: a JSON object, or
    Server-Sent Events), and its errors in the client's format (`errors`, with an `example` body)."""
    ok = {"description": answer, "content": {"application/json": {"schema": {"type": "object"}},
                                             "text/event-stream": {"schema": {"type": "string"}}}}
    error = {"description": errors, "content": {"application/json": {"example": example}}}
    return {200: ok, **{status: error for status in _ERROR_STATUSES}}


async def answer(
    gateway: Gateway,
    request: Request,
    handle: RunHandle,
    *,
    stream: Translator | None,
    build: Callable[[list[StreamEvent], FinalEvent], dict[str, Any]],
    error: Callable[[int, str, str | None], dict[str, Any]],
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The facade's answer to an opened run, a reader of its log: its translated stream (a client
    that leaves cancels the run), or the JSON built from the released events (an error body with
    the run's status when it failed mid-way)."""
    log = handle.log
    headers = {"x-stream-id": log.info.stream_id, **(headers or {})}
    if stream is not None:
        return SSEResponse(translate(log, stream), ping_seconds=gateway.settings.ping_seconds,
                           send_timeout=gateway.settings.send_timeout_seconds, headers=headers,
                           on_disconnect=lambda: handle.cancel("client_gone"))
    events = await events_or_gone(request, handle)
    if events is None:  # the client left (the run is cancelled): nobody reads this answer
        return Response(status_code=499)
    final = events[-1]
    assert isinstance(final, FinalEvent)
    if final.status in ("ok", "blocked"):
        return JSON(build(events, final), headers=headers)
    status = final_status_code(final)
    code, message = failure(final)
    return JSON(error(status, message, code), status_code=status, headers=headers)


class GatewayExtras(BaseModel):
    """The gateway's own options, accepted as extra top-level fields (the SDKs' `extra_body`).
    As on /v1/stream, a string that is not valid Unicode anywhere in the body is refused."""

    validators: list[ValidatorSpec] = Field(
        default_factory=list, max_length=32,
        description="Gateway extra: chunk validators for this request, added to the operator's.")
    chunking: Literal["sentence", "word", "paragraph", "none"] | None = Field(
        default=None, description="Gateway extra: how validated text is cut into chunks.")
    max_steps: int | None = Field(default=None, ge=1, le=100, strict=True,
                                  description="Gateway extra: most provider calls when the gateway runs tools.")
    provider_options: dict[str, Any] = Field(
        default_factory=dict, description="Gateway extra: provider-specific fields, passed to the provider as given.")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        refuse_invalid_unicode(data)
        return data
