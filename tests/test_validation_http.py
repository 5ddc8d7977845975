"""Validators through the HTTP API: per request, operator policy, both POST routes, metrics."""

import re

import httpx
import pytest

from app.core.patches import MessageDelta, MessageEnd, TextDelta
from app.main import create_app
from app.settings import Settings
from app.validation import ValidatorSpec
from tests.fakes import FakeAdapter
from tests.support import parse_sse

CARD = "4111 1111 1111 1111"


def script():
    return [[TextDelta(text="Your card ")], [TextDelta(text=f"is {CARD}. ")], [TextDelta(text="The password is ")],
            [TextDelta(text="hunter2. Bye.")], [MessageDelta(stop_reason="stop"), MessageEnd()]]


def ask(**extra):
    return {"model": "fake/m", "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture
def adapter():
    return FakeAdapter(script())


async def client_for(adapter, settings=None):
    app = create_app(settings or Settings(), adapters={"fake": adapter})
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


async def test_a_block_ends_the_stream_before_the_offending_sentence_is_sent(adapter):
    async with await client_for(adapter) as c:
        r = await c.post("/v1/stream", json=ask(validators=[{"name": "regex_deny",
                                                             "config": {"patterns": ["(?i)password"]}}]))
    events = parse_sse(r.content)
    text = "".join(d["content"] for _, e, d in events if e == "token")
    assert "password" not in text.lower() and "hunter2" not in text
    assert text == f"Your card is {CARD}. "
    final = events[-1][2]
    assert final["status"] == "blocked" and final["error"]["code"] == "validation_failed"
    assert final["stop_reason"] == "content_filter"
    assert final["error"]["validator"] == "regex_deny" and "password" in final["error"]["reason"]
    assert final["message"]["content"] == text  # the message as released
    assert adapter.streams[0].closed.is_set()


async def test_operator_redaction_applies_to_every_request_and_generate_answers_only_validated_text(adapter):
    settings = Settings(validators=[ValidatorSpec(name="pii", config={"action": "redact"})])
    async with await client_for(adapter, settings) as c:
        r = await c.post("/v1/generate", json=ask())
        stream = await c.post("/v1/stream", json=ask(validators=[]))  # a caller cannot switch it off
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ok"
    assert CARD not in r.text and "[CARD]" in body["message"]["content"]
    assert CARD.replace(" ", "") not in stream.text and CARD not in stream.text
    assert body["validation"]["validators"]["pii"]["checks"] >= 1


async def test_generate_reports_a_block_with_the_reason(adapter):
    async with await client_for(adapter) as c:
        r = await c.post("/v1/generate", json=ask(validators=[{"name": "banned_words",
                                                               "config": {"words": ["hunter2"]}}]))
    body = r.json()
    assert r.status_code == 200 and body["status"] == "blocked"
    assert body["error"]["validator"] == "banned_words" and "hunter2" not in body["message"]["content"]


@pytest.mark.parametrize(
    ("validators", "chunking", "field"),
    [
        ([{"name": "no_such_validator"}], None, "validators.0.name"),
        ([{"name": "regex_deny", "config": {"patterns": ["("]}}], None, "validators.0.config.patterns"),
        ([{"name": "max_length", "config": {"max": 10, "colour": 1}}], None, "validators.0.config.colour"),
        ([{"name": "regex_deny", "config": {"patterns": ["x"]}, "extra": 1}], None, "validators.0.extra"),
    ],
)
async def test_bad_validator_specs_are_422_before_anything_runs(adapter, validators, chunking, field):
    async with await client_for(adapter) as c:
        r = await c.post("/v1/stream", json=ask(validators=validators))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"].startswith(field)
    assert adapter.requests == []  # nothing ran


async def test_llm_judge_asks_its_own_backend(adapter):
    # The mock `echo` model is the quick-check backend: it fails chunks with a line starting FAIL.
    judge = {"name": "llm_judge", "config": {"model": "mock/echo", "policy": "No secrets."}}
    fail_script = [[TextDelta(text="All good. ")], [TextDelta(text="\nFAIL this line. ")], [TextDelta(text="More.")],
                   [MessageDelta(stop_reason="stop"), MessageEnd()]]
    async with await client_for(FakeAdapter(fail_script)) as c:
        r = await c.post("/v1/stream", json=ask(validators=[judge]))
        metrics = (await c.get("/metrics")).text
    events = parse_sse(r.content)
    final = events[-1][2]
    assert final["status"] == "blocked" and final["error"]["validator"] == "llm_judge"
    assert "".join(d["content"] for _, e, d in events if e == "token") == "All good. "
    # chunks are judged concurrently (FOUNDRY_JUDGE_CONCURRENCY): "More." (its context quotes the
    # FAIL line) may be judged before the block lands, so 1 or 2 fails
    assert re.search(r'foundry_validator_verdicts_total\{outcome="fail",phase="chunk",validator="llm_judge"\} [12]\.0',
                     metrics)
    assert 'foundry_validator_verdicts_total{outcome="unknown",phase="chunk",validator="llm_judge"} 1.0' in metrics
