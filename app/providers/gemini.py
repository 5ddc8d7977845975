"""Google Gemini (`generateContent` / `streamGenerateContent?alt=sse`): request mapping, errors and
the registry builder. The stream normalizer lives in `gemini_stream.py`.

The gateway's own client sends it (app/providers/upstream.py), not the `google-genai` SDK: the SDK's
public streaming call yields typed pydantic objects per chunk (the cost DESIGN.md section 4 measured
and rejected) and has no public raw-bytes variant, and it would add a dependency tree (google-auth,
its own httpx) for one POST. The REST call is small: `POST {base}/v1beta/models/{model}:
streamGenerateContent?alt=sse` with the key in `x-goog-api-key`. GEMINI_BASE_URL as a bare host
gets `/v1beta`; with a path it is used as given (a proxy prefix, or Vertex AI's
`https://{region}-aiplatform.googleapis.com/v1/projects/{p}/locations/{region}/publishers/google`).

Request mapping decisions: app/providers/gemini_convert.py.
"""

from __future__ import annotations

import base64
import contextlib
import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
import yarl

from app.core import safejson
from app.core.errors import (
    UpstreamError,
)
from app.core.messages import AdapterError
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.config import ProviderConfig
from app.providers.descriptor import UpstreamRequest
from app.providers.errors import status_error
from app.providers.gemini_convert import gemini_request, messages_to_gemini, tool_choice_to_gemini, tool_specs_to_gemini

__all__ = [
    "GEMINI_BASE_URL",
    "build_gemini",
    "gemini_request",
    "messages_to_gemini",
    "tool_choice_to_gemini",
    "tool_specs_to_gemini",
]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
_STREAM = "streamGenerateContent?alt=sse"


# -- errors: HTTP status and transport -> GatewayError, in one place --------------------------


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
    parsed = yarl.URL(base)
    if parsed.user is not None:  # sent as Basic auth, once (aiohttp refuses a URL's credentials beside a header)
        credentials = f"{parsed.user}:{parsed.password or ''}".encode()
        headers["authorization"] = "Basic " + base64.b64encode(credentials).decode()
        base = str(parsed.with_user(None)).rstrip("/")
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

