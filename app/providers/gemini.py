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

Request mapping decisions:
- Every system message goes into `systemInstruction` (Gemini has no system turn), in order.
- Roles are `user` and `model`; consecutive turns of one role are merged, so the function
  responses of one model turn arrive together in one `user` turn, as the API requires.
- Tool calls go out as `functionCall` parts without an id (Gemini matches responses by name and
  order, and the gateway's ids are its own); a tool message becomes a `functionResponse` named
  after the call it answers (found by `tool_call_id` among earlier calls, else the message's
  `name`). Its `response` is the tool output when that is a JSON object, else `{"output": text}`;
  a failed tool's (`is_error`) is `{"error": text}`, the key Gemini documents for errors.
- Thought signatures round-trip: the first signature kept on an assistant message (a reasoning
  block from this provider) goes on its first `functionCall` part, or on its first text part when
  it has no calls, which is where Gemini puts it. Thought text is not sent back.
- Tools are `functionDeclarations` with `parametersJsonSchema` (full JSON Schema, no conversion
  to the OpenAPI subset of `parameters`). Tool specs and `tool_choice` are checked by the Chat
  converters, so every provider accepts and refuses the same things.
- `temperature`, `max_tokens`, `stop` (as `stopSequences`) and `output_schema` (as
  `responseJsonSchema` with `responseMimeType: application/json`) go into `generationConfig`. Gemini
  has no strict flag and caches by itself: a tool's `strict` / `cache_control` /
  `eager_input_streaming` and the top-level `cache_control` are accepted and not sent (the
  documented no-op). It has no switch for one call per response either: `parallel_tool_calls:
  false` with tools is refused (400), `true` is its default. `provider_options`: a
  `generationConfig` object merges into ours (thinkingConfig, topP, stopSequences, ...),
  `builtin_tools` (e.g. `[{"googleSearch": {}}, {"codeExecution": {}}]`) join the tools, any
  other key goes into the body as given (safetySettings, cachedContent, ...); a None value drops
  a field, and the fields the gateway owns (contents, systemInstruction, tools) are refused.
"""

from __future__ import annotations

import base64
import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
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
from app.core.messages import AdapterError, Message, ToolSpec, thaw
from app.core.parts import TextPart
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, ToolChoice, sse_body
from app.providers.config import DEFAULT_LIMITS, ProviderConfig, ReadLimits
from app.providers.errors import CONNECTION_ERRORS, status_error, transport_error
from app.providers.gemini_stream import GeminiNormalizer
from app.providers.http import bounded_body, gemini_http_client
from app.providers.tool_specs import ForcedTool, checked_tool_choice, checked_tools

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
_RESERVED_OPTIONS = frozenset({"contents", "systemInstruction", "system_instruction", "tools"})
_CHOICE_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


# -- request mapping (pure) ------------------------------------------------------------------


def messages_to_gemini(
    messages: Sequence[Message], *, provider: str = "gemini"
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Foundry messages -> (`systemInstruction`, `contents`) of a generateContent request."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> function name, from earlier assistant messages

    def append(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise AdapterError(f"messages[{i}] is not a Foundry Message")
        if message.role == "system":
            system.extend({"text": part.text} for part in message.parts if isinstance(part, TextPart))
        elif message.role == "user":
            append("user", _parts(message, i))
        elif message.role == "assistant":
            names.update((call.id, call.name) for call in message.tool_calls)
            append("model", _model_parts(message, provider))
        else:
            name = names.get(message.tool_call_id or "") or message.name
            if not name:
                raise AdapterError(f"messages[{i}]: tool result {message.tool_call_id!r} answers no earlier "
                                   "tool call and has no name (Gemini matches results by function name)")
            if any(not isinstance(part, TextPart) for part in message.parts):
                where = f"messages.{i}.content"
                raise AdapterError(f"{where}: Gemini takes text only in a tool result (a function response); send "
                                   "the image or document in a user message", field=where)
            append("user", [{"functionResponse": {"name": name, "response": _tool_response(message.text, message.is_error)}}])
    if not contents:
        raise AdapterError("the conversation needs at least one user or assistant message")
    return ({"parts": system} if system else None), contents


def _model_parts(message: Message, provider: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": part.text} for part in message.parts if isinstance(part, TextPart)]
    parts.extend({"functionCall": {"name": c.name, "args": thaw(c.arguments)}} for c in message.tool_calls)
    signature = next((b.signature for b in message.reasoning if b.provider == provider and b.signature), None)
    if signature:
        target = next((p for p in parts if "functionCall" in p), parts[0])
        target["thoughtSignature"] = signature
    return parts


def _parts(message: Message, i: int) -> list[dict[str, Any]]:
    """Parts as Gemini `parts`: `text`, and media as `inlineData` (base64 with its mime type).
    A URL is refused: the Gemini API fetches only its own Files API and Cloud Storage URIs
    (`fileData`), not a caller's https URL, and the gateway never fetches one itself."""
    out: list[dict[str, Any]] = []
    for j, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            out.append({"text": part.text})
        elif part.url is not None:
            where = f"messages.{i}.content.{j}.url"
            raise AdapterError(f"{where}: Gemini does not fetch https URLs; send the {part.type} as base64 `data` "
                               "with its media_type (sent as inline_data)", field=where)
        else:
            out.append({"inlineData": {"mimeType": part.media_type, "data": part.data}})
    return out


def _tool_response(content: str, is_error: bool) -> dict[str, Any]:
    if is_error:  # Gemini's documented key for a failed call: `error` (`output` for a result)
        return {"error": content}
    try:
        value = safejson.loads(content)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"output": content}


