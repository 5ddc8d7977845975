"""Loopback fakes of the three clouds that CHECK the credentials they are sent.

- `FakeBedrock`: recomputes every request's SigV4 signature with botocore's own `SigV4Auth`
  (the canonical request from the raw path, the signed headers and the body) for the known test
  credentials and answers 403 `InvalidSignatureException` when it differs, as AWS does; then
  serves the next scripted reply (event-stream bytes, or `(status, json, headers)`).
- `FakeGoogle`: a token endpoint (the service-account file's `token_uri`) that checks the signed
  JWT assertion and issues a bearer, and a Vertex AI endpoint that accepts only that bearer.
- `FakeAzure`: accepts only the `api-key` header, or a bearer from a fake credential.
Requests are recorded (path, headers, JSON body) for the tests to read.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.upstream_fakes import paced

__all__ = ["AWS_KEYS", "FakeBedrock", "Seen"]

AWS_KEYS = Credentials("AKIDEXAMPLEFAKE00000", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token-fake")


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def sigv4_problem(request: Request, body: bytes, *, region: str, service: str = "bedrock",
                  credentials: Credentials = AWS_KEYS) -> str | None:
    """None when the request's SigV4 signature is the one botocore computes for `credentials`."""
    auth = request.headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 authorization"
    parts = dict(p.strip().split("=", 1) for p in auth.removeprefix("AWS4-HMAC-SHA256 ").split(","))
    scope = parts["Credential"].split("/")
    if scope[0] != credentials.access_key or scope[2:5] != [region, service, "aws4_request"]:
        return f"wrong credential scope {parts['Credential']}"
    if request.headers.get("x-amz-security-token") != credentials.token:
        return "wrong session token"
    signed = parts["SignedHeaders"].split(";")
    raw_path = request.scope["raw_path"].decode()
    url = f"{request.url.scheme}://{request.headers['host']}{raw_path}"
    aws = AWSRequest(method=request.method, url=url, data=body,
                     headers={name: request.headers[name] for name in signed})
    aws.context["timestamp"] = request.headers["x-amz-date"]
    signer = SigV4Auth(credentials, service, region)
    canonical = signer.canonical_request(aws)
    expected = signer.signature(signer.string_to_sign(aws, canonical), aws)
    return None if expected == parts["Signature"] else "signature mismatch"


@dataclass
class FakeBedrock:
    replies: list[Any]
    region: str = "us-east-1"
    seen: list[Seen] = field(default_factory=list)
    refused: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        problem = sigv4_problem(request, body, region=self.region)
        if problem is not None:
            self.refused += 1
            return JSONResponse({"message": f"The request signature we calculated does not match ({problem})"},
                                status_code=403, headers={"x-amzn-ErrorType": "InvalidSignatureException:http://x/"})
        self.seen.append(Seen(request.scope["raw_path"].decode(), dict(request.headers), json.loads(body)))
        reply = self.replies.pop(0)
        if isinstance(reply, tuple):
            status, payload, headers = reply
            return JSONResponse(payload, status_code=status, headers=headers)
        return StreamingResponse(paced(reply, step=97, hold=False, closed=self.closed),
                                 media_type="application/vnd.amazon.eventstream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/model/{model:path}", self.handle, methods=["POST"])])
