"""Loopback fakes of the three clouds that CHECK the credentials they are sent.

- `FakeBedrock`: recomputes every request's SigV4 signature with botocore's own `SigV4Auth`
  (the canonical request from the raw path, the signed headers and the body) for the known test
  credentials and answers 403 `InvalidSignatureException` when it differs, as AWS does; then
  serves the next scripted reply (event-stream bytes, or `(status, json, headers)`).
- `FakeGoogle`: a token endpoint (the service-account file's `token_uri`) that checks the signed
  JWT assertion and issues a bearer, and a Vertex AI endpoint that accepts only that bearer.
- `FakeAzure`: accepts only the `api-key` header, or a bearer from a fake credential.
- `FakeAnthropic`: accepts only its key (`x-api-key`, or the SDK's bearer), the Messages API at `/v1/messages`.
A reply is SSE/event-stream bytes, `(status, json, headers)`, or `STALL` (headers, then silence).
Requests are recorded (path, headers, JSON body) for the tests to read.
"""

from __future__ import annotations

import asyncio
import json
import time
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

__all__ = ["AWS_KEYS", "STALL", "EntraCredential", "FakeAnthropic", "FakeAzure", "FakeBedrock", "FakeGoogle", "Seen",
           "service_account", "sigv4_problem"]

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


STALL = object()
"""A scripted reply: the headers, then silence until the client goes away (`closed` set then)."""


def scripted(reply: Any, closed: asyncio.Event, media_type: str = "text/event-stream") -> Response:
    """The next scripted reply: `(status, json, headers)`, `STALL`, or body bytes served in small reads."""
    if reply is STALL:
        return StreamingResponse(paced(b"", step=97, hold=True, closed=closed), media_type=media_type)
    if isinstance(reply, tuple):
        status, payload, headers = reply
        return JSONResponse(payload, status_code=status, headers=headers)
    return StreamingResponse(paced(reply, step=97, hold=False, closed=closed), media_type=media_type)


class EntraCredential:
    """Stands in for azure-identity's DefaultAzureCredential: the fake Azure's bearer, for the one scope."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        self.scopes.extend(scopes)

        class Token:
            token = "entra-fake-token-0000"
            expires_on = int(time.time()) + 3600

        return Token()

    async def close(self) -> None:
        pass


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
        return scripted(self.replies.pop(0), self.closed, "application/vnd.amazon.eventstream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/model/{model:path}", self.handle, methods=["POST"])])


def service_account(token_uri: str) -> tuple[dict[str, str], bytes]:
    """A throwaway service-account file's content naming `token_uri`, and its public key (PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    info = {"type": "service_account", "project_id": "fake-project", "private_key_id": "k1", "private_key": private,
            "client_email": "gateway@fake-project.iam.gserviceaccount.com", "client_id": "1",
            "token_uri": token_uri}
    return info, public


@dataclass
class FakeGoogle:
    """A token endpoint (`/token`) checking the service account's signed JWT assertion, and Vertex AI
    (`/v1/...`) accepting only the bearer it issued. `public_key` is set by the test."""

    replies: list[Any]
    public_key: bytes = b""
    client_email: str = "gateway@fake-project.iam.gserviceaccount.com"
    issued: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    refused: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def token(self, request: Request) -> Response:
        from google.auth import jwt

        form = await request.form()
        try:
            # google-auth signs for Google's token audience wherever `token_uri` sends the assertion
            claims = jwt.decode(str(form["assertion"]), certs=self.public_key,
                                audience="https://oauth2.googleapis.com/token")
        except (ValueError, KeyError) as exc:
            return JSONResponse({"error": "invalid_grant", "error_description": str(exc)[:80]}, status_code=400)
        if claims.get("iss") != self.client_email or "cloud-platform" not in str(claims.get("scope")):
            return JSONResponse({"error": "invalid_scope"}, status_code=400)
        token = f"ya29.fake-{len(self.issued)}"
        self.issued.append(token)
        return JSONResponse({"access_token": token, "expires_in": 3600, "token_type": "Bearer"})

    async def vertex(self, request: Request) -> Response:
        body = await request.body()
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if bearer not in self.issued:
            self.refused += 1
            return JSONResponse({"error": {"code": 401, "message": "Request had invalid authentication credentials.",
                                           "status": "UNAUTHENTICATED"}}, status_code=401)
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        self.seen.append(Seen(path, dict(request.headers), json.loads(body)))
        return scripted(self.replies.pop(0), self.closed)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/token", self.token, methods=["POST"]),
                                 Route("/v1/{rest:path}", self.vertex, methods=["POST"])])


@dataclass
class FakeAzure:
    """Azure OpenAI accepting only `api-key: <key>` or `Authorization: Bearer <token>`."""

    replies: list[Any]
    key: str = "azure-fake-key-0000"
    token: str = "entra-fake-token-0000"
    seen: list[Seen] = field(default_factory=list)
    refused: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("api-key") != self.key and request.headers.get("authorization") != f"Bearer {self.token}":
            self.refused += 1
            return JSONResponse({"error": {"code": "401", "message": "Access denied due to invalid subscription key "
                                           "or wrong API endpoint."}}, status_code=401)
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        self.seen.append(Seen(path, dict(request.headers), json.loads(body)))
        return scripted(self.replies.pop(0), self.closed)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/openai/{rest:path}", self.handle, methods=["POST"])])


@dataclass
class FakeAnthropic:
    """Anthropic's Messages API accepting only its key, as `x-api-key` or as the pinned SDK sends it
    (`Authorization: Bearer <key>`)."""

    replies: list[Any]
    key: str = "sk-ant-fake-0000"
    seen: list[Seen] = field(default_factory=list)
    refused: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("x-api-key") != self.key and request.headers.get("authorization") != f"Bearer {self.key}":
            self.refused += 1
            return JSONResponse({"type": "error", "error": {"type": "authentication_error",
                                                            "message": "invalid x-api-key"}}, status_code=401)
        self.seen.append(Seen(request.url.path, dict(request.headers), json.loads(body)))
        return scripted(self.replies.pop(0), self.closed)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.handle, methods=["POST"])])
