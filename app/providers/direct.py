"""A streamed POST to one SDK endpoint, prepared once: the per-request path of issue 12.

The adapters open every stream through the official SDKs' documented
`client.post(path, body=..., cast_to=httpx2.Response, options=RAW_STREAM)`. Per call, the SDK
rebuilds its options model, deep-copies them, re-parses and merges the base URL, rebuilds and
validates the header set and passes the request through its auth-retry wrapper: measured with
`bench/open_bench.py`, that was ~60% of `Gateway.open` (about 0.4 ms of CPU per request on this
machine, ~0.64 ms per open in all).

`DirectPost` sends what the SDK would send (its URL, its default and auth headers, its timeout,
the same JSON body) from parts computed once per client. When the client's transport for the URL
is the gateway's own (`H1Transport`) with nothing in between (no proxy, auth flow or hooks), the
request's bytes less the body are prepared once too and each call goes straight to the transport
(`_Wire`); a redirect is then handed to the client, which follows it as configured. Otherwise one
`httpx2.Request` per call is sent by the client's own `httpx2.AsyncClient`. A 4xx/5xx answer is
read and raised as the SDK's own typed `APIStatusError`, built as the SDK builds it, so each
adapter's single error mapping applies unchanged. It retries nothing: a streamed request is
retried by the routing layer (app/routing), as `RAW_STREAM`'s `max_retries: 0` already says.

Used only for clients the gateway built itself from a key (`make_client`, `build_anthropic`):
their auth is a static header. An injected client keeps the SDK path (it may carry a token
provider, hooks or a custom transport the gateway cannot see). The Gemini adapter, which has no
SDK, puts its own client's request on `_Wire` the same way, one request line per model (`to`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import anthropic
import httpx2
import openai
import orjson

from app.providers.transport import H1Transport, head, origin

__all__ = ["DirectPost", "anthropic_direct", "openai_direct"]


class DirectPost:
    """`await post(body)` -> the open streaming response (2xx), or raises the SDK's error."""

    __slots__ = ("_http", "_url", "_headers", "_extensions", "_status_error", "_wire")

    def __init__(self, http: httpx2.AsyncClient, *, url: httpx2.URL, headers: httpx2.Headers,
                 timeout: httpx2.Timeout, status_error: Callable[[str, object, httpx2.Response], Exception]) -> None:
        self._http = http
        self._url = url
        self._headers = headers
        self._extensions = {"timeout": timeout.as_dict()}
        self._status_error = status_error
        # The request as the client would send it (its Host and the rest), the body left out:
        # `head()` drops the framing, which `exchange` writes for each body.
        self._wire = _Wire.of(http, httpx2.Request("POST", url, headers=headers, content=b"",
                                                   extensions=self._extensions))

    async def __call__(self, body: Mapping[str, Any]) -> httpx2.Response:
        content = _json(body)
        wire = self._wire
        response = await wire.post(content) if wire is not None else None  # the common case: on the wire
        if response is None:
            request = httpx2.Request("POST", self._url, headers=self._headers, content=content,
                                     extensions=self._extensions)
            response = await self._http.send(request, stream=True)
        elif response.status_code >= 400:  # answered on the wire: the error names what was sent
            response.request = httpx2.Request("POST", self._url, headers=self._headers, content=content)
        if response.status_code >= 400:
            try:
                await response.aread()
            finally:
                await response.aclose()
            message, parsed = _error_body(response)
            raise self._status_error(message, parsed, response)
        return response


