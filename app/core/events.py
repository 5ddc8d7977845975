"""The canonical events every stream is made of (DESIGN.md section 1).

`start` first, then `token`, `reasoning`, `tool_call`, `tool_result` in any order, and exactly
one `final` last. Events are frozen (many readers share them); `data()` is the SSE payload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, cast, get_args

from pydantic import Field, WithJsonSchema
from typing_extensions import TypedDict

from app.core.content_filter import ContentFilterData
from app.core.errors import AttemptData, ErrorData, FinalStatus
from app.core.messages import Message, ReasoningBlock, ToolCall, thaw
from app.core.usage import Usage, UsageData
from app.core.validation_data import JudgeUsageData, ValidationData

__all__ = [
    "EVENT_SCHEMAS", "CacheData",
    "FINAL_STATUSES",
    "FinalPayload",
    "JudgeUsageData",
    "ValidationData",
    "STOP_REASONS",
    "STOP_REASON_FOR_STATUS",
    "AssistantMessage",
    "FinalEvent",
    "FinalStatus",
    "ReasoningBlockEnd",
    "ReasoningEvent",
    "RelayedFrame",
    "StartEvent",
    "StopReason",
    "StreamEvent",
    "TokenEvent",
    "token_event",
    "ToolCallEvent",
    "ToolResultEvent",
    "Usage",
]

StopReason = Literal["stop", "length", "tool_calls", "content_filter", "pause", "error", "cancelled"]
STOP_REASONS: tuple[str, ...] = get_args(StopReason)
FINAL_STATUSES: tuple[str, ...] = get_args(FinalStatus)
STOP_REASON_FOR_STATUS: dict[str, StopReason] = {"blocked": "content_filter", "error": "error", "cancelled": "cancelled"}
"""The stop reason of a run that did not end ok: a block (a validator or the provider refused the content) is a
content filter, as providers themselves report it."""

# -- the `data` of each event: one definition, for the SSE bytes (`data()`) and the OpenAPI schemas --

class StartData(TypedDict):
    stream_id: str
    model: str
    provider: str


class TokenData(TypedDict):
    index: Annotated[int, Field(description="Counts token events of the stream from 0.")]
    content: str
    refusal: NotRequired[Annotated[bool, Field(description="Present (true): the model's refusal, not an answer.")]]


class ReasoningData(TypedDict):
    index: Annotated[int, Field(description="Counts reasoning events of the stream from 0.")]
    content: str


class ToolCallData(TypedDict):
    id: str
    name: str
    index: Annotated[int, Field(description="The call's position among the stream's tool calls, from 0.")]
    args_fragment: str
    is_final: bool
    arguments: NotRequired[Annotated[dict[str, Any] | None, Field(description="Parsed arguments; on the final fragment only.")]]
    server: NotRequired[Annotated[bool, Field(description="True for tools the provider runs itself.")]]


class ToolResultData(TypedDict):
    tool_call_id: str
    name: str
    content: str
    is_error: bool


class ToolCallOut(TypedDict):
    id: str
    name: str
    arguments: dict[str, Any]


class ReasoningBlockData(TypedDict):
    text: str
    signature: NotRequired[str]
    redacted: NotRequired[Annotated[str, Field(description="Opaque redacted-thinking payload.")]]
    provider: NotRequired[str]


class AssistantMessageOut(TypedDict):
    role: Literal["assistant"]
    content: str
    tool_calls: list[ToolCallOut]
    reasoning: NotRequired[list[ReasoningBlockData]]


MessageData = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/Message"})]
"""A `Message` as JSON (the request's message schema)."""


class FinalPayload(TypedDict):
    """The `final` event's data, and the JSON answer of POST /v1/generate."""

    status: FinalStatus
    message: AssistantMessageOut
    usage: UsageData
    stop_reason: StopReason | None
    model: str
    provider: str
    error: NotRequired[ErrorData]
    steps: Annotated[int, Field(description="Provider calls the run made (more than 1 when the gateway ran tools).")]
    max_steps_reached: Annotated[bool, Field(
        description="The run stopped at max_steps after running tools (stop_reason `pause`): append `messages` "
                    "and send again to continue.")]
    messages: NotRequired[Annotated[list[MessageData], Field(
        description="Present when the gateway ran tools: the messages the run added to the conversation "
                    "(assistant turns and the gateway's tool results), to append before a next request. "
                    "The caller then answers `message.tool_calls`, if any.")]]
    validation: NotRequired[Annotated[ValidationData, Field(
        description="Present when validators ran: chunks, redactions and verdicts per validator.")]]
    attempts: NotRequired[Annotated[list[AttemptData], Field(
        description="Every upstream attempt before the first content (retries, fallbacks, hedges).")]]
    route: NotRequired[Annotated[str, Field(description="The route the request named.")]]
    target: NotRequired[Annotated[str, Field(description="The route's target that served (`provider/model`).")]]
    cache: NotRequired[Annotated[CacheData, Field(description="From the response cache (hit, age_s, charged).")]]
    content_filter: NotRequired[Annotated[ContentFilterData, Field(
        description="The provider's content-filter annotations (Azure OpenAI), when it sent any.")]]


class CacheData(TypedDict):
    hit: bool
    age_s: float
    charged: bool  # counted against the key's budget and tpm (the rule's `charge`)


class _ErrorPart(TypedDict, total=False):
    error: ErrorData


EVENT_SCHEMAS: dict[str, Any] = {
    "start": StartData,
    "token": TokenData,
    "reasoning": ReasoningData,
    "tool_call": ToolCallData,
    "tool_result": ToolResultData,
    "final": FinalPayload,
}
"""Each event type's `data` schema (the OpenAPI document names them)."""


@dataclass(slots=True, frozen=True, kw_only=True)
class AssistantMessage:
    """The assistant message as released: text, the calls the caller must answer, reasoning."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[ReasoningBlock, ...] = ()

    def to_dict(self) -> AssistantMessageOut:
        out: AssistantMessageOut = {
            "role": "assistant",
            "content": self.content,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": thaw(c.arguments)} for c in self.tool_calls
            ],
        }
        if self.reasoning:
            out["reasoning"] = [cast(ReasoningBlockData, b.model_dump(exclude_none=True)) for b in self.reasoning]
        return out


@dataclass(slots=True, frozen=True, kw_only=True)
class StartEvent:
    type: Literal["start"] = "start"
    stream_id: str
    model: str
    provider: str

    def data(self) -> StartData:
        return {"stream_id": self.stream_id, "model": self.model, "provider": self.provider}


@dataclass(slots=True, frozen=True, kw_only=True)
class TokenEvent:
    """A text delta; `index` counts token events of the stream from 0."""

    type: Literal["token"] = "token"
    index: int
    content: str
    refusal: bool = False  # the model's refusal (OpenAI's `refusal` field), not its answer

    def data(self) -> TokenData:
        data: TokenData = {"index": self.index, "content": self.content}
        return {**data, "refusal": True} if self.refusal else data


_new_object = object.__new__
_TOKEN_SLOTS = TokenEvent.__dict__
_set_type, _set_index, _set_content, _set_refusal = (
    _TOKEN_SLOTS[name].__set__ for name in ("type", "index", "content", "refusal"))


def token_event(index: int, content: str, refusal: bool = False) -> TokenEvent:
    """`TokenEvent(index=index, content=content, refusal=refusal)` on the hot path (one per answer
    token): the frozen dataclass's own `__init__` is a Python frame that calls `object.__setattr__`
    once per field; this sets the same slots through their descriptors (the same object)."""
    event = _new_object(TokenEvent)
    _set_type(event, "token")
    _set_index(event, index)
    _set_content(event, content)
    _set_refusal(event, refusal)
    return event


@dataclass(slots=True, frozen=True, kw_only=True)
class ReasoningEvent:
    """A reasoning (thinking) delta, kept apart from the answer; `index` counts from 0."""

    type: Literal["reasoning"] = "reasoning"
    index: int
    content: str

    def data(self) -> ReasoningData:
        return {"index": self.index, "content": self.content}


@dataclass(slots=True, frozen=True, kw_only=True)
class ReasoningBlockEnd(ReasoningEvent):
    """Internal to the pipeline, never written to SSE: a reasoning block ended. `block` is the
    block as the provider sent it (its signature or redacted payload must round-trip into the
    next request); it follows the block's text through the gate, so what was released can be
    rebuilt from the released events alone (app/core/released.py)."""

    index: int = -1
    content: str = ""
    block: ReasoningBlock


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolCallEvent:
    """A fragment of one call's JSON arguments; the last has is_final and the parsed arguments.
    `index` is the call's position among the stream's tool calls, from 0."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    index: int
    args_fragment: str
    is_final: bool = False
    arguments: dict[str, Any] | None = None
    server: bool = False

    def data(self) -> ToolCallData:
        out: ToolCallData = {
            "id": self.id,
            "name": self.name,
            "index": self.index,
            "args_fragment": self.args_fragment,
            "is_final": self.is_final,
        }
        if self.is_final:
            out["arguments"] = thaw(self.arguments) if self.arguments is not None else None
        if self.server:
            out["server"] = True
        return out


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolResultEvent:
    """The output of a call, matched to it by id.

    `closes_turn` is internal (never in `data()`, so never on the wire): the result answers a
    call the model made for someone else to answer (not a server tool), so the assistant's turn
    that made the call is over and what follows is a new turn. Decided once, where the result is
    made (the accumulator for results in the provider's stream, the gateway's tools for theirs);
    the gate, what was released (app/core/released.py) and the transcript all follow it."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    closes_turn: bool = False

    def data(self) -> ToolResultData:
        return {
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "content": self.content,
            "is_error": self.is_error,
        }


@dataclass(slots=True, frozen=True, kw_only=True)
class FinalEvent:
    """Always last, exactly once. `error` is set unless status is "ok"; `data()` is `FinalPayload`."""

    type: Literal["final"] = "final"
    status: FinalStatus
    message: AssistantMessage
    usage: Usage
    stop_reason: StopReason | None
    model: str
    provider: str
    error: ErrorData | None = None
    steps: int = 1
    max_steps_reached: bool = False
    messages: tuple[Message, ...] = ()
    """The messages a run with gateway-executed tools added to the conversation."""
    validation: ValidationData | None = None
    attempts: tuple[AttemptData, ...] = ()
    """The upstream attempts of the run's route (app/routing)."""
    route: str | None = None
    target: str | None = None
    """For a route: its name and the target that served."""
    cache: CacheData | None = None  # set on a run the response cache answered (app/cache)
    content_filter: ContentFilterData | None = None  # the provider's filter annotations (Azure)

    def data(self) -> FinalPayload:
        error: _ErrorPart = {"error": self.error} if self.error is not None else {}
        out: FinalPayload = {
            "status": self.status,
            "message": self.message.to_dict(),
            "usage": self.usage.to_dict(),
            "stop_reason": self.stop_reason,
            "model": self.model,
            "provider": self.provider,
            **error,
            "steps": self.steps,
            "max_steps_reached": self.max_steps_reached,
        }
        if self.messages:
            out["messages"] = [m.model_dump(mode="json", exclude_defaults=True) for m in self.messages]
        if self.validation is not None:
            out["validation"] = self.validation
        if self.attempts:
            out["attempts"] = list(self.attempts)
        if self.route is not None:
            out["route"] = self.route
        if self.target is not None:
            out["target"] = self.target
        if self.cache is not None:
            out["cache"] = self.cache
        if self.content_filter is not None:
            out["content_filter"] = self.content_filter
        return out


@dataclass(slots=True, frozen=True, kw_only=True)
class RelayedFrame:
    """Internal to the pipeline, never written to the log: a provider's own event (its SSE frame)
    that a same-wire facade relays. It passes the gate in order, behind any held text, and goes to
    the run's relay (app/streams/relay.py) instead of the log."""

    type: Literal["relay"] = "relay"
    frame: bytes

    def data(self) -> dict[str, str]:
        return {"frame": self.frame.decode("utf-8", "replace")}


StreamEvent = StartEvent | TokenEvent | ReasoningEvent | ToolCallEvent | ToolResultEvent | FinalEvent | RelayedFrame
