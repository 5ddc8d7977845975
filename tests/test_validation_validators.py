"""Built-in validators alone (no gate), and the 422 checks of specs at the edge."""

from __future__ import annotations

import pytest

from app.core.errors import RequestError
from app.core.messages import ToolSpec
from app.validation import ValidatorSpec, check_specs
from app.validation.specs import parse_spec
from app.validation.validators.base import CheckContext, GateEnv, ToolCallCheck, Verdict
from app.validation.validators.judge import judge_prompt, parse_verdict
from app.validation.validators.pii import find_pii, luhn_ok
from tests.validation_support import ADD


def make(name: str, config: dict, *, tools: tuple[ToolSpec, ...] = (), judge=None):
    cls, parsed = parse_spec(0, ValidatorSpec(name=name, config=config))
    return cls(parsed, GateEnv(tools={t.name: t for t in tools}, judge=judge))


def ctx(before: str = "", *, tokens: int = 0, tool_calls: int = 0) -> CheckContext:
    parts = [before] if before else []
    return CheckContext(lane="text", index=0, tokens=tokens, tool_calls=tool_calls, parts=parts, chars=len(before))


def call(name: str, arguments: dict, *, server: bool = False) -> ToolCallCheck:
    return ToolCallCheck(id="c1", name=name, arguments=arguments, server=server)


async def test_regex_deny_reports_pattern_and_match() -> None:
    v = make("regex_deny", {"patterns": ["(?i)pass(word)?", r"\bsecret\b"]})
    assert (await v.check_chunk("All fine here. ", ctx())).kind == "pass"
    verdict = await v.check_chunk("My PassWord is x. ", ctx())
    assert verdict == Verdict.fail("matched '(?i)pass(word)?': 'PassWord'")


async def test_regex_deny_catches_a_match_across_the_chunk_boundary_once() -> None:
    v = make("regex_deny", {"patterns": ["credit card"]})
    assert (await v.check_chunk("card ", ctx("my credit "))).kind == "fail"
    # a match wholly inside the released text was judged with its own chunk
    assert (await v.check_chunk("more ", ctx("credit card "))).kind == "pass"


async def test_regex_deny_checks_tool_arguments() -> None:
    v = make("regex_deny", {"patterns": ["rm -rf"]})
    assert (await v.check_tool_call(call("sh", {"cmd": "rm -rf /"}), ctx())).kind == "fail"
    assert (await v.check_tool_call(call("sh", {"cmd": "ls"}), ctx())).kind == "pass"


@pytest.mark.parametrize(
    ("chunk", "kind"),
    [("The Darn thing. ", "fail"), ("darnation is a word. ", "pass"), ("a heck of a day", "fail"),
     ("oh HECK. ", "fail"), ("hecking ", "pass"), ("big  bad wolf", "fail"), ("big badwolf", "pass"),
     ("an X-ray scan", "fail"), ("two x-rays", "pass")],
)
async def test_banned_words_whole_words_any_case(chunk: str, kind: str) -> None:
    v = make("banned_words", {"words": ["darn", "heck", "big bad", "x-ray"]})
    assert (await v.check_chunk(chunk, ctx())).kind == kind


async def test_banned_words_across_a_word_chunk_boundary() -> None:
    v = make("banned_words", {"words": ["big bad"]})
    assert (await v.check_chunk("bad ", ctx("the big "))).kind == "fail"
    assert (await v.check_chunk("dar", ctx("the big "))).kind == "pass"


