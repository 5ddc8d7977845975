"""Cloud credentials, from the clouds' own libraries (DESIGN.md section 4: never hand-rolled).

- AWS: botocore's credential chain (env keys, `AWS_PROFILE`, SSO, web identity, container and
  instance roles) and its public `SigV4Auth` signer. Refreshable credentials are refreshed by
  botocore before they expire; the refresh does I/O (STS, the instance metadata service), so it
  runs in a thread, and only when botocore says one is due (`refresh_needed()`).
- Google: Application Default Credentials (`google.auth.default`: `GOOGLE_APPLICATION_CREDENTIALS`
  service-account files, whose `token_uri` the library honours, workload identity, the metadata
  server), scope `cloud-platform`; the token is cached by the library and refreshed in a thread
  over urllib3 (botocore's own HTTP library) when it is missing or about to expire.
- Azure: `azure.identity.aio.DefaultAzureCredential` (environment, workload identity, managed
  identity, Azure CLI), scope `https://cognitiveservices.azure.com/.default`, the token kept
  until five minutes before it expires.
Each is built lazily (nothing is read at import) and never logs or echoes a secret.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials, RefreshableCredentials
from botocore.exceptions import BotoCoreError
from botocore.session import Session as BotocoreSession

from app.providers.descriptor import UpstreamRequest

__all__ = ["AZURE_SCOPE", "GOOGLE_SCOPE", "ApiKeyHeader", "AwsSigner", "AzureBearer", "GoogleBearer"]

GOOGLE_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
AZURE_SCOPE = "https://cognitiveservices.azure.com/.default"


@dataclass(slots=True, kw_only=True)
class AwsSigner:
    """SigV4 for one service and region, on credentials from botocore's chain (or given ones)."""

    region: str
    service: str = "bedrock"
    credentials: Credentials | None = None

    @classmethod
    def from_chain(cls, region: str, *, profile: str | None = None) -> AwsSigner | None:
        """None when the chain finds no credentials (the provider is then not served)."""
        session = BotocoreSession(profile=profile)
        found = session.get_credentials()
        return None if found is None else cls(region=region, credentials=found)

    async def frozen(self) -> ReadOnlyCredentials:
        creds = self.credentials
        if creds is None:
            raise LookupError("no AWS credentials")
        try:
            if isinstance(creds, RefreshableCredentials) and creds.refresh_needed():
                return await asyncio.to_thread(creds.get_frozen_credentials)
            return creds.get_frozen_credentials()
        except BotoCoreError as exc:  # the refresh failed (STS, the metadata service)
            raise LookupError(f"AWS credentials could not be refreshed ({type(exc).__name__})") from None

    async def apply(self, request: UpstreamRequest) -> None:
        """Sign the final request: Authorization, X-Amz-Date and the session token added."""
        frozen = await self.frozen()
        signed = AWSRequest(method="POST", url=request.url, data=request.body, headers=request.headers)
        SigV4Auth(Credentials(frozen.access_key, frozen.secret_key, frozen.token), self.service,
                  self.region).add_auth(signed)
        request.headers = dict(signed.headers.items())


@dataclass(slots=True, kw_only=True)
class GoogleBearer:
    """An OAuth access token from google-auth credentials, refreshed off the event loop."""

    credentials: Any
    """A `google.auth.credentials.Credentials` (ADC, or a service-account file's)."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _request: Any = None

    @classmethod
    def from_adc(cls) -> tuple[GoogleBearer, str | None] | None:
        """(bearer, the credentials' project) from ADC; None when ADC finds nothing."""
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, project = google.auth.default(scopes=[GOOGLE_SCOPE])
        except DefaultCredentialsError:
            return None
        return cls(credentials=credentials), project

    async def apply(self, request: UpstreamRequest) -> None:
        request.headers["authorization"] = f"Bearer {await self.token()}"

    async def token(self) -> str:
        from google.auth.exceptions import GoogleAuthError

        creds = self.credentials
        if not creds.valid:  # missing, or within google-auth's refresh window of its expiry
            async with self._lock:
                if not creds.valid:
                    try:
                        await asyncio.to_thread(creds.refresh, self._transport())
                    except GoogleAuthError as exc:  # the token endpoint refused or is unreachable
                        raise LookupError(f"Google credentials could not be refreshed ({type(exc).__name__})") from None
        return str(creds.token)

    def _transport(self) -> Any:
        if self._request is None:
            import urllib3
            from google.auth.transport.urllib3 import Request

            self._request = Request(urllib3.PoolManager())
        return self._request


@dataclass(slots=True, kw_only=True)
class ApiKeyHeader:
    """A static key in a header (Azure OpenAI's `api-key`)."""

    header: str
    key: str

    async def apply(self, request: UpstreamRequest) -> None:
        request.headers[self.header] = self.key


@dataclass(slots=True, kw_only=True)
class AzureBearer:
    """An Entra ID token for Azure OpenAI from an azure-identity async credential."""

    credential: Any
    """An `azure.core.credentials_async.AsyncTokenCredential` (DefaultAzureCredential)."""
    scope: str = AZURE_SCOPE
    _token: str | None = None
    _expires: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def default(cls) -> AzureBearer:
        from azure.identity.aio import DefaultAzureCredential

        return cls(credential=DefaultAzureCredential())

    async def apply(self, request: UpstreamRequest) -> None:
        request.headers["authorization"] = f"Bearer {await self.token()}"

    async def token(self) -> str:
        if self._token is None or time.time() > self._expires - 300:
            async with self._lock:
                if self._token is None or time.time() > self._expires - 300:
                    from azure.core.exceptions import AzureError

                    try:
                        access = await self.credential.get_token(self.scope)
                    except AzureError as exc:  # no Entra ID credential found, or refused
                        raise LookupError(f"no Microsoft Entra ID token ({type(exc).__name__})") from None
                    self._token, self._expires = access.token, float(access.expires_on)
        assert self._token is not None
        return self._token

    async def aclose(self) -> None:
        await self.credential.close()
