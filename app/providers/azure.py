"""Azure OpenAI (`azure/<deployment>` Chat Completions, `azure-responses/<deployment>` Responses).

The OpenAI wire (openai_chat.py's and openai_responses.py's request mapping and normalizers; a
drop-in facade of that wire passes its client's request through) at Azure's URLs (cloud_urls.py:
`AZURE_OPENAI_ENDPOINT`, the deployment paths with `OPENAI_API_VERSION`, else the v1 API). The
credential is `AZURE_OPENAI_API_KEY` in the `api-key` header, else a Microsoft Entra ID bearer from
azure-identity's `DefaultAzureCredential` (scope `https://cognitiveservices.azure.com/.default`).
Azure's stream adds `prompt_filter_results` chunks with empty `choices` and per-choice
`content_filter_results`, which the Chat normalizer reads as no answer; a content-filter stop is
`content_filter`. An answer refused for its prompt (HTTP 400, code `content_filter`) is
`upstream_blocked`, the gateway's word for a provider's refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson

from app.core import safejson
from app.core.errors import UpstreamBlocked, UpstreamError
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.cloud_auth import ApiKeyHeader, AzureBearer
from app.providers.cloud_urls import azure_url
from app.providers.config import ProviderConfig, ReadLimits
from app.providers.descriptor import RequestAuth, UpstreamRequest
from app.providers.errors import status_error
from app.providers.openai_chat import stream_params
from app.providers.openai_chat_stream import ChatChunkNormalizer
from app.providers.openai_responses import responses_request
from app.providers.openai_responses_stream import ResponsesNormalizer
from app.providers.passthrough import passthrough_for
from app.providers.sse import SSEDecoder
from app.providers.upstream import Call, HttpAdapter, Plan

__all__ = ["azure_plan", "build_azure", "build_azure_responses", "error_answer"]

Api = Literal["chat", "responses"]
_NAMES: dict[Api, str] = {"chat": "azure", "responses": "azure-responses"}


def azure_plan(*, endpoint: str, api_version: str | None, api: Api, limits: ReadLimits) -> Plan:
    """The plan of one request (`HttpAdapter` sends it)."""
    provider = _NAMES[api]

    def plan(request: ProviderRequest) -> Call:
        url = azure_url(endpoint, request.model, api=api, api_version=api_version)
        body: dict[str, Any]
        if api == "chat":
            passthrough = passthrough_for(request.passthrough, "openai-chat")
            if passthrough is not None:
                body = passthrough.wire_body(request.model, request.options)
                body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
            else:
                body = stream_params(request, include_usage=True)
            normalizer: Any = ChatChunkNormalizer(provider=provider)
        else:
            passthrough = passthrough_for(request.passthrough, "openai-responses")
            body = (passthrough.wire_body(request.model, request.options) if passthrough is not None
                    else responses_request(request, provider=provider))
            normalizer = ResponsesNormalizer(provider=provider)
        return Call(request=UpstreamRequest(url=url, body=orjson.dumps(body), headers={"content-type": "application/json"}),
                         decoder=SSEDecoder.bounded(limits), normalizer=normalizer,
                         relay=passthrough is not None and passthrough.relay)

    return plan


def error_answer(status: int, headers: Mapping[str, str], body: bytes, provider: str) -> UpstreamError | UpstreamBlocked:
    """Azure's OpenAI-shaped error answer; a prompt refused by the content filter is a block."""
    try:
        error = safejson.loads(body).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        error = {}
    error = error if isinstance(error, dict) else {}
    message = str(error.get("message") or body[:300].decode("utf-8", "replace") or f"HTTP {status}")
    code = error.get("code")
    if status == 400 and code == "content_filter":
        return UpstreamBlocked(f"{provider}: {message}", provider=provider, block_reason="content_filter")
    return status_error(status, message, provider=provider, retry_after=headers.get("retry-after"),
                        upstream_code=code if isinstance(code, (str, int)) else None,
                        request_id=headers.get("apim-request-id") or headers.get("x-request-id"))


def _build(config: ProviderConfig, clients: Mapping[str, Any], api: Api) -> dict[str, ProviderAdapter]:
    """One of the two providers when AZURE_OPENAI_ENDPOINT is set: with AZURE_OPENAI_API_KEY, or Entra
    ID through azure-identity (clients["azure-auth"] injects the auth, clients[name] the client)."""
    endpoint = config.secret("azure_openai_endpoint")
    if endpoint is None:
        return {}
    name = _NAMES[api]
    key = config.secret("azure_openai_api_key")
    injected = clients.get("azure-auth")
    auth: RequestAuth = injected or (ApiKeyHeader(header="api-key", key=key) if key else AzureBearer.default())
    plan = azure_plan(endpoint=endpoint, api_version=config.secret("openai_api_version"), api=api, limits=config.limits)
    closing = None if injected is not None else getattr(auth, "aclose", None)
    from app.providers.cloud_spec import AZURE, AZURE_RESPONSES

    descriptor = AZURE if api == "chat" else AZURE_RESPONSES
    return {name: HttpAdapter(descriptor, config, plan=plan, auth=auth, session=clients.get(name), closing=closing)}


def build_azure(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    return _build(config, clients, "chat")


def build_azure_responses(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    return _build(config, clients, "responses")
