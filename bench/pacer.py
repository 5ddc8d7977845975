"""A fake OpenAI-compatible upstream that paces its tokens as a real model does (own process).

POST /v1/chat/completions with model `paced-<N>` streams N text deltas, the first at once and
then one every `--interval-ms` (20 ms: 50 tokens a second), then finish, usage and [DONE]. Each
delta carries the time it was written, `~<time.monotonic_ns()>~`, so a client on the same
machine knows each token's transit and the gap the upstream itself left between two tokens.

Streams are spread over the interval's millisecond slots (round robin) and one timer serves a
slot a millisecond: hundreds of streams cost one wake-up per millisecond, not one per token, so
the pacer stays light on a shared machine. asyncio protocols and httptools' request parser keep
its own cost per token to a socket write.

Usage: `python bench/pacer.py --port 9102 [--interval-ms 20]`; GET /healthz answers ok.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httptools
import orjson

_HEAD = {"id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": 1, "model": "paced"}
_RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _frame(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> bytes:
    body = dict(_HEAD, choices=[{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
                usage=usage)
    data = b"data: " + orjson.dumps(body) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


_ROLE = _frame({"role": "assistant", "content": ""})
_DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
_BEFORE_STAMP, _AFTER_STAMP = (b"data: " + orjson.dumps(
    dict(_HEAD, choices=[{"index": 0, "delta": {"content": " tok~STAMP~"}, "finish_reason": None}], usage=None))
    + b"\n\n").split(b"STAMP")


def _token() -> bytes:
    data = b"%s%d%s" % (_BEFORE_STAMP, time.monotonic_ns(), _AFTER_STAMP)
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Stream:
    __slots__ = ("transport", "left", "tokens")

    def __init__(self, transport: asyncio.Transport, tokens: int) -> None:
        self.transport, self.left, self.tokens = transport, tokens, tokens


class Pacer:
    """The slots and the one timer that serves them."""

    def __init__(self, interval_ms: int) -> None:
        self.slots: list[set[_Stream]] = [set() for _ in range(interval_ms)]
        self.next_slot = 0

    def add(self, stream: _Stream) -> None:
        self.slots[self.next_slot].add(stream)
        self.next_slot = (self.next_slot + 1) % len(self.slots)

    def remove(self, stream: _Stream) -> None:
        for slot in self.slots:
            slot.discard(stream)

    async def run(self) -> None:
        start, tick = time.monotonic(), 0
        while True:
            tick += 1
            # Behind schedule, the missed slots are served at once (the stamps tell the truth), each
            # after a yield so that requests and closes are still read.
            await asyncio.sleep(max(0.0, start + tick / 1000 - time.monotonic()))
            for stream in list(self.slots[tick % len(self.slots)]):
                self.emit(stream)

    def emit(self, stream: _Stream) -> bool:
        """Write the stream's next token (and its end after the last); whether more will follow."""
        stream.left -= 1
        if stream.left > 0:
            stream.transport.write(_token())
            return True
        usage = {"prompt_tokens": 5, "completion_tokens": stream.tokens, "total_tokens": stream.tokens + 5}
        stream.transport.write(_token() + _frame({}, finish="stop") + _frame({}, usage=usage, choices=False) + _DONE)
        self.remove(stream)
        return False


class _Upstream(asyncio.Protocol):
    def __init__(self, pacer: Pacer) -> None:
        self.pacer = pacer
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body = b""
        self.stream: _Stream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.connection_lost(None)
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.pacer.remove(self.stream)
            self.stream = None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        assert self.transport is not None
        url, body, self.url, self.body = self.url, self.body, b"", b""
        if url.endswith(b"/healthz"):
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            return
        model = orjson.loads(body).get("model", "paced-10")
        tokens = int(model.rpartition("-")[2] or 10)
        self.stream = _Stream(self.transport, tokens)
        self.transport.write(_RESPONSE + _ROLE)
        if self.pacer.emit(self.stream):  # the first token at once: the upstream's share of TTFT is 0
            self.pacer.add(self.stream)


async def serve(port: int, interval_ms: int) -> None:
    pacer = Pacer(interval_ms)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Upstream(pacer), "127.0.0.1", port, backlog=2048)
    async with server:
        await pacer.run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval-ms", type=int, default=20)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port, args.interval_ms))
    else:
        uvloop.run(serve(args.port, args.interval_ms))


if __name__ == "__main__":
    main()
