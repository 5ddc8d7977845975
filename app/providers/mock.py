"""The embedded default provider: canned scenarios, no keys, no network.

Served as `mock/<scenario>`:
- `simple`: "Hello", ", world".
- `tool_call`: behaves like a model with a calculator: when the last message is not a tool
  result it says "Calling calculator" and calls `calculator` (arguments in two fragments,
  stop_reason tool_calls); when it is, it answers "Sum is <result>". With the gateway's built-in
  calculator (on for `mock` by default) one request gives the reference scenario of
  reference/foundry-adapters.md, the result coming from the gateway's execution.
- `echo`: the last user message back, word by word.
- `lorem-<N>`: N tokens of lorem ipsum (N up to 100 000), made lazily, for demos and load.

`conversation_chunks` is the whole scenario for the reference's `MockStreamIterator` /
`replay_stream` (app/providers/reference.py): for `tool_call` the conversation the gateway would
play, a calculator's result between the steps. Providers do not
import tools (DESIGN.md section 3): that calculator is the mock's own two-operand arithmetic
(`arithmetic`, enough for the expressions the mock itself writes), or one the caller passes in.

`provider_options` (all optional): `delay_ms` between chunks, so a terminal shows the stream
arriving; `fail_after` (N) breaks the stream after N chunks with a retryable upstream error, to
see an honest `final{status: "error"}` without a real provider.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from app.core.accumulator import Accumulator
from app.core.errors import RequestError, UpstreamError, UpstreamNotFound
from app.core.events import StopReason
from app.core.messages import Message
from app.core.patches import (
    MessageDelta,
    MessageEnd,
    MessageStart,
    Patch,
    TextDelta,
    ToolDelta,
    ToolEnd,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    ToolStart,
    UsagePatch,
)
from app.core.released import Released
from app.providers.base import ProviderAdapter, ProviderRequest

__all__ = [
    "build_mock",
    "SCENARIOS",
    "MockAdapter",
    "arithmetic",
    "conversation_chunks",
    "scenario_chunks",
    "scenario_stream",
]

SCENARIOS = ("simple", "tool_call", "echo", "lorem-<N>")
_LOREM_RE = re.compile(r"^lorem-(\d{1,12})$")
_LOREM = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua"
).split()
MAX_LOREM = 100_000
"""The cap of lorem-N: 100k tokens is about 8 MB of frames, the default per-stream log budget."""
_YIELD_EVERY = 64  # chunks between yields to the event loop: a long canned stream never holds it


def _words(text: str) -> list[str]:
    """Split keeping the spaces, so the tokens join back to the text exactly."""
    return re.findall(r"\s*\S+\s*", text) or [text]


def lorem_size(model: str) -> int | None:
    """N of `lorem-N`, checked against the cap (422 naming `model` past it); None for other names."""
    m = _LOREM_RE.match(model)
    if m is None:
        return None
    n = int(m.group(1))
    if n > MAX_LOREM:
        raise RequestError(f"model: mock/lorem-N accepts N up to {MAX_LOREM}, got {n}", code="invalid_model",
                           status=422, field="model")
    return n


def _lorem(model: str, n: int) -> Iterator[list[Patch]]:
    """lorem-N made as it is read: nothing is built up front, whatever N."""
    yield [MessageStart(id=f"mock-{model}", model=model, usage=UsagePatch(input_tokens=0))]
    for i in range(n):
        yield [TextDelta(text=(" " if i else "") + _LOREM[i % len(_LOREM)])]
    yield [MessageDelta(stop_reason="stop", usage=UsagePatch(output_tokens=n)), MessageEnd()]


def scenario_stream(model: str, messages: tuple = ()) -> Iterator[list[Patch]]:
    """The scenario's chunks, lazily for lorem-N; raises before the first chunk for bad names."""
    n = lorem_size(model)
    if n is None:
        return iter(scenario_chunks(model, messages))
    input_tokens = sum(len(m.text.split()) for m in messages)
    chunks = _lorem(model, n)
    first = next(chunks)
    first[0] = MessageStart(id=f"mock-{model}", model=model, usage=UsagePatch(input_tokens=input_tokens))
    return itertools.chain([first], chunks)


def scenario_chunks(model: str, messages: tuple = ()) -> list[list[Patch]]:
    """The scenario as upstream chunks (one list of patches per chunk). Pure and repeatable."""
    if model == "simple":
        texts = ["Hello", ", world"]
        chunks: list[list[Patch]] = [[TextDelta(text=t)] for t in texts]
        stop: StopReason = "stop"
    elif model == "tool_call":
        if messages and messages[-1].role == "tool":
            texts = [f"Sum is {messages[-1].text}"]
            chunks = [[TextDelta(text=texts[0])]]
            stop = "stop"
        else:
            call_id = f"call_mock_{1 + sum(len(m.tool_calls) for m in messages)}"  # unique in the conversation
            texts = ["Calling calculator"]
            chunks = [
                [TextDelta(text=texts[0])],
                [ToolStart(key="call", id=call_id, name="calculator"), ToolDelta(key="call", fragment='{"expression": ')],
                [ToolDelta(key="call", fragment='"2 + 2"}')],
                [ToolEnd(key="call")],
            ]
            stop = "tool_calls"
    elif model == "echo":
        last = next((m.text for m in reversed(messages) if m.role == "user"), "")
        texts = _words(last) if last else []
        chunks = [[TextDelta(text=t)] for t in texts]
        stop = "stop"
    elif lorem_size(model) is not None:
        return list(scenario_stream(model, messages))
    else:
        raise UpstreamNotFound(
            f"mock has no scenario {model!r}; try one of: {', '.join(SCENARIOS)}", provider="mock"
        )
    input_tokens = sum(len(m.text.split()) for m in messages)
    output_tokens = sum(len(t.split()) for t in texts)
    chunks.insert(0, [MessageStart(id=f"mock-{model}", model=model, usage=UsagePatch(input_tokens=input_tokens))])
    chunks.append([MessageDelta(stop_reason=stop, usage=UsagePatch(output_tokens=output_tokens)), MessageEnd()])
    return chunks


