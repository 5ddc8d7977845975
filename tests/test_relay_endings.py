"""The chat relay's ending (app/api/compat/relay.py `ChatEnding`): the usage chunk a client did not
ask for is taken out of what goes to it, and the rest passes as sent, reading as few chunks as it
needs to (the first, for the stream's head; one that may be the usage chunk)."""

from __future__ import annotations

import orjson
import pytest

from app.api.compat import relay
from app.api.compat.relay import ChatEnding


def _chunk(i: int) -> bytes:
    return b"data: " + orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                                     "model": "m", "choices": [{"index": 0, "delta": {"content": f"t{i}"},
                                                                "finish_reason": None}], "usage": None}) + b"\n\n"


USAGE = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],' \
        b'"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []
    parse = relay._object
    monkeypatch.setattr(relay, "_object", lambda data: seen.append(data) or parse(data))
    return seen


def test_a_burst_is_read_once_for_its_head_and_once_for_its_usage_chunk(reads: list[bytes]) -> None:
    ending = ChatEnding(include_usage=False)
    first = b"".join(_chunk(i) for i in range(50))
    second = b"".join(_chunk(i) for i in range(50, 100)) + USAGE + DONE
    assert ending.feed(first) == first
    assert ending.feed(second) == b"".join(_chunk(i) for i in range(50, 100)) + DONE
    assert len(reads) == 2, [r[:60] for r in reads]  # the first chunk (its head), the usage chunk


def test_a_client_that_asked_for_usage_gets_it_and_nothing_is_read_past_the_head(reads: list[bytes]) -> None:
    ending = ChatEnding(include_usage=True)
    data = b"".join(_chunk(i) for i in range(20)) + USAGE + DONE
    assert ending.feed(data) == data
    assert len(reads) == 1


@pytest.mark.parametrize("usage", [
    b'data: {"id":"c","choices": [],"usage":{"total_tokens":4}}\n\n',  # not compact
    b'data: {"id":"c","usage":{"total_tokens":4}}\n\n',  # no choices at all
    b'data: {"id":"c","choices":null,"usage":{"total_tokens":4}}\n\n',
])
def test_a_usage_chunk_written_another_way_is_still_taken_out(usage: bytes) -> None:
    ending = ChatEnding(include_usage=False)
    head = _chunk(0)
    assert ending.feed(head) == head
    assert ending.feed(_chunk(1) + usage + DONE) == _chunk(1) + DONE
    assert ending.feed(_chunk(2) + b'data: {"id":"c","choices":[],"usage":null}\n\n') == _chunk(2)