def tool_specs_to_gemini(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Foundry tool specs -> `functionDeclarations` (duplicate names and malformed specs raise
    AdapterError), schemas as `parametersJsonSchema`."""
    declarations = []
    for tool in checked_tools(tools):
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parametersJsonSchema"] = thaw(tool.parameters)
        declarations.append(function)
    return declarations


def tool_choice_to_gemini(choice: ToolChoice | None, tools: Sequence[ToolSpec]) -> dict[str, Any] | None:
    """auto/none/required/<tool name> -> `toolConfig` (None: omit)."""
    checked = checked_tool_choice(choice, tools)
    if checked is None:
        return None
    if isinstance(checked, ForcedTool):
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [checked.name]}}
    return {"functionCallingConfig": {"mode": _CHOICE_MODES[checked]}}


def gemini_request(request: ProviderRequest, *, provider: str = "gemini") -> dict[str, Any]:
    """The whole generateContent body for one request (the model goes in the URL)."""
    options = dict(request.options or {})
    clash = _RESERVED_OPTIONS.intersection(options)
    if clash:
        raise AdapterError(f"provider_options may not set {sorted(clash)}: use the request's own fields")
    if request.parallel_tool_calls is False and request.tools:
        raise AdapterError("parallel_tool_calls: false cannot be carried: Gemini has no switch for one call per "
                           "response")
    system, contents = messages_to_gemini(request.messages, provider=provider)
    body: dict[str, Any] = {"contents": contents}
    if system is not None:
        body["systemInstruction"] = system
    builtin = options.pop("builtin_tools", None) or []
    if not isinstance(builtin, list) or not all(isinstance(t, Mapping) for t in builtin):
        raise AdapterError("provider_options.builtin_tools must be a list of tool objects")
    declarations = tool_specs_to_gemini(request.tools)
    tools = ([{"functionDeclarations": declarations}] if declarations else []) + [dict(t) for t in builtin]
    if tools:
        body["tools"] = tools
    choice = tool_choice_to_gemini(request.tool_choice, request.tools)
    if choice is not None:
        body["toolConfig"] = choice
    config = _generation_config(request)
    extra_config = options.pop("generationConfig", None) or {}
    if not isinstance(extra_config, Mapping):
        raise AdapterError("provider_options.generationConfig must be an object")
    config.update(extra_config)
    body["generationConfig"] = {k: v for k, v in config.items() if v is not None}
    for key, value in options.items():
        body.pop(key, None)
        if value is not None:
            body[key] = value
    return body


def _generation_config(request: ProviderRequest) -> dict[str, Any]:
    config: dict[str, Any] = {} if request.temperature is None else {"temperature": request.temperature}
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if request.output_schema is not None:  # structured output
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = request.output_schema
    return config


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
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["x-goog-api-key"] = api_key
        # A bare host gets the Gemini API's version; a URL with a path is used as given
        # (".../v1beta", a proxy's prefix, Vertex AI's ".../locations/{l}/publishers/google").
        base = (base_url or GEMINI_BASE_URL).rstrip("/")
        parsed = httpx2.URL(base)
        if parsed.userinfo:  # sent as Basic auth, as httpx2 would; aiohttp refuses both in one request
            credentials = f"{parsed.username}:{parsed.password}".encode()
            self._headers["authorization"] = "Basic " + base64.b64encode(credentials).decode()
            base = str(parsed.copy_with(userinfo=b"")).rstrip("/")
        self._base = base if urlsplit(base).path else f"{base}/v1beta"
        self._owns_client = owns_client

    def ready(self) -> bool:
        return True  # built only with a key or an injected client (build_gemini)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def url(self, model: str, method: str) -> str:
        name = model.removeprefix("models/")
        if not name or "/" in name:
            raise AdapterError(f"not a Gemini model name: {model!r}")
        return f"{self._base}/models/{quote(name, safe='-._~')}:{method}"

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
    """`gemini` from an injected clients["gemini"] (an httpx2.AsyncClient), else from
    GEMINI_API_KEY / GOOGLE_API_KEY and GEMINI_BASE_URL with a client of its own."""
    key = config.secret("gemini_api_key")
    base_url = config.secret("gemini_base_url")
    client = clients.get("gemini")
    if client is not None:
        if not isinstance(client, httpx2.AsyncClient):
            raise TypeError(f"clients['gemini'] must be an httpx2.AsyncClient, got {type(client).__name__}")
        return {"gemini": GeminiAdapter(client, api_key=key, base_url=base_url, limits=config.limits)}
    if not key:
        return {}
    # app/routing retries, counting each attempt once; redirects are not followed (http.py).
    client = gemini_http_client(connect_timeout=config.connect_timeout, read_timeout=config.read_timeout,
                                max_body_bytes=config.limits.max_body_bytes)
    return {"gemini": GeminiAdapter(client, api_key=key, base_url=base_url, owns_client=True,
                                    limits=config.limits)}

