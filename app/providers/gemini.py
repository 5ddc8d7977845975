"""Google Gemini (`generateContent` / `streamGenerateContent?alt=sse`): request mapping, errors,
the adapter and the registry builder. The stream normalizer lives in `gemini_stream.py`.

The injected client is an `httpx2.AsyncClient`, not the `google-genai` SDK: the SDK's public
streaming call yields typed pydantic objects per chunk (the cost DESIGN.md section 4 measured and
rejected) and has no public raw-bytes variant, and it would add a dependency tree (google-auth,
its own httpx) for one POST. The REST call is small: `POST {base}/v1beta/models/{model}:
streamGenerateContent?alt=sse` with the key in `x-goog-api-key`. GEMINI_BASE_URL as a bare host
gets `/v1beta`; with a path it is used as given (a proxy prefix, or Vertex AI's
`https://{region}-aiplatform.googleapis.com/v1/projects/{p}/locations/{region}/publishers/google`).
An injected client may carry its own auth headers instead of a key (Vertex AI, proxies).

Request mapping decisions: app/providers/gemini_convert.py.
"""

from __future__ import annotations

import base64
import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import httpx2
import orjson

from app.core import safejson
from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamError,
)
from app.core.messages import AdapterError
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, sse_body
from app.providers.config import DEFAULT_LIMITS, ProviderConfig, ReadLimits
from app.providers.descriptor import UpstreamRequest
from app.providers.errors import CONNECTION_ERRORS, status_error, transport_error
from app.providers.gemini_convert import gemini_request, messages_to_gemini, tool_choice_to_gemini, tool_specs_to_gemini
from app.providers.gemini_stream import GeminiNormalizer
from app.providers.http import bounded_body

__all__ = [
    "GEMINI_BASE_URL",
    "GeminiAdapter",
    "build_gemini",
    "gemini_request",
    "messages_to_gemini",
    "tool_choice_to_gemini",
    "tool_specs_to_gemini",
]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
_STREAM = "streamGenerateContent?alt=sse"


# -- errors: HTTP status and transport -> GatewayError, in one place --------------------------


@contextlib.contextmanager
def gemini_errors(provider: str = "gemini") -> Iterator[None]:
    """Transport failures before the body: timeouts 504, anything else 502 (retryable)."""
    try:
        yield
    except GatewayError:
        raise
    except AdapterError as exc:
        raise RequestError(f"{provider}: {exc}", provider=provider, field=exc.field) from exc
    except CONNECTION_ERRORS as exc:
        raise transport_error(exc, provider) from exc


def error_answer(status: int, headers: Mapping[str, str], body: bytes, provider: str) -> UpstreamError:
    """An HTTP error answer (DESIGN.md section 1): 400 with the upstream message, bad key (Gemini
    says 400 API_KEY_INVALID) / 401 / 403 -> 502, 404, 429 with Retry-After, 5xx -> 502."""
    try:
        error = safejson.loads(body).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {}
    message = error.get("message") or body[:300].decode("utf-8", "replace") or f"HTTP {status}"
    details = [d for d in error.get("details") or () if isinstance(d, dict)]
    reasons = {d.get("reason") for d in details}
    return status_error(status, message, provider=provider, retry_after=_retry_after(headers, details),
                        upstream_code=error.get("status"), credentials_refused="API_KEY_INVALID" in reasons)


def _retry_after(headers: Mapping[str, str], details: list[dict[str, Any]]) -> str | None:
    """Retry-After, else google.rpc.RetryInfo's `retryDelay` ("12.5s") rounded up to seconds."""
    if headers.get("retry-after"):
        return headers["retry-after"]
    for detail in details:
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            with contextlib.suppress(ValueError):
                return str(math.ceil(float(delay[:-1])))
    return None


# -- the request on the wire ----------------------------------------------------------------


