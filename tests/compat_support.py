"""Shared by the facade tests: one loopback upstream replaying every recording of
../shared/fixtures in its provider's own API (OpenAI chat, Responses, Anthropic, Gemini), the
gateway configured against it, and what each recording must give in canonical terms (text,
reasoning, the caller's tool calls, stop reason, usage), read off its `.expected.json`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.errors import GatewayError, RequestError
from app.main import create_app
from app.providers.openai_responses_stream import SUMMARY_PART_SEPARATOR
from app.settings import Settings
from tests import test_anthropic_stream, test_gemini_stream, test_openai_responses_stream
from tests.support import Recording, recordings, serving
from tests.upstream_fakes import paced

__all__ = ["ALL_RECORDINGS", "Expect", "LockedAdapter", "PickyAdapter", "RecordedUpstream", "expect",
           "facade_gateway", "model_of", "settings_for"]

ALL_RECORDINGS = [rec for p in ("openai-chat", "openai-responses", "anthropic", "gemini") for rec in recordings(p)]
_PROVIDER = {"openai-chat": "openai", "openai-responses": "openai-responses", "anthropic": "anthropic",
             "gemini": "gemini"}
_BY_KEY = {(r.provider, r.name): r for r in ALL_RECORDINGS}


def model_of(rec: Recording) -> str:
    """The gateway model that replays this recording."""
    return f"{_PROVIDER[rec.provider]}/{rec.name}"


@dataclass
class RecordedUpstream:
    """Every provider API on one loopback server. The upstream model name picks the recording
    (or `status-<N>` answers HTTP N, with Retry-After: 7 on 429). With `hold`, a response sends
    the first half of the recording's frames and then stays open until the client goes; `closed`
    is set when a body generator ends."""

    hold: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """Each request's headers (lower-case names), beside its body in `requests`."""
    queries: list[str] = field(default_factory=list)
    """Each request's query string."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def _reply(self, provider: str, model: str) -> Response:
        if model.startswith("status-"):
            status = int(model.removeprefix("status-"))
            headers = {"retry-after": "7"} if status == 429 else {}
            error = {"message": f"upstream says {status}", "type": "invalid_request_error"}
            body = {"type": "error", "error": error} if provider == "anthropic" else {"error": error}
            return JSONResponse(body, status_code=status, headers=headers)
        return StreamingResponse(self._body(_BY_KEY[(provider, model)].body), media_type="text/event-stream")

    def _body(self, body: bytes) -> AsyncIterator[bytes]:
        if self.hold:  # the answer is not over: the gateway must not end it by itself
            frames = body.split(b"\n\n")
            body = b"\n\n".join(frames[: len(frames) // 2]) + b"\n\n"
        return paced(body, step=397, hold=self.hold, closed=self.closed)

    async def _json_model(self, request: Request, provider: str) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.queries.append(request.url.query)
        return await self._reply(provider, body["model"])

    async def chat(self, request: Request) -> Response:
        return await self._json_model(request, "openai-chat")

    async def responses(self, request: Request) -> Response:
        return await self._json_model(request, "openai-responses")

    async def messages(self, request: Request) -> Response:
        return await self._json_model(request, "anthropic")

    async def gemini(self, request: Request) -> Response:
        self.requests.append(await request.json())
        return await self._reply("gemini", request.path_params["target"].partition(":")[0])

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1beta/models/{target}", self.gemini, methods=["POST"]),
        ])


def settings_for(upstream: str, **kw: Any) -> Settings:
    return Settings(openai_api_key="sk-test-upstream", openai_base_url=f"{upstream}/v1",
                    anthropic_api_key="sk-ant-test-upstream", anthropic_base_url=upstream,
                    gemini_api_key="gemini-test-upstream", gemini_base_url=upstream,
                    upstream_max_retries=0, **kw)


class LockedAdapter:
    """A provider that refuses the credentials (as a key check would), to see the 401 mapping."""

    name = "locked"

    def ready(self) -> bool:
        return True

    async def open_stream(self, request: Any) -> Any:
        raise GatewayError("invalid API key", code="invalid_api_key", status=401)


class PickyAdapter:
    """A provider that takes no options at all, refusing them as the gateway's allow-list does."""

    name = "picky"

    def ready(self) -> bool:
        return True

    async def open_stream(self, request: Any) -> Any:
        key = next(iter(request.options), "none")
        raise RequestError(f"provider_options.{key} is not allowed on this gateway", status=422,
                           code="option_not_allowed", field=f"provider_options.{key}")


@contextlib.asynccontextmanager
async def facade_gateway(
    upstream: RecordedUpstream | None = None, *, adapters: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[str]:
    """The recorded upstream and the gateway configured against it, both on loopback: the
    gateway's base URL."""
    upstream = upstream or RecordedUpstream()
    async with serving() as servers:
        up = await servers.add(upstream.app())
        yield await servers.add(create_app(settings_for(up, **settings), adapters=adapters))


@dataclass(frozen=True)
class Expect:
    model: str
    """The gateway model that replays the recording."""
    name: str
    """The recording, for assertion messages."""
    ids: bool
    """Whether the calls carry the provider's ids (Gemini gives none; the gateway makes them)."""
    text: str
    reasoning: str
    calls: list[tuple[str | None, str, dict[str, Any]]]
    """The caller's tool calls: (id or None where the provider gives none, name, arguments)."""
    stop: str
    usage: dict[str, int]
    error: bool

    def usage_of(self, *fields: str) -> dict[str, int]:
        """The expected usage, limited to the fields a client's usage shape has."""
        return {f: self.usage[f] for f in fields}


def expect(rec: Recording) -> Expect:
    """What the recording must give, in canonical terms, from its `.expected.json`."""
    exp = rec.expected
    text, reasoning = exp["text"] or "", exp["reasoning"] or ""
    if rec.provider == "openai-chat":
        u = exp["usage"] or {}
        usage = {"input_tokens": u.get("prompt_tokens", 0), "output_tokens": u.get("completion_tokens", 0),
                 "cache_read_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                 "cache_write_tokens": 0,
                 "reasoning_tokens": (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)}
        calls = [(c["id"], c["name"], json.loads(c["arguments"] or "{}")) for c in exp["tool_calls"]]
        stop = "content_filter" if exp["refusal"] else (exp["finish_reason"] or "stop")
        text += exp["refusal"] or ""
    elif rec.provider == "anthropic":
        usage = test_anthropic_stream.canonical_usage(exp)
        calls = [(c["id"], c["name"], test_anthropic_stream.expected_arguments(c)) for c in exp["tool_calls"]]
        stop = test_anthropic_stream.EXPECTED_STOP[exp["finish_reason"]]
    elif rec.provider == "gemini":
        usage = test_gemini_stream.canonical_usage(exp["usage"])
        calls = [(None, c["name"], test_gemini_stream.expected_arguments(c)) for c in exp["tool_calls"]]
        stop = "tool_calls" if calls else "stop"
    else:
        usage = test_openai_responses_stream.canonical_usage(exp["usage"])
        calls = [(c["id"], c["name"], json.loads(c["arguments"])) for c in exp["tool_calls"]]
        reasoning = SUMMARY_PART_SEPARATOR.join(exp["reasoning_summary_parts"])
        stop = "tool_calls" if calls else "stop"
    return Expect(model=model_of(rec), name=repr(rec), ids=rec.provider != "gemini", text=text, reasoning=reasoning,
                  calls=calls, stop=stop, usage=usage, error=bool(exp.get("errors")))
