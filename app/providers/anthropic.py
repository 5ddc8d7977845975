"""Anthropic Messages: request mapping, the adapter, error mapping and the registry builder.

The stream normalizer lives in `anthropic_stream.py`. Request mapping decisions:
- System messages are lifted into `system` (a string, or text blocks when there are several).
- Tool results become `tool_result` blocks; consecutive turns of one role are merged into one, so
  the results of one assistant turn's calls arrive in a single user turn, as the API requires.
- An assistant message sends its reasoning first (signed `thinking`, `redacted_thinking`), then
  its text, then its `tool_use` blocks, so a tool loop with extended thinking round-trips as
  received. Unsigned blocks and blocks another provider produced are left out: the API only
  accepts thinking it signed.
- `max_tokens` is required by the API; without one we send DEFAULT_MAX_TOKENS (4096), plus the
  thinking budget when `provider_options.thinking.budget_tokens` is set (it must exceed it).
- `temperature` is not sent: the SDK (anthropic 2.x) pins API version 2026-10-21, which refuses
  `temperature`, `top_p` and `top_k` at any value with a 400, so a portable request that carries
  the gateway's default temperature would always fail. A caller who talks to a server that takes
  them passes them under `provider_options`, which go out as given.
- `provider_options` (`thinking`, `metadata`, `stop_sequences`, ...) are added to the body; they may
  not replace what the typed fields own (model, messages, system, tools, tool_choice, max_tokens,
  stream): that raises AdapterError, as does anything else outside the Foundry schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import anthropic
import httpx2
import orjson
from pydantic import ValidationError

from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamBadRequest,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.core.messages import AdapterError, Message, ReasoningBlock, ToolCall, ToolSpec, thaw
from app.providers.anthropic_stream import AnthropicNormalizer
from app.providers.base import ProviderAdapter, ProviderRequest, SSEPatchStream, ToolChoice
from app.settings import Settings

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicAdapter",
    "anthropic_errors",
    "build_anthropic",
    "build_anthropic_request",
    "message_from_anthropic",
    "messages_to_anthropic",
    "tool_choice_to_anthropic",
    "tool_specs_to_anthropic",
]

DEFAULT_MAX_TOKENS = 4096
_RESERVED_OPTIONS = frozenset({"model", "messages", "system", "tools", "tool_choice", "max_tokens", "stream"})


# -- request mapping (pure) ------------------------------------------------------------------


def messages_to_anthropic(
    messages: tuple[Message, ...] | list[Message], *, provider: str = "anthropic"
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Foundry messages -> (`system`, `messages`) of a Messages API request."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    pending: set[str] = set()  # tool_use ids of the last assistant turn still unanswered

    def append(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise AdapterError(f"messages[{i}] is not a Foundry Message")
        if message.role != "tool" and pending:
            raise AdapterError(
                f"messages[{i}]: tool calls {sorted(pending)} have no tool result before this message"
            )
        if message.role == "system":
            system.append(message.content)
        elif message.role == "user":
            append("user", [{"type": "text", "text": message.content}])
        elif message.role == "tool":
            if message.tool_call_id not in pending:
                raise AdapterError(
                    f"messages[{i}]: tool result {message.tool_call_id!r} does not answer a call of the "
                    "assistant message just before it"
                )
            pending.discard(message.tool_call_id)
            append("user", [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}])
        else:
            append("assistant", _assistant_blocks(message, provider))
            pending = {call.id for call in message.tool_calls}
    if pending:
        raise AdapterError(f"tool calls {sorted(pending)} have no tool result")
    if not turns:
        raise AdapterError("the conversation needs at least one user or assistant message")
    for turn in turns:  # a lone text block reads best as the plain string the docs use
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    if not system:
        return None, turns
    return (system[0] if len(system) == 1 else [{"type": "text", "text": s} for s in system]), turns


def _assistant_blocks(message: Message, provider: str) -> list[dict[str, Any]]:
    blocks = [b for r in message.reasoning if (b := _reasoning_block(r, provider)) is not None]
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": thaw(call.arguments)})
    if not blocks:
        raise AdapterError("an assistant message needs content, tool calls or signed reasoning")
    return blocks


def _reasoning_block(block: ReasoningBlock, provider: str) -> dict[str, Any] | None:
    if block.provider not in (None, provider):
        return None
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None


def tool_specs_to_anthropic(tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> list[dict[str, Any]]:
    """Foundry tool specs -> Messages API `tools` (custom tools with an `input_schema`)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, ToolSpec):
            raise AdapterError(f"tools[{i}] is not a Foundry ToolSpec")
        if tool.name in seen:
            raise AdapterError(f"duplicate tool name: {tool.name}")
        seen.add(tool.name)
        spec: dict[str, Any] = {"name": tool.name, "input_schema": thaw(tool.parameters)}
        if tool.description:
            spec["description"] = tool.description
        out.append(spec)
    return out


