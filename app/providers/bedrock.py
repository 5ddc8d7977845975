"""AWS Bedrock (`bedrock/<model id or inference profile>`): the request plan, error answers, the builder.

A canonical request goes to `POST {endpoint}/model/{modelId}/converse-stream` with a Converse body
(bedrock_convert.py); the answer's AWS event stream (eventstream.py) is read by the Converse
normalizer (bedrock_stream.py). A Messages request passed through from the Anthropic facade to a
Claude model goes to `.../invoke-with-response-stream` as Anthropic's own body (bedrock_invoke.py),
read by the Anthropic normalizer and relayed to its client as Anthropic SSE. Every request is
signed with SigV4 (service `bedrock`; botocore's signer on botocore's credential chain,
cloud_auth.py). The endpoint is `https://bedrock-runtime.{region}.amazonaws.com`, or the override
AWS tools read (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, then `AWS_ENDPOINT_URL`, or the config file's).
The model id goes in the path percent-encoded but for `:` (which HTTP clients send decoded, and the
signed path must be the sent one), so an inference-profile ARN is one path segment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from app.core import safejson
from app.core.errors import UpstreamError
from app.core.messages import AdapterError
from app.providers.anthropic_stream import AnthropicNormalizer
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.bedrock_convert import converse_request
from app.providers.bedrock_invoke import InvokeStreamDecoder, invoke_body
from app.providers.bedrock_stream import EXCEPTION_STATUS, ConverseNormalizer
from app.providers.cloud_auth import AwsSigner
from app.providers.config import ProviderConfig, ReadLimits
from app.providers.descriptor import UpstreamRequest
from app.providers.errors import status_error
from app.providers.eventstream import EventStreamDecoder
from app.providers.passthrough import Wire, passthrough_for
from app.providers.upstream import Call, HttpAdapter, Plan

__all__ = ["bedrock_endpoint", "bedrock_plan", "build_bedrock", "error_answer", "is_claude"]

_HEADERS = {"content-type": "application/json", "accept": "application/vnd.amazon.eventstream"}


def bedrock_endpoint(region: str, override: str | None = None) -> str:
    """The bedrock-runtime endpoint of `region`, or the override as given."""
    return (override or f"https://bedrock-runtime.{region}.amazonaws.com").rstrip("/")


def is_claude(model: str) -> bool:
    """Anthropic's models on Bedrock: `anthropic.claude-...`, `us.anthropic.claude-...`, their
    inference-profile ARNs."""
    return "anthropic.claude" in model


def wire_for(model: str) -> Wire | None:
    return "anthropic-messages" if is_claude(model) else None


def model_url(endpoint: str, model: str, action: str) -> str:
    if not model:
        raise AdapterError("the model id is empty", field="model")
    return f"{endpoint}/model/{quote(model, safe=':')}/{action}"


def bedrock_plan(endpoint: str, limits: ReadLimits, provider: str = "bedrock") -> Plan:
    """The plan of one request (`HttpAdapter` sends it): Converse, or Anthropic's own body on invoke."""

    def plan(request: ProviderRequest) -> Call:
        passthrough = passthrough_for(request.passthrough, "anthropic-messages")
        if passthrough is not None and is_claude(request.model):
            body = invoke_body(passthrough.wire_body(request.model, request.options))
            return Call(request=UpstreamRequest(url=model_url(endpoint, request.model, "invoke-with-response-stream"),
                                                  body=orjson.dumps(body), headers=dict(_HEADERS)),
                             decoder=InvokeStreamDecoder(limits), normalizer=AnthropicNormalizer(provider=provider),
                             relay=passthrough.relay)
        body = converse_request(request, provider=provider)
        return Call(request=UpstreamRequest(url=model_url(endpoint, request.model, "converse-stream"),
                                              body=orjson.dumps(body), headers=dict(_HEADERS)),
                         decoder=EventStreamDecoder.bounded(limits),
                         normalizer=ConverseNormalizer(provider=provider, model=request.model))

    return plan


def error_answer(status: int, headers: Mapping[str, str], body: bytes, provider: str) -> UpstreamError:
    """An AWS JSON error answer: `{"message": ...}` with `x-amzn-ErrorType: ThrottlingException:...`."""
    kind = (headers.get("x-amzn-errortype") or "").split(":", 1)[0] or None
    try:
        data = safejson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    message = ""
    if isinstance(data, Mapping):
        message = str(data.get("message") or data.get("Message") or "")
        kind = kind or (str(data["__type"]).rsplit("#", 1)[-1] if data.get("__type") else None)
    lowered = kind[:1].lower() + kind[1:] if kind else ""
    if lowered in EXCEPTION_STATUS and status == 400:  # a 400 whose type says throttling keeps AWS's class
        status = EXCEPTION_STATUS[lowered]
    credentials = kind in ("UnrecognizedClientException", "ExpiredTokenException", "InvalidSignatureException")
    return status_error(status, f"{kind}: {message}" if kind else message or f"HTTP {status}", provider=provider,
                        retry_after=headers.get("retry-after"), upstream_type=kind,
                        request_id=headers.get("x-amzn-requestid"), credentials_refused=credentials)


def build_bedrock(config: ProviderConfig, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`bedrock` when a region is set and botocore's chain finds credentials (or a signer is
    injected as clients["bedrock-signer"]); clients["bedrock"] an aiohttp.ClientSession."""
    region = config.secret("aws_region")
    if region is None:
        return {}
    signer = clients.get("bedrock-signer") or AwsSigner.from_chain(region, profile=config.secret("aws_profile"))
    if signer is None:
        return {}
    endpoint = bedrock_endpoint(region, config.secret("bedrock_endpoint_url"))
    from app.providers.cloud_spec import BEDROCK

    return {"bedrock": HttpAdapter(BEDROCK, config, plan=bedrock_plan(endpoint, config.limits), auth=signer,
                                   wire_for=wire_for, session=clients.get("bedrock"))}
