"""What was released, rebuilt from the released events alone: the one owner of the assistant
message and of the turns.

The run feeds it every event the gate released (as the transcript sees them). It keeps the open
turn (answer text, reasoning blocks, the completed calls the caller answers) and the history of
closed turns: a result that closes the turn (`ToolResultEvent.closes_turn`: the one turn rule,
decided where the result is made) ends it, and joins the history after it, among the turn's
results in the order of its calls (the reference mock: the final message is the answer after
the tool result; the gateway's results, which come as they finish). A reasoning block is closed by a
`ReasoningBlockEnd` marker carrying the block as the provider sent it; a block whose released text
differs (redacted by a validator, or cut by a block) loses its signature, which would no longer
verify upstream. Redactions of text and tool arguments are already in the released events.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.core.accumulator import Accumulator
from app.core.ending import final_event
from app.core.errors import ErrorData, FinalStatus
from app.core.events import (
    AssistantMessage,
    FinalEvent,
    ReasoningBlockEnd,
    ReasoningEvent,
    StreamEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from app.core.messages import Message, ReasoningBlock, ToolCall

__all__ = ["Released"]


class Released:
    __slots__ = ("history", "provider", "_added", "_text", "_thinking", "_blocks", "_calls", "_answers_from",
                 "_answer_order")

    def __init__(self, *, provider: str | None = None) -> None:
        self.provider = provider
        self.history: list[Message] = []
        """Closed turns: assistant messages, then the results that closed them."""
        self._added = 0
        self._text: list[str] = []
        self._thinking: list[str] = []  # released text of the reasoning block not yet ended
        self._blocks: list[ReasoningBlock] = []
        self._calls: list[tuple[int, ToolCall]] = []  # (index, call): completed, caller-visible
        self._answers_from = 0  # where the results of the last closed turn begin in `history`
        self._answer_order: dict[str, int] = {}  # that turn's calls: id -> position

    @classmethod
    def of(cls, events: Iterable[StreamEvent], *, provider: str | None = None) -> Released:
        released = cls(provider=provider)
        for event in events:
            released.observe(event)
        return released

    def observe(self, event: StreamEvent) -> None:
        if isinstance(event, TokenEvent):
            self._text.append(event.content)
        elif isinstance(event, ReasoningEvent):
            if isinstance(event, ReasoningBlockEnd):
                self._end_block(event.block)
            else:
                self._thinking.append(event.content)
        elif isinstance(event, ToolCallEvent):
            if event.is_final and not event.server:
                self._calls.append((event.index, ToolCall(id=event.id, name=event.name,
                                                           arguments=event.arguments or {})))
        elif isinstance(event, ToolResultEvent) and event.closes_turn:
            self._close_turn()
            self._answer(event)

    def message(self) -> AssistantMessage:
        """The open turn as released; a reasoning block not ended (yet) has no signature."""
        reasoning = self._blocks
        if self._thinking:
            reasoning = [*reasoning, ReasoningBlock(text="".join(self._thinking), provider=self.provider)]
        return AssistantMessage(content="".join(self._text), tool_calls=tuple(c for _, c in sorted(
            self._calls, key=lambda item: item[0])), reasoning=tuple(reasoning))

    def final(self, accumulator: Accumulator, status: FinalStatus = "ok", *,
              error: ErrorData | None = None) -> FinalEvent:
        """One response's final: the message as released; the accumulator's usage, stop reason
        and model (the run builds its own, over its steps)."""
        return final_event(status, error, model=accumulator.model, provider=accumulator.provider,
                           message=self.message(), usage=accumulator.usage, stop_reason=accumulator.stop_reason,
                           content_filter=accumulator.content_filter)

    def end_turn(self) -> None:
        """The gateway answered the turn's calls (their results closed it as they came): the
        history so far is what the gateway added to the conversation."""
        self._added = len(self.history)

    @property
    def added(self) -> tuple[Message, ...]:
        """The messages the gateway added to the conversation (up to the last `end_turn`)."""
        return tuple(self.history[: self._added])

    def _end_block(self, block: ReasoningBlock) -> None:
        text = "".join(self._thinking)
        self._thinking = []
        self._blocks.append(block if text == block.text else block.model_copy(update={"text": text, "signature": None}))

    def _close_turn(self) -> None:
        if not (self._text or self._calls):
            return
        message = self.message()
        if message.content or message.tool_calls:
            self.history.append(Message(role="assistant", content=message.content, tool_calls=message.tool_calls,
                                        reasoning=message.reasoning))
        self._answers_from = len(self.history)
        self._answer_order = {call.id: n for n, call in enumerate(message.tool_calls)}
        self._text, self._calls, self._blocks = [], [], []

    def _answer(self, event: ToolResultEvent) -> None:
        """The result joins the history among the closed turn's results, in the order of its calls."""
        order, history = self._answer_order, self.history
        rank = order.get(event.tool_call_id, len(order))
        at = len(history)
        while at > self._answers_from and order.get(history[at - 1].tool_call_id or "", len(order)) > rank:
            at -= 1
        history.insert(at, _tool_message(event.tool_call_id, event.name, event.content, event.is_error))


def _tool_message(call_id: str, name: str, content: str, is_error: bool = False) -> Message:
    # model_construct: an empty tool output is a fact to record, not caller input to refuse.
    return Message.model_construct(role="tool", content=content, tool_call_id=call_id, name=name, tool_calls=(),
                                   reasoning=(), is_error=is_error)
