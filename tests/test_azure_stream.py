"""Azure OpenAI's stream differences (tests/fixtures/azure, built from Azure's documented content
filtering examples) through the Chat Completions normalizer: `prompt_filter_results` and
asynchronous-filter chunks with no id and empty or delta-less choices are not answers, a
content-filter stop is `content_filter`; whole, byte by byte and cut in two at every offset."""

from __future__ import annotations

import pytest

from app.core.events import TokenEvent
from app.providers.openai_chat_stream import ChatChunkNormalizer
from tests.cloud_support import cloud_recordings
from tests.support import Recording, final_of, run_bytes

RECORDINGS = cloud_recordings("azure", ".sse")


def events_of(chunks: list[bytes]) -> list[object]:
    return run_bytes(chunks, ChatChunkNormalizer(provider="azure"), provider="azure")[0]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_recording_gives_its_expected_outcome(rec: Recording) -> None:
    events = events_of([rec.body])
    final = final_of(events)
    assert final.status == "ok", final.error
    assert "".join(e.content for e in events if isinstance(e, TokenEvent)) == rec.expected["text"]
    assert final.stop_reason == {"stop": "stop", "content_filter": "content_filter"}[rec.expected["finish_reason"]]
    usage = rec.expected["usage"]
    if usage is not None:
        assert (final.usage.input_tokens, final.usage.output_tokens) == (usage["prompt_tokens"],
                                                                         usage["completion_tokens"])


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_the_filter_annotations_are_kept_in_the_final(rec: Recording) -> None:
    final = final_of(events_of([rec.body]))
    assert final.content_filter is not None
    assert final.content_filter["prompt"] == rec.expected["prompt_filter_results"]
    assert final.content_filter["completion"] == rec.expected.get("content_filter_results",
                                                                  final.content_filter["completion"])
    offsets = rec.expected.get("content_filter_offsets")
    assert final.content_filter.get("offsets") == (offsets[-1] if offsets else None)
    assert final.data()["content_filter"] == final.content_filter


def test_a_filtered_category_stays_filtered_when_later_segments_pass() -> None:
    chunk = ('data: {{"id":"c","model":"m","choices":[{{"index":0,"finish_reason":{finish},"delta":{{"content":"x"}},'
             '"content_filter_results":{{"violence":{{"filtered":{filtered},"severity":"{severity}"}}}}}}]}}\n\n')
    body = (chunk.format(finish="null", filtered="true", severity="medium")
            + chunk.format(finish='"stop"', filtered="false", severity="safe") + "data: [DONE]\n\n").encode()
    final = final_of(events_of([body]))
    assert final.content_filter == {"completion": {"violence": {"filtered": True, "severity": "medium"}}}


def test_a_stream_without_annotations_has_none() -> None:
    body = b'data: {"id":"c","model":"m","choices":[{"index":0,"finish_reason":"stop","delta":{"content":"x"}}]}\n\n' \
           b"data: [DONE]\n\n"
    final = final_of(events_of([body]))
    assert final.content_filter is None and "content_filter" not in final.data()


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_same_events_byte_by_byte(rec: Recording) -> None:
    assert events_of([rec.body[i:i + 1] for i in range(len(rec.body))]) == events_of([rec.body])


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
def test_same_events_in_two_pieces_at_every_offset(rec: Recording) -> None:
    whole = events_of([rec.body])
    for cut in range(1, len(rec.body)):
        assert events_of([rec.body[:cut], rec.body[cut:]]) == whole, cut


def test_the_annotations_survive_a_response_cache_replay() -> None:
    from app.cache.entry import final_from_data

    final = final_of(events_of([RECORDINGS[0].body]))
    assert final.content_filter and final_from_data(dict(final.data())).content_filter == final.content_filter
