"""Foundry messages, tool specs and tool calls: the provider-independent conversation.

Models are immutable once built and reject unknown fields, so a typo never passes silently.
Provider converters are pure functions that raise `AdapterError` on anything outside this schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from app.core.parts import CONTENT_TAGS, CacheControl, ContentPart, TextPart, join_text

__all__ = [
    "AdapterError",
    "ContentPart",
    "FrozenDict",
    "Message",
    "ReasoningBlock",
    "Role",
    "ToolCall",
    "ToolSpec",
    "assistant_message",
    "freeze",
    "thaw",
]

Role = Literal["system", "user", "assistant", "tool"]
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class AdapterError(ValueError):
    """Data outside the Foundry schema, met while converting to or from a provider format;
    `field` names the request field at fault (`messages.0.content.1.url`) when one is."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class FrozenDict(dict):
    """A dict that refuses mutation; equal to any mapping with the same content.

    A dict subclass (not MappingProxyType) so that orjson and pydantic serialise it as an object.
    """

    __slots__ = ()

    def _readonly(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("FrozenDict is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]
    __ior__ = _readonly  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(orjson.dumps(thaw(self), option=orjson.OPT_SORT_KEYS))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


def freeze(value: Any) -> Any:
    """Deep-freeze JSON-like data: mappings become FrozenDict, lists become tuples."""
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, Mapping):
        return FrozenDict({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of `freeze`: plain dicts and lists, ready for a provider payload."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _json_object(value: Any) -> FrozenDict:
    if not isinstance(value, Mapping):
        raise ValueError("must be a JSON object")
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise ValueError(f"must be JSON-serialisable: {exc}") from exc
    return freeze(value)


JsonObject = Annotated[dict[str, Any], AfterValidator(_json_object)]

_FROZEN = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


MAX_PARTS = 1000
"""Parts per message: far above what providers take (Anthropic: 100 images per request)."""


def _content_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return CONTENT_TAGS[0]
    return CONTENT_TAGS[1] if isinstance(value, (list, tuple)) else None


# A string or a list of parts, told apart by the input's type, so that a bad part is reported as
# that part's problem alone (`messages.0.content.1.data`, app/api/errors.py drops the tags), not as
# "not a string" too.
MessageContent = Annotated[
    Annotated[str, Tag(CONTENT_TAGS[0])] | Annotated[tuple[ContentPart, ...], Field(max_length=MAX_PARTS), Tag(CONTENT_TAGS[1])],
    Discriminator(_content_kind, custom_error_type="content_type",
                  custom_error_message="content must be a string or a list of parts"),
]


class ToolCall(BaseModel):
    """One call of a tool by the model; arguments are an immutable JSON object."""

    model_config = _FROZEN

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: JsonObject = Field(default_factory=FrozenDict)
    cache_control: CacheControl | None = Field(default=None, description="A prompt-cache breakpoint on the call "
                                               "(Anthropic's `tool_use` block); a no-op elsewhere.")


class ReasoningBlock(BaseModel):
    """A reasoning (thinking) block kept on an assistant message for a faithful round trip.

    Providers that sign their reasoning (Anthropic) need it sent back unchanged with the next
    turn; providers that don't ignore it.
    """

    model_config = _FROZEN

    text: str = ""
    signature: str | None = None
    redacted: str | None = Field(default=None, description="Opaque redacted-thinking payload.")
    provider: str | None = None


class Message(BaseModel):
    """One Foundry message.

    Content is a non-empty string or a non-empty list of parts (text; images and documents in
    user and tool messages), except on an assistant message that carries tool calls.
    A tool message answers one tool call and names it by `tool_call_id`.
    """

    model_config = _FROZEN

    role: Role
    content: MessageContent = Field(
        default="", description="A string, or content parts: several text parts stay several.")
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = Field(default=None, min_length=1)
    name: str | None = None
    reasoning: tuple[ReasoningBlock, ...] = ()
    is_error: bool = Field(default=False, description="A tool message only: the tool failed and `content` says how.")
    cache_control: CacheControl | None = Field(default=None, description="A tool message only: a prompt-cache "
                                               "breakpoint on the result (Anthropic's `tool_result` block).")

    @model_validator(mode="after")
    def _check_shape(self) -> Message:
        if (self.is_error or self.cache_control is not None) and self.role != "tool":
            raise ValueError("only tool messages may carry is_error or cache_control")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages may carry tool_calls")
        if self.reasoning and self.role != "assistant":
            raise ValueError("only assistant messages may carry reasoning")
        if self.role == "tool":
            if not self.tool_call_id:
                raise ValueError("a tool message needs tool_call_id")
        elif self.tool_call_id is not None:
            raise ValueError("only tool messages may carry tool_call_id")
        if not self.content and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content must be a non-empty string or list of parts")
        if self.role in ("system", "assistant") and not isinstance(self.content, str):
            if any(not isinstance(part, TextPart) for part in self.content):
                raise ValueError(f"a {self.role} message carries text parts only")
        return self

    @property
    def text(self) -> str:
        """The content's text: the string, or the text parts joined with a blank line."""
        return join_text(self.content)

    @property
    def parts(self) -> tuple[ContentPart, ...]:
        """The content as parts (a string is one text part; an empty string none)."""
        if isinstance(self.content, str):
            return (TextPart(type="text", text=self.content),) if self.content else ()
        return self.content


class ToolSpec(BaseModel):
    """A tool the model may call: name, description and JSON-Schema parameters."""

    model_config = _FROZEN

    name: str = Field(pattern=TOOL_NAME_RE.pattern)
    description: str = ""
    parameters: JsonObject = Field(
        default_factory=lambda: freeze({"type": "object", "properties": {}})
    )
    strict: bool | None = Field(default=None, description="Ask for arguments that follow `parameters` exactly "
                                "(OpenAI `strict`, Anthropic strict tool use); None: the provider's default.")
    cache_control: JsonObject | None = Field(default=None, description="An Anthropic prompt-cache breakpoint "
                                             "after this tool (e.g. `{\"type\": \"ephemeral\"}`).")
    eager_input_streaming: bool | None = Field(default=None, description="Anthropic: stream this tool's "
                                               "arguments without buffering them (delivery only).")

    @field_validator("parameters")
    @classmethod
    def _check_schema(cls, params: FrozenDict) -> FrozenDict:
        if params.get("type", "object") != "object":
            raise ValueError("parameters must be a JSON Schema of type 'object'")
        properties = params.get("properties", FrozenDict())
        if not isinstance(properties, Mapping):
            raise ValueError("parameters.properties must be an object")
        required = params.get("required", ())
        if not isinstance(required, tuple) or not all(isinstance(r, str) for r in required):
            raise ValueError("parameters.required must be a list of strings")
        missing = [r for r in required if r not in properties]
        if missing:
            raise ValueError(f"required names missing from properties: {', '.join(missing)}")
        if len(set(required)) != len(required):
            raise ValueError("parameters.required lists a name twice")
        return params


def check_unique_tool_names(tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> None:
    """Raise ValueError when two tools share a name (providers reject it later, less clearly)."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ValueError(f"duplicate tool name: {tool.name}")
        seen.add(tool.name)


def assistant_message(content: str, tool_calls: Sequence[ToolCall], reasoning: Sequence[ReasoningBlock]) -> Message:
    """An assistant message as a provider answered it. An empty answer (only thinking, or the
    token budget spent at once) is a fact to report, not caller input to refuse: built unchecked."""
    if not content and not tool_calls:
        return Message.model_construct(role="assistant", content=content, tool_calls=tuple(tool_calls),
                                       reasoning=tuple(reasoning), tool_call_id=None, name=None)
    return Message(role="assistant", content=content, tool_calls=tuple(tool_calls), reasoning=tuple(reasoning))