def tool_choice_to_anthropic(choice: ToolChoice | None, tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> dict[str, Any] | None:
    """auto/none/required/<tool name> -> the Messages API `tool_choice` object (None: omit)."""
    if choice is None:
        return None
    if not tools:
        if choice in ("auto", "none"):
            return None
        raise AdapterError(f"tool_choice {choice!r} needs tools")
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if not isinstance(choice, str) or choice not in {t.name for t in tools}:
        raise AdapterError(f"tool_choice {choice!r} names no tool of this request")
    return {"type": "tool", "name": choice}


def build_anthropic_request(request: ProviderRequest, *, provider: str = "anthropic") -> dict[str, Any]:
    """The whole Messages API body for one request (without `stream`)."""
    options = request.options or {}
    if not isinstance(options, Mapping):
        raise AdapterError("provider_options must be an object")
    clash = _RESERVED_OPTIONS.intersection(options)
    if clash:
        raise AdapterError(f"provider_options may not set {sorted(clash)}: use the request's own fields")
    system, messages = messages_to_anthropic(request.messages, provider=provider)
    body: dict[str, Any] = {"model": request.model, "max_tokens": _max_tokens(request, options), "messages": messages}
    if system is not None:
        body["system"] = system
    if request.tools:
        body["tools"] = tool_specs_to_anthropic(request.tools)
    choice = tool_choice_to_anthropic(request.tool_choice, request.tools)
    if choice is not None:
        body["tool_choice"] = choice
    body.update((k, v) for k, v in options.items() if v is not None)  # None: "do not send"
    return body


def _max_tokens(request: ProviderRequest, options: Mapping[str, Any]) -> int:
    if request.max_tokens is not None:
        if request.max_tokens < 1:
            raise AdapterError("max_tokens must be at least 1")
        return request.max_tokens
    thinking = options.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        return budget + DEFAULT_MAX_TOKENS
    return DEFAULT_MAX_TOKENS


# -- non-streaming response (pure) ------------------------------------------------------------


def message_from_anthropic(data: Any, *, provider: str = "anthropic") -> Message:
    """A Messages API response body -> the assistant Message (text, tool calls, reasoning).

    Server tool blocks are the provider's own business, not calls the caller answers. A body
    that does not fit the documented shape raises UpstreamError.
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[ReasoningBlock] = []
    try:
        for block in data["content"]:
            btype = block["type"]
            if btype == "text":
                texts.append(block["text"])
            elif btype == "tool_use":
                calls.append(ToolCall(id=block["id"], name=block["name"], arguments=block.get("input") or {}))
            elif btype == "thinking":
                reasoning.append(ReasoningBlock(text=block["thinking"], signature=block.get("signature") or None,
                                                provider=provider))
            elif btype == "redacted_thinking":
                reasoning.append(ReasoningBlock(redacted=block["data"], provider=provider))
        content = "".join(texts)
        fields = {"role": "assistant", "content": content, "tool_calls": tuple(calls), "reasoning": tuple(reasoning)}
        if not content and not calls:
            # An empty answer (only thinking, or max_tokens hit at once) is a fact to report.
            return Message.model_construct(tool_call_id=None, name=None, **fields)
        return Message(**fields)
    except (KeyError, TypeError, ValidationError) as exc:
        raise UpstreamError(f"{provider}: malformed response: {type(exc).__name__}: {exc}", provider=provider) from None


# -- errors: SDK and transport -> GatewayError, in one place ----------------------------------


@contextlib.contextmanager
def anthropic_errors(provider: str = "anthropic") -> Iterator[None]:
    """Map the SDK's errors before the body (DESIGN.md section 1): bad request 400, model 404,
    rate limit 429 with Retry-After, credentials and overload and 5xx 502, timeouts 504."""
    try:
        yield
    except GatewayError:
        raise
    except ValueError as exc:  # the SDK refusing a call, e.g. a non-streaming max_tokens too large
        raise RequestError(f"{provider}: {exc}", code="invalid_request", provider=provider) from exc
    except anthropic.APITimeoutError as exc:
        raise UpstreamTimeout(f"{provider}: request timed out", provider=provider) from exc
    except anthropic.APIConnectionError as exc:
        raise UpstreamError(f"{provider}: cannot connect ({exc.message})", code="upstream_unavailable",
                            retryable=True, provider=provider) from exc
    except anthropic.APIStatusError as exc:
        raise _status_error(exc, provider) from exc
    except anthropic.AnthropicError as exc:
        raise UpstreamError(f"{provider}: {type(exc).__name__}: {exc}", provider=provider) from exc
    except httpx2.TimeoutException as exc:
        raise UpstreamTimeout(f"{provider}: request timed out", provider=provider) from exc
    except httpx2.TransportError as exc:
        raise UpstreamError(f"{provider}: transport error ({type(exc).__name__})", code="upstream_unavailable",
                            retryable=True, provider=provider) from exc


def _status_error(exc: anthropic.APIStatusError, provider: str) -> UpstreamError:
    status = exc.status_code
    detail = exc.api_message or exc.message
    extra = {"provider": provider, "upstream_status": status, "upstream_type": exc.type,
             "request_id": exc.request_id}
    if status == 429:
        return UpstreamRateLimited(f"{provider}: rate limited: {detail}",
                                   retry_after=exc.response.headers.get("retry-after"), **extra)
    if status in (401, 403):
        # The gateway's credentials failed: our problem (502), never the caller's 401.
        return UpstreamError(f"{provider}: upstream refused the gateway's credentials ({status})",
                             code="upstream_auth", **extra)
    if status == 404:
        return UpstreamNotFound(f"{provider}: {detail}", **extra)
    if status == 408:
        return UpstreamTimeout(f"{provider}: upstream request timeout", **extra)
    if status == 529:
        return UpstreamError(f"{provider}: overloaded: {detail}", code="upstream_overloaded", retryable=True, **extra)
    if status >= 500:
        return UpstreamError(f"{provider}: upstream error {status}: {detail}", retryable=True, **extra)
    return UpstreamBadRequest(f"{provider}: {detail}", **extra)


# -- the adapter ------------------------------------------------------------------------------


class AnthropicAdapter:
    """Messages API through an injected `AsyncAnthropic`; streams are read as raw bytes."""

    def __init__(self, client: anthropic.AsyncAnthropic, *, name: str = "anthropic", owns_client: bool = False) -> None:
        self.name = name
        self._client = client
        self._owns_client = owns_client

    def ready(self) -> bool:
        return True  # built only when a key or a client is configured (build_anthropic)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()

    def _sdk_arguments(self, request: ProviderRequest) -> dict[str, Any]:
        """`messages.create()` keywords: the fields it requires, the rest of the body as extra_body."""
        body = build_anthropic_request(request, provider=self.name)
        required = {k: body.pop(k) for k in ("model", "max_tokens", "messages")}
        return {**required, "extra_body": body}

    async def open_stream(self, request: ProviderRequest) -> SSEPatchStream:
        """Send the request; raise GatewayError for anything known before the body starts."""
        try:
            arguments = self._sdk_arguments(request)
        except AdapterError as exc:
            raise RequestError(f"{self.name}: {exc}", provider=self.name) from None
        manager = self._client.messages.with_streaming_response.create(**arguments, stream=True)
        # Entered by hand: errors before the body raise from here (HTTP errors to the caller),
        # and the stream's aclose() exits it, which closes the upstream connection.
        with anthropic_errors(self.name):
            response = await manager.__aenter__()
            http = response.http_response
            if http.headers.get("content-type", "").startswith("application/json"):
                body = (await http.aread())[:500].decode("utf-8", "replace")
                await manager.__aexit__(None, None, None)
                raise UpstreamError(f"{self.name}: expected an event stream, got JSON: {body}", provider=self.name)

        async def close() -> None:
            await manager.__aexit__(None, None, None)

        return SSEPatchStream(http.aiter_bytes(), AnthropicNormalizer(), close=close, provider=self.name)

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> Message:
        """One non-streaming call -> the assistant message, with tool calls and reasoning.

        Further keywords are Messages API fields (`thinking`, `metadata`, ...), as
        `provider_options` are; AdapterError for anything outside the schema.
        """
        request = ProviderRequest(model=model, messages=tuple(messages), tools=tuple(tools),
                                  tool_choice=tool_choice, max_tokens=max_tokens, options=options)
        arguments = self._sdk_arguments(request)
        with anthropic_errors(self.name):
            raw = await self._client.messages.with_raw_response.create(**arguments)
            body = await raw.read()
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"{self.name}: the response is not JSON", provider=self.name) from None
        return message_from_anthropic(data, provider=self.name)


# -- registry builder -------------------------------------------------------------------------


def build_anthropic(settings: Settings, clients: Mapping[str, Any]) -> dict[str, ProviderAdapter]:
    """`anthropic` from an injected client, else from ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL."""
    client = clients.get("anthropic")
    if client is not None:
        return {"anthropic": AnthropicAdapter(client)}
    if settings.anthropic_api_key is None:
        return {}
    client = anthropic.AsyncAnthropic(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        max_retries=settings.upstream_max_retries,  # only before a response starts: no duplicate output
        timeout=httpx2.Timeout(settings.read_timeout, connect=settings.connect_timeout),
    )
    return {"anthropic": AnthropicAdapter(client, owns_client=True)}