def endpoint(api_key: str | None, base_url: str | None) -> tuple[str, dict[str, str]]:
    """(the API's base URL, the headers of every request) for a key and GEMINI_BASE_URL."""
    headers = {"content-type": "application/json"}
    if api_key:
        headers["x-goog-api-key"] = api_key
    # A bare host gets the Gemini API's version; a URL with a path is used as given
    # (".../v1beta", a proxy's prefix, Vertex AI's ".../locations/{l}/publishers/google").
    base = (base_url or GEMINI_BASE_URL).rstrip("/")
    parsed = httpx2.URL(base)
    if parsed.userinfo:  # sent as Basic auth, once (aiohttp refuses a URL's credentials beside a header)
        credentials = f"{parsed.username}:{parsed.password}".encode()
        headers["authorization"] = "Basic " + base64.b64encode(credentials).decode()
        base = str(parsed.copy_with(userinfo=b"")).rstrip("/")
    return (base if urlsplit(base).path else f"{base}/v1beta"), headers


def model_url(base: str, model: str, method: str) -> str:
    name = model.removeprefix("models/")
    if not name or "/" in name:
        raise AdapterError(f"not a Gemini model name: {model!r}")
    return f"{base}/models/{quote(name, safe='-._~')}:{method}"


def upstream_request(request: ProviderRequest, config: ProviderConfig, *, provider: str = "gemini") -> UpstreamRequest:
    """The streamed generateContent request of the descriptor (app/providers/upstream.py)."""
    base, headers = endpoint(config.secret("gemini_api_key"), config.secret("gemini_base_url"))
    url = model_url(base, request.model, _STREAM)  # the model's name checked first
    return UpstreamRequest(url=url, body=orjson.dumps(gemini_request(request, provider=provider)), headers=headers)


# -- the adapter ------------------------------------------------------------------------------


class GeminiAdapter(ProviderAdapter):
    """Gemini through an injected `httpx2.AsyncClient`; streams are read as raw bytes."""

    def __init__(
        self,
        client: httpx2.AsyncClient,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "gemini",
        owns_client: bool = False,
        limits: ReadLimits = DEFAULT_LIMITS,
    ) -> None:
        self.name = name
        self._client = client
        self._limits = limits
        self._base, self._headers = endpoint(api_key, base_url)
        self._owns_client = owns_client

    def ready(self) -> bool:
        return True  # built only with a key or an injected client (build_gemini)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def url(self, model: str, method: str) -> str:
        return model_url(self._base, model, method)

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        """Send the request; raise GatewayError for anything known before the body starts.

        One send path for every client, injected or built: `client.send(request, stream=True)`,
        never following a redirect (the request carries the key: DESIGN.md section 4).
        """
        with gemini_errors(self.name):
            url = self.url(request.model, _STREAM)  # the model's name checked first
            body = orjson.dumps(gemini_request(request, provider=self.name))
            client = self._client
            headers = {**self._headers, **request.trace_headers} if request.trace_headers else self._headers
            response = await client.send(client.build_request("POST", url, content=body, headers=headers),
                                         stream=True, follow_redirects=False)
            if response.status_code >= 300:
                payload = await bounded_body(response, self._limits.max_body_bytes)
                raise error_answer(response.status_code, response.headers, payload, self.name)
        return await sse_body(response, GeminiNormalizer(provider=self.name), provider=self.name, limits=self._limits)


# -- registry builder -------------------------------------------------------------------------


def build_gemini(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`gemini` from GEMINI_API_KEY / GOOGLE_API_KEY and GEMINI_BASE_URL on the gateway's own client
    (an injected clients["gemini"] `aiohttp.ClientSession`, never closed by the adapter, else a
    session of its own)."""
    key = config.secret("gemini_api_key")
    if not key:
        return {}
    # The gateway's own aiohttp client (app/providers/upstream.py); app/routing retries.
    from app.providers.gemini_spec import GEMINI
    from app.providers.upstream import HttpAdapter

    return {"gemini": HttpAdapter(GEMINI, config, session=clients.get("gemini"))}