_OPERATORS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_ARITHMETIC_RE = re.compile(r"^\s*(-?\d{1,18})\s*([-+*])\s*(-?\d{1,18})\s*$")


def arithmetic(expression: str) -> str:
    """The mock's own calculator: `<int> <+|-|*> <int>`, what its `tool_call` scenario asks."""
    m = _ARITHMETIC_RE.match(expression)
    if m is None:
        return f"mock arithmetic takes '<int> <op> <int>', not {expression[:40]!r}"
    return str(_OPERATORS[m.group(2)](int(m.group(1)), int(m.group(3))))


def conversation_chunks(model: str, messages: tuple = (), *, max_steps: int = 8,
                        calculator: Callable[[str], str] = arithmetic) -> list[list[Patch]]:
    """The scenario played to its end as the gateway plays it with a calculator (the mock's own
    `arithmetic` unless one is given): each step's chunks with the calculator's results between
    them (as in-stream tool results), one message start and one end with the usage summed. Pure
    and repeatable."""
    out: list[list[Patch]] = []
    conversation = tuple(messages)
    input_tokens = output_tokens = 0
    stop = None
    for _ in range(max_steps):
        acc, released = Accumulator(model=model, provider="mock"), Released(provider="mock")
        for chunk in scenario_chunks(model, conversation):
            for event in acc.push_all(chunk):
                released.observe(event)
            body = [p for p in chunk if p.kind not in ("message_start", "message_delta", "message_end")]
            if body:
                out.append(body)
        usage, stop, message = acc.usage, acc.stop_reason, released.message()
        input_tokens += usage.input_tokens
        output_tokens += usage.output_tokens
        calls = [c for c in message.tool_calls if c.name == "calculator"]
        if not calls:
            break
        results = []
        for call in calls:
            result = calculator(str(call.arguments.get("expression", "")))
            out.append([ToolResultStart(key=f"result-{call.id}", tool_call_id=call.id, name=call.name),
                        ToolResultDelta(key=f"result-{call.id}", content=result),
                        ToolResultEnd(key=f"result-{call.id}")])
            results.append(Message(role="tool", content=result, tool_call_id=call.id, name=call.name))
        turn = Message(role="assistant", content=message.content, tool_calls=message.tool_calls)
        conversation = (*conversation, turn, *results)
    out.insert(0, [MessageStart(id=f"mock-{model}", model=model, usage=UsagePatch(input_tokens=input_tokens))])
    out.append([MessageDelta(stop_reason=stop, usage=UsagePatch(output_tokens=output_tokens)), MessageEnd()])
    return out


class _MockPatchStream:
    def __init__(self, chunks: Iterable[list[Patch]], *, delay: float, fail_after: int | None) -> None:
        self._chunks = chunks
        self._delay = delay
        self._fail_after = fail_after
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[list[Patch]]:
        try:
            for n, chunk in enumerate(self._chunks):
                if self._fail_after is not None and n >= self._fail_after:
                    raise UpstreamError("mock: stream broken on request (fail_after)",
                                        code="upstream_disconnected", retryable=True, provider="mock")
                if self._delay and n:
                    await asyncio.sleep(self._delay)
                elif n % _YIELD_EVERY == _YIELD_EVERY - 1:
                    await asyncio.sleep(0)
                yield chunk
        finally:
            self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class MockAdapter(ProviderAdapter):
    name = "mock"

    def ready(self) -> bool:
        return True

    async def open_stream(self, request: ProviderRequest) -> _MockPatchStream:
        options = request.options
        delay_ms = options.get("delay_ms", 0)
        fail_after = options.get("fail_after")
        if not isinstance(delay_ms, (int, float)) or not 0 <= delay_ms <= 10_000:
            raise RequestError("provider_options.delay_ms must be a number from 0 to 10000",
                               field="provider_options.delay_ms")
        if fail_after is not None and (not isinstance(fail_after, int) or fail_after < 0):
            raise RequestError("provider_options.fail_after must be a non-negative integer",
                               field="provider_options.fail_after")
        unknown = set(options) - {"delay_ms", "fail_after"}
        if unknown:
            raise RequestError(f"mock does not take provider_options {sorted(unknown)}",
                               field="provider_options")
        chunks = scenario_stream(request.model, request.messages)
        return _MockPatchStream(chunks, delay=delay_ms / 1000, fail_after=fail_after)


def build_mock(config: object, clients: object) -> dict[str, ProviderAdapter]:
    """The mock is always served (its descriptor's `build`)."""
    return {"mock": MockAdapter()}