class _Wire:
    """The request's bytes, less its body, for a client whose transport for the URL is the
    gateway's own (`H1Transport`) with nothing between them: no proxy, no auth flow, no event
    hooks. What `httpx2.AsyncClient.send` would do for such a request is then only framing and
    bookkeeping (measured: ~40-60 us of each request's CPU and time to first token on this VM,
    `bench/transport_bench.py`): the request goes to the transport directly. A redirect is
    handed back to the client, which follows it as configured. Like the prepared request before
    it, it carries no cookies: an API call needs none (`send` sends none it was not given)."""

    __slots__ = ("_transport", "_origin", "_head", "_request", "_timeout")

    def __init__(self, transport: H1Transport, request: httpx2.Request, timeout: Mapping[str, float | None]) -> None:
        self._transport = transport
        self._origin = origin(request.url)
        self._head = head(request)
        self._request = request
        self._timeout = timeout

    @classmethod
    def of(cls, http: httpx2.AsyncClient, request: httpx2.Request) -> _Wire | None:
        """`request` (a POST, its body left out) on the wire, or None when the client must send it:
        a proxy or another transport for its URL, an auth flow (the client's, or credentials in
        the URL, which `send` turns into Basic auth), event hooks, a scheme the transport refuses."""
        url = request.url
        transport = http._transport_for_url(url)
        hooks = http.event_hooks
        if (type(transport) is not H1Transport or http.auth is not None or hooks["request"] or hooks["response"]
                or url.userinfo or url.raw_scheme not in (b"http", b"https")):
            return None
        return cls(transport, request, request.extensions["timeout"])

    def to(self, url: httpx2.URL) -> _Wire:
        """The same request to another path and query of its origin (Gemini names the model in
        the path): the request line is all that differs."""
        if origin(url) != self._origin:
            raise ValueError(f"{url} is not on the origin of {self._request.url}")
        request = httpx2.Request("POST", url, headers=self._request.headers, content=b"",
                                 extensions=self._request.extensions)
        return _Wire(self._transport, request, self._timeout)

    async def post(self, content: bytes) -> httpx2.Response | None:
        """The response to the request with `content` as its body; None when it was a redirect
        (closed): the client then sends the request itself and follows it as configured."""
        response = await self._transport.exchange(self._origin, self._head, content, self._request, self._timeout)
        if 300 <= response.status_code < 400:
            await response.aclose()
            return None
        return response


def openai_direct(client: openai.AsyncOpenAI, http: httpx2.AsyncClient, path: str) -> DirectPost:
    """The OpenAI SDK's request to `path` (its `auth_headers` hold the key)."""
    def status_error(message: str, body: object, response: httpx2.Response) -> Exception:
        data = body.get("error", body) if isinstance(body, Mapping) else body  # as the SDK's _make_status_error
        return openai.APIStatusError(message, response=response, body=data)

    return _prepared(client, http, path, {**client.default_headers, **client.auth_headers}, status_error)


def anthropic_direct(client: anthropic.AsyncAnthropic, http: httpx2.AsyncClient, path: str) -> DirectPost:
    """The Anthropic SDK's request to `path` (its default headers hold the key)."""
    def status_error(message: str, body: object, response: httpx2.Response) -> Exception:
        return anthropic.APIStatusError(message, response=response, body=body)

    return _prepared(client, http, path, dict(client.default_headers), status_error)


def _prepared(client: openai.AsyncOpenAI | anthropic.AsyncAnthropic, http: httpx2.AsyncClient, path: str,
              headers: Mapping[str, object],
              status_error: Callable[[str, object, httpx2.Response], Exception]) -> DirectPost:
    base = client.base_url  # the SDKs keep it with a trailing slash
    url = base.copy_with(raw_path=base.raw_path + path.lstrip("/").encode())
    timeout = client.timeout if isinstance(client.timeout, httpx2.Timeout) else httpx2.Timeout(client.timeout)
    # As `httpx2.AsyncClient.build_request` merges them: the client's headers, then the SDK's;
    # omitted ones (the SDKs' `Omit` for an unset organization or project) are not sent.
    sent = httpx2.Headers(http.headers)
    sent.update({name: value for name, value in headers.items() if isinstance(value, str)})
    return DirectPost(http, url=url, headers=sent, timeout=timeout, status_error=status_error)


def _json(body: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # an integer past 64 bits in a caller's schema: the standard library takes it
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _error_body(response: httpx2.Response) -> tuple[str, object]:
    """The SDKs' reading of an error answer: the message, and the body (JSON when it parses)."""
    text = response.text.strip()
    try:
        body: object = json.loads(text)
    except ValueError:
        return text or f"Error code: {response.status_code}", text
    return f"Error code: {response.status_code} - {body}", body
