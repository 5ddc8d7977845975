"""Claude on Bedrock (`InvokeModelWithResponseStream`): every Anthropic recording, carried in AWS
`chunk` frames (tests/fixtures/bedrock-invoke), gives the same canonical events as the recording
itself, however its bytes are split; exception frames end the stream as Anthropic's errors."""

from __future__ import annotations

import pytest

from app.providers.anthropic_stream import AnthropicNormalizer
from app.providers.bedrock_invoke import InvokeStreamDecoder, invoke_body
from tests.cloud_support import cloud_recordings, run_frames
from tests.support import Recording, final_of, recordings, run_bytes

RECORDINGS = cloud_recordings("bedrock-invoke")
ANTHROPIC = {r.name: r for r in recordings("anthropic")}
CARRIED = [r for r in RECORDINGS if r.name in ANTHROPIC]
EXCEPTIONS = [r for r in RECORDINGS if r.name not in ANTHROPIC]


def events_of(chunks: list[bytes]) -> list[object]:
    return run_frames(chunks, AnthropicNormalizer(), decoder=InvokeStreamDecoder(), provider="anthropic")[0]


def test_every_anthropic_recording_is_carried() -> None:
    assert len(CARRIED) == len(ANTHROPIC) and len(EXCEPTIONS) == 6


@pytest.mark.parametrize("rec", CARRIED, ids=repr)
def test_same_events_as_the_anthropic_recording(rec: Recording) -> None:
    sse = ANTHROPIC[rec.name]
    assert events_of([rec.body]) == run_bytes([sse.body], AnthropicNormalizer(), provider="anthropic")[0]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_same_events_byte_by_byte(rec: Recording) -> None:
    assert events_of([rec.body[i:i + 1] for i in range(len(rec.body))]) == events_of([rec.body])


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.name in ("text", "throttling-after-text")], ids=repr)
def test_same_events_in_two_pieces_at_every_offset(rec: Recording) -> None:
    whole = events_of([rec.body])
    for cut in range(1, len(rec.body)):
        assert events_of([rec.body[:cut], rec.body[cut:]]) == whole, cut


@pytest.mark.parametrize("rec", EXCEPTIONS, ids=repr)
def test_exception_frames_end_the_stream_in_the_gateway_vocabulary(rec: Recording) -> None:
    events = events_of([rec.body])
    final = final_of(events)
    assert final.status == "error" and final.error is not None
    assert final.message.content == rec.expected["text"]
    assert rec.expected["errors"][0]["message"] in final.error["message"]
    expected = {"throttling": ("rate_limited", True), "model-stream-error": ("upstream_error", True),
                "internal-server": ("upstream_error", True)}[rec.name.rsplit("-", 2)[0]]
    assert (final.error["code"], final.error["retryable"]) == expected


def test_the_invoke_body_drops_model_and_stream_and_names_the_version() -> None:
    body = {"model": "claude-x", "stream": True, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert invoke_body(body) == {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                                 "anthropic_version": "bedrock-2023-05-31"}
    assert invoke_body({**body, "anthropic_version": "bedrock-2099"})["anthropic_version"] == "bedrock-2099"