async def test_max_length_in_chars_and_tokens() -> None:
    chars = make("max_length", {"max": 10})
    assert (await chars.check_chunk("12345", ctx("12345"))).kind == "pass"
    assert (await chars.check_chunk("123456", ctx("12345"))) == Verdict.fail("answer longer than 10 characters")
    assert (await chars.check_final("x" * 11, ctx())).kind == "fail"
    tokens = make("max_length", {"max": 3, "unit": "tokens"})
    assert (await tokens.check_chunk("a b c d", ctx(tokens=3))).kind == "pass"
    assert (await tokens.check_chunk("e", ctx(tokens=4))).kind == "fail"


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("card 4111 1111 1111 1111 here", ["card"]),
        ("card 4111-1111-1111-1111", ["card"]),
        ("not a card 4111 1111 1111 1112", []),  # Luhn fails
        ("mail jane.doe+x@mail.example.co.uk now", ["email"]),
        ("call +44 20 7946 0958 today", ["phone"]),
        ("call (555) 123-4567 today", ["phone"]),
        ("call 555-123-4567", ["phone"]),
        ("on 2024-01-15 at noon", []),  # a date is not a phone number
        ("host 10.100.200.255 up", []),  # nor an address
        ("pi 3.14159 and 42", []),
        ("iban DE89 3704 0044 0532 0130 00 ok", ["iban"]),
        ("iban GB82WEST12345698765432.", ["iban"]),
        ("iban DE89 3704 0044 0532 0130 01 bad", []),  # mod 97 fails
    ],
)
def test_find_pii(text: str, kinds: list[str]) -> None:
    assert [k for _, _, k in find_pii(text)] == kinds


def test_luhn() -> None:
    assert luhn_ok("4111111111111111") and luhn_ok("79927398713")
    assert not luhn_ok("4111111111111112")


async def test_pii_block_names_the_kind_not_the_data() -> None:
    v = make("pii", {})
    verdict = await v.check_chunk("Mail me at jane@example.com. ", ctx())
    assert verdict == Verdict.fail("email found")


async def test_pii_redact_gives_spans_within_the_chunk() -> None:
    v = make("pii", {"action": "redact", "kinds": ["card"]})
    chunk = "Card 4111 1111 1111 1111 ok. "
    verdict = await v.check_chunk(chunk, ctx("Earlier text. "))
    assert verdict.kind == "pass"
    (r,) = verdict.redactions
    assert chunk[r.start:r.end] == "4111 1111 1111 1111" and r.replacement == "[CARD]"


async def test_pii_redact_fails_when_the_match_reaches_into_released_text() -> None:
    v = make("pii", {"action": "redact"})
    verdict = await v.check_chunk("1111 1111 ", ctx("4111 1111 "))
    assert verdict == Verdict.fail("card spans text already released; cannot redact")


async def test_pii_on_tool_arguments() -> None:
    block = make("pii", {})
    assert (await block.check_tool_call(call("send", {"to": "a@b.io"}), ctx())).kind == "fail"
    redact = make("pii", {"action": "redact", "replacement": "<{kind}>"})
    verdict = await redact.check_tool_call(call("send", {"to": "a@b.io", "n": [1, "x a@b.io"]}), ctx())
    assert verdict.kind == "pass" and verdict.arguments == {"to": "<EMAIL>", "n": [1, "x <EMAIL>"]}


async def test_json_schema_tool_arguments() -> None:
    v = make("json_schema", {}, tools=(ADD,))
    assert (await v.check_tool_call(call("add", {"a": 1, "b": 2}), ctx())).kind == "pass"
    bad = await v.check_tool_call(call("add", {"a": 1, "b": "two"}), ctx())
    assert bad.kind == "fail" and "/b" in bad.reason and "'two' is not of type 'integer'" in bad.reason
    missing = await v.check_tool_call(call("add", {"a": 1}), ctx())
    assert missing.kind == "fail" and "'b' is a required property" in missing.reason
    assert (await v.check_tool_call(call("nope", {}), ctx())).reason == "tool 'nope' is not declared in the request"
    assert (await v.check_tool_call(call("web_search", {}, server=True), ctx())).kind == "unknown"


@pytest.mark.parametrize(
    ("text", "kind"),
    [('{"answer": 4}', "pass"), ('```json\n{"answer": 4}\n```', "pass"), ('{"answer": "4"}', "fail"),
     ("four", "fail"), ("", "fail")],
)
async def test_json_schema_final_answer(text: str, kind: str) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    v = make("json_schema", {"schema": schema})
    assert (await v.check_chunk(text, ctx())).kind == "unknown"  # partial JSON cannot be judged
    assert (await v.check_final(text, ctx())).kind == kind


