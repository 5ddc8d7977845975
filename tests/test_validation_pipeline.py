"""The gate inside a run: a block closes the upstream and held text never reaches the log."""

from __future__ import annotations

from app.core.messages import Message
from app.core.patches import MessageDelta, MessageEnd, TextDelta
from app.observability import Metrics
from app.pipeline import Gateway, RunSpec
from app.providers.base import ProviderRequest
from app.providers.registry import build_registry
from app.settings import Settings
from app.streams.memory import MemoryStreamStore
from app.validation import ValidatorSpec, build_gate
from tests.fakes import FakeAdapter
from tests.support import parse_sse


def gateway(adapter: FakeAdapter, settings: Settings | None = None) -> Gateway:
    settings = settings or Settings()

    def gate_factory(spec: RunSpec):
        return build_gate(request_specs=spec.validators, operator_specs=settings.validators,
                          chunking=spec.chunking, tools=spec.tools, judge=None)

    return Gateway(settings=settings, registry=build_registry(settings.provider_config(), None, {"fake": adapter}),
                   store=MemoryStreamStore(ttl=60, max_streams=10, max_events=1000, max_bytes=1 << 20),
                   metrics=Metrics(), gate_factory=gate_factory)


async def run_to_end(gw: Gateway, *validators: ValidatorSpec) -> list:
    request = ProviderRequest(model="fake/m", messages=(Message(role="user", content="hi"),))
    run = await gw.start(RunSpec(request=request, validators=validators)).opened()
    return parse_sse(b"".join([frame async for frame in run.log.follow(0)]))


async def test_a_block_closes_the_upstream_and_held_text_never_goes_out() -> None:
    adapter = FakeAdapter([[TextDelta(text="Fine. The pass")], [TextDelta(text="word is x. ")],
                           [TextDelta(text="Tail.")]], block=True)  # would never end by itself
    events = await run_to_end(gateway(adapter), ValidatorSpec(name="regex_deny", config={"patterns": ["password"]}))
    assert adapter.streams[0].closed.is_set()
    assert [e for _, e, _ in events] == ["start", "final"]  # "Fine. The pass" straddles: held, dropped
    final = events[-1][2]
    assert final["status"] == "blocked" and final["stop_reason"] == "content_filter"
    assert final["error"] == {"code": "validation_failed", "message": "validator regex_deny failed: matched "
                              "'password': 'password'", "retryable": False, "validator": "regex_deny",
                              "reason": "matched 'password': 'password'"}
    assert final["message"]["content"] == ""
    assert final["validation"]["blocked"]["validator"] == "regex_deny"
    assert "word" not in str([d for _, e, d in events if e != "final"])


async def test_operator_policy_and_redaction_reach_the_final_message() -> None:
    adapter = FakeAdapter([[TextDelta(text="Mail a@b")], [TextDelta(text=".io today. Bye")],
                           [MessageDelta(stop_reason="stop"), MessageEnd()]])
    settings = Settings(validators=[ValidatorSpec(name="pii", config={"action": "redact"})])
    events = await run_to_end(gateway(adapter, settings))
    tokens = [d["content"] for _, e, d in events if e == "token"]
    assert "".join(tokens) == "Mail [EMAIL] today. Bye" and [d["index"] for _, e, d in events if e == "token"] == [0, 1]
    final = events[-1][2]
    assert final["status"] == "ok" and final["message"]["content"] == "Mail [EMAIL] today. Bye"
    assert final["validation"]["validators"]["pii"]["checks"] == 3  # two chunks and the final check
    assert adapter.streams[0].closed.is_set()


async def test_text_that_passed_in_the_read_that_held_the_fail_reaches_the_client_before_the_blocked_final() -> None:
    """One upstream read holds a sentence that passes and the one that fails: through the HTTP API
    the client gets the first (its tokens and the final's message), then the blocked final."""
    import httpx

    from app.main import create_app

    adapter = FakeAdapter([[TextDelta(text="Fine. "), TextDelta(text="Still fine. "),
                            TextDelta(text="The password is x. "), TextDelta(text="Tail.")]], block=True)
    app = create_app(Settings(records=False), adapters={"fake": adapter})
    ask = {"model": "fake/m", "messages": [{"role": "user", "content": "hi"}], "chunking": "sentence",
           "validators": [{"name": "regex_deny", "config": {"patterns": ["password"]}}]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15) as client:
        events = parse_sse((await client.post("/v1/stream", json=ask)).text)
    assert "".join(d["content"] for _, e, d in events if e == "token") == "Fine. Still fine. "
    final = events[-1][2]
    assert final["status"] == "blocked" and final["message"]["content"] == "Fine. Still fine. "
