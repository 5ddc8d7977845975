"""AWS Bedrock (`bedrock/<model id or inference profile>`): the adapter, error answers, the builder.

`POST {endpoint}/model/{modelId}/converse-stream` with a Converse body (bedrock_convert.py),
signed with SigV4 (service `bedrock`, botocore's signer on botocore's credential chain:
cloud_auth.py); the answer is an AWS event stream (eventstream.py) read by the Converse
normalizer (bedrock_stream.py). The endpoint is `https://bedrock-runtime.{region}.amazonaws.com`,
or the override AWS tools read (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, then `AWS_ENDPOINT_URL`, or
the config file's): a VPC endpoint, a proxy, a fake. The model id goes in the path percent-encoded
(but `:`), so an inference-profile ARN (`arn:aws:bedrock:...:inference-profile/...`) is one segment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx2
import orjson

from app.core import safejson
from app.core.errors import GatewayError, RequestError, UpstreamError
from app.core.messages import AdapterError
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest
from app.providers.bedrock_convert import converse_request
from app.providers.bedrock_stream import EXCEPTION_STATUS, ConverseNormalizer
from app.providers.cloud_auth import AwsSigner
from app.providers.config import DEFAULT_LIMITS, ReadLimits
from app.providers.errors import CONNECTION_ERRORS, status_error, transport_error
from app.providers.eventstream import EventStreamPatchStream
from app.providers.http import bounded_body

__all__ = ["BedrockAdapter", "bedrock_endpoint", "bedrock_errors", "error_answer"]

_EVENTSTREAM = "application/vnd.amazon.eventstream"


def bedrock_endpoint(region: str, override: str | None = None) -> str:
    """The bedrock-runtime endpoint of `region`, or the override as given."""
    return (override or f"https://bedrock-runtime.{region}.amazonaws.com").rstrip("/")


@contextlib.contextmanager
def bedrock_errors(provider: str) -> Iterator[None]:
    """Before the body: the request refused by name (400), no credentials (502), transport failures."""
    try:
        yield
    except GatewayError:
        raise
    except AdapterError as exc:
        raise RequestError(f"{provider}: {exc}", provider=provider, field=exc.field) from exc
    except LookupError as exc:  # the credential chain found nothing (any more)
        raise UpstreamError(f"{provider}: {exc}", code="upstream_auth", provider=provider) from exc
    except CONNECTION_ERRORS as exc:
        raise transport_error(exc, provider) from exc


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
    # A 400 whose type says throttling or an expired token keeps the class AWS meant.
    if kind and kind[:1].lower() + kind[1:] in EXCEPTION_STATUS and status == 400:
        status = EXCEPTION_STATUS[kind[:1].lower() + kind[1:]]
    credentials = kind in ("UnrecognizedClientException", "ExpiredTokenException", "InvalidSignatureException")
    return status_error(status, f"{kind}: {message}" if kind else message or f"HTTP {status}", provider=provider,
                        retry_after=headers.get("retry-after"), upstream_type=kind,
                        request_id=headers.get("x-amzn-requestid"), credentials_refused=credentials)


class BedrockAdapter(ProviderAdapter):
    """Bedrock Runtime through an injected `httpx2.AsyncClient`, every request signed."""

    def __init__(self, client: httpx2.AsyncClient, *, signer: AwsSigner, endpoint: str, name: str = "bedrock",
                 owns_client: bool = False, limits: ReadLimits = DEFAULT_LIMITS) -> None:
        self.name = name
        self._client = client
        self._signer = signer
        self.endpoint = endpoint.rstrip("/")
        self._owns_client = owns_client
        self._limits = limits

    def ready(self) -> bool:
        return True  # built only when the chain found credentials, or given a signer

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def url(self, model: str, action: str) -> str:
        if not model:
            raise AdapterError("the model id is empty", field="model")
        # ':' stays as it is (a valid path character that HTTP clients send decoded anyway), '/' is
        # encoded: the signed path must be the path sent, byte for byte (the fake cloud checks it).
        return f"{self.endpoint}/model/{quote(model, safe=':')}/{action}"

    async def send(self, url: str, body: bytes, trace: Mapping[str, str] | None) -> httpx2.Response:
        """A signed streamed POST; an error answer raised as the gateway's error."""
        headers = await self._signer.sign(url, body, {"content-type": "application/json", "accept": _EVENTSTREAM})
        if trace:
            headers.update(trace)  # after signing: the trace context is not part of the signature
        client = self._client
        response = await client.send(client.build_request("POST", url, content=body, headers=headers),
                                     stream=True, follow_redirects=False)
        if response.status_code >= 300:
            payload = await bounded_body(response, self._limits.max_body_bytes)
            raise error_answer(response.status_code, response.headers, payload, self.name)
        return response

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        with bedrock_errors(self.name):
            url = self.url(request.model, "converse-stream")
            body = orjson.dumps(converse_request(request, provider=self.name))
            response = await self.send(url, body, request.trace_headers)
        return EventStreamPatchStream(response.aiter_bytes(), ConverseNormalizer(provider=self.name, model=request.model),
                                      close=response.aclose, provider=self.name, limits=self._limits)


def build_bedrock(*, region: str | None, endpoint_url: str | None, profile: str | None, clients: Mapping[str, Any],
                  http_client: Any, limits: ReadLimits = DEFAULT_LIMITS) -> BedrockAdapter | None:
    """`bedrock` when a region is known and the credential chain finds credentials (or a signer is
    injected as clients["bedrock-signer"]); `http_client` builds the client when none is injected."""
    signer = clients.get("bedrock-signer")
    if region is None:
        return None
    if signer is None:
        signer = AwsSigner.from_chain(region, profile=profile)
        if signer is None:
            return None
    client = clients.get("bedrock")
    owns = client is None
    return BedrockAdapter(client if client is not None else http_client(), signer=signer,
                          endpoint=bedrock_endpoint(region, endpoint_url), owns_client=owns, limits=limits)