async def test_json_schema_final_is_unknown_for_a_tool_call_turn() -> None:
    v = make("json_schema", {"schema": {"type": "object"}})
    assert (await v.check_final("", ctx(tool_calls=1))).kind == "unknown"


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("PASS", Verdict(kind="pass")),
        ("pass.", Verdict(kind="pass")),
        ("FAIL: insults the user", Verdict.fail("insults the user")),
        ("**FAIL** - rude", Verdict.fail("rude")),
        ("Thinking...\nFAIL: leaks a key\nPASS", Verdict.fail("leaks a key")),
        ("FAIL", Verdict.fail("the judge found a policy breach")),
        ("Failure is not an option", Verdict(kind="unknown")),
        ("I am not sure", Verdict(kind="unknown")),
    ],
)
def test_judge_verdict_parsing(completion: str, verdict: Verdict) -> None:
    assert parse_verdict(completion) == verdict


def test_judge_prompt_echoed_back_judges_only_the_text() -> None:
    """The mock `echo` model returns the prompt: only the text's own lines can give a verdict."""
    assert parse_verdict(judge_prompt("Be kind.", "", "Hello there.")).kind == "unknown"
    assert parse_verdict(judge_prompt("Be kind.", "", "FAIL on purpose")).kind == "fail"


async def test_judge_asks_the_configured_model() -> None:
    asked: list[tuple[str, str]] = []

    async def judge(model: str, prompt: str) -> str:
        asked.append((model, prompt))
        return "PASS"

    v = make("llm_judge", {"model": "mock/cheap", "policy": "No insults.", "context_chars": 5}, judge=judge)
    assert (await v.check_chunk("Nice. ", ctx("before text"))).kind == "pass"
    assert (await v.check_final("Nice. ", ctx())).kind == "unknown"  # final off by default
    ((model, prompt),) = asked
    assert model == "mock/cheap" and "No insults." in prompt and "Nice. " in prompt and " text" in prompt


@pytest.mark.parametrize(
    ("specs", "chunking", "field"),
    [
        ([{"name": "nope"}], None, "validators.0.name"),
        ([{"name": "max_length", "config": {}}], None, "validators.0.config.max"),
        ([{"name": "max_length", "config": {"max": 5, "extra": 1}}], None, "validators.0.config.extra"),
        ([{"name": "max_length", "config": {"max": 5}}, {"name": "regex_deny", "config": {"patterns": ["("]}}],
         None, "validators.1.config.patterns"),
        ([{"name": "regex_deny", "config": {"patterns": ["a*"]}}], None, "validators.0.config.patterns"),
        ([{"name": "regex_deny", "config": {"patterns": ["(?<=a)b"]}}], None, "validators.0.config.patterns"),
        ([{"name": "regex_deny", "config": {"patterns": [r"(a)\1"]}}], None, "validators.0.config.patterns"),
        ([{"name": "pii", "config": {"action": "mask"}}], None, "validators.0.config.action"),
        ([{"name": "pii", "config": {"on_error": "maybe"}}], None, "validators.0.config.on_error"),
        ([{"name": "json_schema", "config": {"schema": {"type": 5}}}], None, "validators.0.config.schema"),
        ([{"name": "llm_judge", "config": {"model": "nomodel", "policy": "x"}}], None, "validators.0.config.model"),
        ([], "sentences", "chunking"),
    ],
)
def test_bad_specs_are_422_with_the_field(specs: list[dict], chunking: str | None, field: str) -> None:
    with pytest.raises(RequestError) as info:
        check_specs([ValidatorSpec(**s) for s in specs], chunking)
    assert info.value.status == 422 and info.value.code == "invalid_validator"
    assert info.value.field == field


def test_good_specs_pass() -> None:
    check_specs(
        [ValidatorSpec(name="regex_deny", config={"patterns": ["x"], "timeout": 1, "on_error": "ignore"}),
         ValidatorSpec(name="json_schema", config={"schema": {"type": "object"}})],
        "word",
    )


def test_spec_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError):
        ValidatorSpec(name="pii", config={}, extra=1)
