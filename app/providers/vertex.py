"""Google Vertex AI (`vertex/<gemini model>`, `vertex/claude-...`): the request plan and the builder.

Gemini on Vertex AI is the Gemini wire (`streamGenerateContent?alt=sse`: gemini.py's request
mapping, gemini_stream.py's normalizer); Claude on Vertex AI is Anthropic's Messages wire on
`streamRawPredict`, the model in the URL and `anthropic_version: vertex-2023-10-16` in the body
(https://docs.anthropic.com/en/api/claude-on-vertex-ai), read by the Anthropic normalizer, and a
Messages request from the Anthropic facade is passed through as its client wrote it. URLs:
cloud_urls.py (`GOOGLE_CLOUD_PROJECT`, `GOOGLE_CLOUD_LOCATION`: a region or `global`,
`VERTEX_BASE_URL`). Credentials: google-auth's Application Default Credentials, a bearer refreshed
before it expires (cloud_auth.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.providers.anthropic_convert import build_anthropic_request
from app.providers.anthropic_stream import AnthropicNormalizer
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.bedrock_invoke import invoke_body
from app.providers.cloud_auth import GoogleBearer
from app.providers.cloud_urls import is_vertex_claude, vertex_url
from app.providers.config import ProviderConfig, ReadLimits
from app.providers.descriptor import UpstreamRequest
from app.providers.gemini import gemini_request
from app.providers.gemini_stream import GeminiNormalizer
from app.providers.passthrough import Wire, passthrough_for
from app.providers.sse import SSEDecoder
from app.providers.upstream import Call, HttpAdapter, Plan

__all__ = ["VERTEX_ANTHROPIC_VERSION", "build_vertex", "vertex_plan"]

VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
DEFAULT_LOCATION = "global"


def wire_for(model: str) -> Wire | None:
    return "anthropic-messages" if is_vertex_claude(model) else None


def vertex_plan(*, project: str, location: str, base_url: str | None, limits: ReadLimits,
                provider: str = "vertex") -> Plan:
    """The plan of one request (`HttpAdapter` sends it): Gemini or Claude by the model."""

    def plan(request: ProviderRequest) -> Call:
        url = vertex_url(request.model, project=project, location=location, base_url=base_url)
        headers = {"content-type": "application/json"}
        if not is_vertex_claude(request.model):
            body = orjson.dumps(gemini_request(request, provider=provider))
            return Call(request=UpstreamRequest(url=url, body=body, headers=headers),
                             decoder=SSEDecoder.bounded(limits), normalizer=GeminiNormalizer(provider=provider))
        passthrough = passthrough_for(request.passthrough, "anthropic-messages")
        wire = (passthrough.wire_body(request.model, request.options) if passthrough is not None
                else build_anthropic_request(request, provider=provider))
        claude = {**invoke_body(wire, VERTEX_ANTHROPIC_VERSION), "stream": True}
        return Call(request=UpstreamRequest(url=url, body=orjson.dumps(claude), headers=headers),
                         decoder=SSEDecoder.bounded(limits), normalizer=AnthropicNormalizer(provider=provider),
                         relay=passthrough is not None and passthrough.relay)

    return plan


def build_vertex(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`vertex` when GOOGLE_CLOUD_PROJECT is set and Application Default Credentials are found (or
    a bearer is injected as clients["vertex-auth"])."""
    project = config.secret("google_cloud_project")
    if project is None:  # ADC is not asked without it: it probes the metadata server
        return {}
    auth = clients.get("vertex-auth")
    if auth is None:
        found = GoogleBearer.from_adc()
        if found is None:
            return {}
        auth = found[0]
    plan = vertex_plan(project=project, location=config.secret("google_cloud_location") or DEFAULT_LOCATION,
                       base_url=config.secret("vertex_base_url"), limits=config.limits)
    from app.providers.cloud_spec import VERTEX

    return {"vertex": HttpAdapter(VERTEX, config, plan=plan, auth=auth, wire_for=wire_for, session=clients.get("vertex"))}
