"""HTTP request and response shapes. The request is checked here, at the edge, once."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.auth.policy import TOOL_PATTERN_RE
from app.core.errors import AttemptData, ErrorData, RequestError
from app.core.events import EVENT_SCHEMAS, FinalPayload, UsageData
from app.core.messages import Message, ReasoningBlock, Role, ToolCall, ToolSpec, check_unique_tool_names
from app.core.parts import CacheControl, TextPart
from app.core.safejson import first_surrogate
from app.routing.config import Deadlines
from app.validation import ValidatorSpec

__all__ = [
    "ErrorBody",
    "FinalPayload",
    "GenerateRequest",
    "StreamAccepted",
    "Transcript",
    "EVENT_SCHEMAS",
]

_STRICT = ConfigDict(extra="forbid")


def refuse_invalid_unicode(body: Any) -> None:
    """422 naming the first string (value or key, at any depth) that is not valid Unicode: a lone
    surrogate, which JSON's `\\udXXX` escapes can carry but no UTF-8 encoder can write."""
    try:
        orjson.dumps(body)
        return  # it all encodes as UTF-8: no surrogate anywhere (checked in C, far cheaper than the
        # walk below, whose cost grows with the conversation: docs/performance.md)
    except TypeError:  # orjson's encode error: a surrogate, or only a type it does not take; the walk says
        pass
    stack: list[tuple[Any, tuple[str, ...]]] = [(body, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            bad = first_surrogate(node)
            if bad >= 0:
                field = ".".join(path) or "body"
                raise RequestError(f"{field}: not valid Unicode (a lone surrogate at character {bad})",
                                   status=422, code="invalid_unicode", field=field)
        elif isinstance(node, dict):
            for key, value in node.items():
                key = str(key)
                if first_surrogate(key) >= 0:
                    field = ".".join(path) or "body"
                    raise RequestError(f"{field}: a key is not valid Unicode (a lone surrogate)",
                                       status=422, code="invalid_unicode", field=field)
                stack.append((value, (*path, key)))
        elif isinstance(node, list):
            stack.extend((item, (*path, str(i))) for i, item in enumerate(node))


class GenerateRequest(BaseModel):
    """One schema for POST /v1/generate and POST /v1/stream. Unknown fields are rejected."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": "mock/tool_call",
                    "messages": [{"role": "user", "content": "What is 2+2?"}],
                }
            ]
        },
    )

    model: str = Field(min_length=1, max_length=256, description="`provider/model` or a configured alias.")
    messages: list[Message] = Field(min_length=1, max_length=10_000)
    tools: list[ToolSpec] = Field(default_factory=list, max_length=512)
    tool_choice: Literal["auto", "none", "required"] | str | None = Field(
        default=None, description="`auto`, `none`, `required`, or the name of a tool the model must call."
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, strict=True, description="Defaults to 0 (deterministic).")
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)
    stop: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=16,
        description="Stop sequences: OpenAI `stop`, Anthropic `stop_sequences`, Gemini `stopSequences`.")
    parallel_tool_calls: bool | None = Field(
        default=None, description="`false`: at most one tool call per response (OpenAI `parallel_tool_calls`, "
                                  "Anthropic `disable_parallel_tool_use`); refused where a provider has no such switch.")
    cache_control: dict[str, Any] | None = Field(
        default=None, description="Anthropic's top-level prompt-cache breakpoint; a no-op where the provider caches "
                                  "by itself.")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="Structured output: a JSON Schema the answer follows (Anthropic "
                                  "`output_config.format`, OpenAI `response_format`, Gemini `responseJsonSchema`).")
    validators: list[ValidatorSpec] = Field(
        default_factory=list, max_length=32,
        description="Chunk validators for this request, added to the operator's (which always apply).",
    )
    chunking: Literal["sentence", "word", "paragraph", "none"] | None = Field(
        default=None, description="How validated text is cut into chunks; `sentence` when validators are set."
    )
    mcp_tools: list[Annotated[str, Field(pattern=TOOL_PATTERN_RE)]] | None = Field(
        default=None, max_length=256,
        description="Narrows the MCP tools offered to this run: `server__tool`, `server__*`, `*` (never widens "
                    "the key's `mcp_tools`); `[]`: none. Absent: every MCP tool the key may use.")
    max_steps: int | None = Field(
        default=None, ge=1, le=100, strict=True,
        description="Most provider calls this run may make when the gateway runs tools (each call of a gateway "
                    "tool is answered and the model called again). Defaults to, and may not exceed, the "
                    "operator's FOUNDRY_MAX_STEPS.",
    )
    stream: bool = Field(default=False, strict=True, description="POST /v1/generate only: answer 202 and run in the background.")
    cache: bool = Field(default=True, strict=True, description="`false`: the response cache neither answers nor keeps "
                        "this request (where the operator caches it; docs/caching.md).")
    on_disconnect: Literal["cancel", "continue"] = Field(
        default="cancel",
        description="What a client leaving does (POST /v1/stream, and POST /v1/generate answering JSON). `cancel` "
                    "ends the run and closes the upstream request, at any moment, before the first token included; "
                    "`continue` lets it run to its end (bounded by its timeouts) so the client can resume by id at "
                    "GET /v1/stream/{id}. A client that leaves before the response began never learned the stream's "
                    "id: its run is cancelled either way. Background runs (/v1/generate with `stream: true`) always "
                    "continue.",
    )
    timeouts: Deadlines | None = Field(
        default=None,
        description="Deadlines for this run in seconds (`first_token`, `idle`, `total`), within the operator's caps; "
                    "defaults come from the route, then the operator.",
    )
    provider_options: dict[str, Any] = Field(
        default_factory=dict, description="Provider-specific extras, passed to the provider explicitly."
    )

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        refuse_invalid_unicode(data)
        return data

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        check_unique_tool_names(tools)
        return tools

    @field_validator("tool_choice")
    @classmethod
    def _choice_names_a_tool(cls, choice: str | None, info: ValidationInfo) -> str | None:
        names = {t.name for t in info.data.get("tools", ())}
        if choice not in (None, "auto", "none", "required") and choice not in names:
            raise ValueError(f"tool_choice names {choice!r}, which is not among tools")
        return choice


class StreamAccepted(BaseModel):
    stream_id: str
    stream_url: str


class CancelResult(BaseModel):
    stream_id: str
    status: Literal["cancelled", "cancelling", "finished"] = Field(
        description="`cancelled`: the run ended here with `final{status: \"cancelled\"}`; `cancelling`: the "
                    "replica running it was told and ends it within a second; `finished`: it had already ended "
                    "(a no-op)."
    )


class ErrorBody(BaseModel):
    error: ErrorData


# -- GET /v1/stream/{id}/transcript -----------------------------------------------------------


class TranscriptToolCall(BaseModel):
    """One tool call tracked by its id; its output is matched to it by the same id."""

    id: str
    name: str
    state: Literal["in_progress", "complete", "has_output"]
    step: int
    origin: Literal["stream", "request"] = Field(description="`request`: a call in the request's messages.")
    server: bool = Field(description="Run by the provider itself (web search, code execution, ...).")
    gateway: bool = Field(description="Run by the gateway (a registered tool).")
    input: dict[str, Any] | None = Field(description="The parsed arguments, once the call is complete.")
    fragments: list[str] = Field(description="The argument fragments as received.")
    fragment_count: int
    output: str | None
    is_error: bool
    output_source: Literal["provider", "gateway", "caller"] | None = Field(
        description="Who produced the output: the provider's stream, the gateway, or the caller's `tool` message."
    )
    created_at: datetime
    completed_at: datetime | None
    output_at: datetime | None


class TranscriptMessage(BaseModel):
    """A classified message: thinking, assistant_text (the text of a turn that calls tools), tool_call and
    tool_output are reasoning messages; response is the text of a turn that calls none."""

    id: str = Field(description="The call id for tool_call and tool_output; `msg_<n>` for text.")
    type: Literal["thinking", "assistant_text", "tool_call", "tool_output", "response"]
    step: int
    turn: int
    content: Any = Field(description="Text, or the tool's input/output as shaped by its display processor.")
    timestamp: datetime


class UnmatchedOutput(BaseModel):
    tool_call_id: str
    name: str
    content: str
    is_error: bool
    source: str


class RecordedMedia(BaseModel):
    """An image or document part as a transcript keeps it: its bytes only with
    FOUNDRY_RECORD_MEDIA_BYTES (and FOUNDRY_RECORD_CONTENT); a URL as sent."""

    type: Literal["image", "document"]
    media_type: str | None = None
    url: str | None = None
    size: int | None = Field(default=None, description="Bytes of base64 data.")
    sha256: str | None = Field(default=None, description="SHA-256 of those bytes, hex.")
    data: str | None = Field(default=None, description="Base64, only when the operator keeps media bytes.")
    title: str | None = None
    detail: str | None = None
    cache_control: CacheControl | None = None


class RecordedMessage(BaseModel):
    """A request message as a transcript keeps it (a `Message`, media parts as `RecordedMedia`)."""

    role: Role
    content: str | list[TextPart | RecordedMedia] = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: list[ReasoningBlock] = Field(default_factory=list)


class Transcript(BaseModel):
    """The record of a stream, for redisplay: live while the stream is kept, then from the record store."""

    stream_id: str
    model: str
    provider: str
    created_at: datetime
    status: Literal["running", "ok", "blocked", "error", "cancelled"]
    stop_reason: str | None
    steps: int
    usage: UsageData = Field(description="Summed over the steps so far.")
    request_messages: list[RecordedMessage]
    reasoning_messages: list[TranscriptMessage]
    response_messages: list[TranscriptMessage]
    tool_calls: list[TranscriptToolCall]
    unmatched_outputs: list[UnmatchedOutput] = Field(description="Outputs whose call was never seen.")
    truncated: bool = Field(description="The stream outgrew the transcript's limits; later content is missing.")
    attempts: list[AttemptData] = Field(
        default_factory=list, description="A recorded run's upstream attempts before its first content (retries, "
                                          "fallbacks, hedges) with their timings, as its final gave them.")
    content_recorded: bool = Field(
        default=True, description="False: served from a record kept without content (FOUNDRY_RECORD_CONTENT=false); "
                                  "every content field (message text, tool inputs, fragments, outputs) is null or empty.")
