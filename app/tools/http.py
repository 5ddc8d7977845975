"""An HTTP endpoint the operator registered as a gateway tool: JSON in, JSON out.

The URL is the operator's, fixed in configuration; nothing of the request (caller or model)
chooses where the gateway connects. The gateway POSTs
`{"tool": name, "tool_call_id": id, "arguments": {...}}` and takes the 2xx answer's JSON as the
output (a JSON string as it is, any other value as compact JSON). Redirects are not followed,
proxies from the environment are not used, the answer is read up to a size cap, and a non-2xx
status is a tool failure that names the status. The configured header values are secrets like a
provider's key: an endpoint that quotes them back (an echo, an error page) has them replaced by
`[redacted]` in the output and in its error text, before either reaches `tool_result`, the
transcript or a record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2
import orjson

from app.core import secrets
from app.core.messages import ToolCall, ToolSpec, thaw
from app.tools.base import ToolError

__all__ = ["MAX_RESPONSE_BYTES", "HttpTool"]

MAX_RESPONSE_BYTES = 1 << 20
_SHOWN_BODY = 300  # characters of an error answer quoted back to the model


class HttpTool:
    def __init__(
        self,
        *,
        spec: ToolSpec,
        url: str,
        timeout: float,
        client: httpx2.AsyncClient,
        headers: Mapping[str, str] | None = None,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.spec = spec
        self.url = url
        self.timeout = timeout
        self._client = client
        self._headers = {"accept": "application/json", **(headers or {})}
        self._max_bytes = max_bytes
        secrets.remember(*(headers or {}).values())

    async def run(self, call: ToolCall) -> Any:
        body = {"tool": self.spec.name, "tool_call_id": call.id, "arguments": thaw(call.arguments)}
        try:
            async with self._client.stream("POST", self.url, json=body, headers=self._headers,
                                           timeout=self.timeout) as response:
                raw = await self._read(response)
        except httpx2.TimeoutException:
            raise ToolError(f"tool endpoint timed out after {self.timeout:g}s") from None
        except httpx2.TransportError as exc:
            raise ToolError(f"tool endpoint unreachable ({type(exc).__name__})") from None
        if not 200 <= response.status_code < 300:
            shown = secrets.scrub(raw[:4096].decode("utf-8", errors="replace"))[:_SHOWN_BODY]
            raise ToolError(f"tool endpoint answered HTTP {response.status_code}: {shown}")
        try:
            return secrets.scrub_value(orjson.loads(raw))
        except orjson.JSONDecodeError:
            raise ToolError("tool endpoint answered something that is not JSON") from None

    async def _read(self, response: httpx2.Response) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._max_bytes:
                raise ToolError(f"tool endpoint answered more than {self._max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
