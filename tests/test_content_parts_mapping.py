"""Each facade's spelling of a content part -> the canonical parts (app/api/compat/parts.py), as
pure functions: the Responses API's `input_text`, `input_image` and `input_file` (which the
/v1/responses facade maps with `responses_content`), OpenAI chat's and Anthropic's forms."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.api.compat.common import FacadeError
from app.api.compat.parts import anthropic_part, openai_chat_part, responses_content
from app.core.messages import Message
from app.core.parts import CacheControl, DocumentPart, ImagePart, TextPart
from app.providers.openai_chat import messages_to_openai
from tests.test_content_parts import PDF, PDF_URL, PNG, PNG_URL

TEXT = TextPart(type="text", text="What is this?")


def test_responses_input_parts_map_to_canonical_parts() -> None:
    parts = responses_content([
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_text", "text": "And this?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "high"},
        {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
        {"type": "input_file", "filename": "one.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
        {"type": "input_file", "file_url": PDF_URL},
    ], "input[0].content", role="user")
    assert parts == (
        TEXT, TextPart(type="text", text="And this?"),
        ImagePart(type="image", media_type="image/png", data=PNG, detail="high"),
        ImagePart(type="image", url=PNG_URL, detail="auto"),
        DocumentPart(type="document", media_type="application/pdf", data=PDF, title="one.pdf"),
        DocumentPart(type="document", url=PDF_URL),
    )


def test_responses_tool_output_and_assistant_text() -> None:
    assert responses_content([{"type": "input_image", "image_url": PNG_URL}], "input[2].output", role="tool") == (
        ImagePart(type="image", url=PNG_URL),)
    assert responses_content([{"type": "output_text", "text": "Hi."}], "input[1].content", role="assistant") == (
        TextPart(type="text", text="Hi."),)


@pytest.mark.parametrize(("parts", "role", "status", "param"), [
    ([{"type": "input_image", "file_id": "file-1"}], "user", 400, "input[0].content[0].image_url"),
    ([{"type": "input_file", "file_id": "file-1"}], "user", 400, "input[0].content[0]"),
    ([{"type": "input_audio", "input_audio": {}}], "user", 400, "input[0].content[0].type"),
    ([{"type": "input_image", "image_url": PNG_URL}], "assistant", 400, "input[0].content[0].type"),
    ([{"type": "input_image", "image_url": "http://example.com/a.png"}], "user", 422, "input[0].content[0].image_url"),
    ([{"type": "input_image", "image_url": f"data:image/gif;base64,{PNG}"}], "user", 422,
     "input[0].content[0].image_url"),
    ([{"type": "input_file", "file_data": "data:application/pdf,not-base64"}], "user", 422,
     "input[0].content[0].file_data"),
    ([], "user", 400, "input[0].content"),
])
def test_responses_parts_it_cannot_carry_are_refused_naming_them(parts: list[Any], role: str, status: int,
                                                                  param: str) -> None:
    with pytest.raises(FacadeError) as raised:
        responses_content(parts, "input[0].content", role=role)
    assert (raised.value.status, raised.value.param) == (status, param)


def test_chat_and_anthropic_spellings() -> None:
    assert openai_chat_part("m", {"type": "file", "file": {"filename": "a.pdf", "file_data":
                                  f"data:application/pdf;base64,{PDF}"}}, role="user") == DocumentPart(
        type="document", media_type="application/pdf", data=PDF, title="a.pdf")
    assert anthropic_part("m", {"type": "document", "title": "A", "cache_control": {"type": "ephemeral", "ttl": "1h"},
                                "source": {"type": "url", "url": PDF_URL}}) == DocumentPart(
        type="document", url=PDF_URL, title="A", cache_control=CacheControl(ttl="1h"))
    with pytest.raises(FacadeError) as raised:
        anthropic_part("m", {"type": "image", "source": {"type": "file", "file_id": "f"}})
    assert raised.value.param == "m.source"
    with pytest.raises(FacadeError) as raised:
        openai_chat_part("m", {"type": "image_url", "image_url": {"url": PNG_URL}}, role="assistant")
    assert raised.value.param == "m.type"


def test_chat_text_cache_control_is_carried_and_unknown_part_fields_refused() -> None:
    assert openai_chat_part("m", {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}},
                            role="system") == TextPart(type="text", text="Rules.", cache_control=CacheControl())
    for part, param in [({"type": "text", "text": "a", "citations": []}, "m.citations"),
                        ({"type": "image_url", "image_url": {"url": PNG_URL, "size": 3}}, "m.image_url.size"),
                        ({"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "x": 1}},
                         "m.file.x")]:
        with pytest.raises(FacadeError) as raised:
            openai_chat_part("m", part, role="user")
        assert raised.value.param == param
    with pytest.raises(FacadeError) as raised:
        responses_content([{"type": "input_text", "text": "a", "extra": 1}], "input[0].content", role="user")
    assert raised.value.param == "input[0].content[0].extra"


def test_one_text_part_reaches_openai_chat_as_a_string_several_as_parts() -> None:
    one = Message(role="system", content=(TextPart(type="text", text="Be brief."),))
    two = Message(role="user", content=(TEXT, TextPart(type="text", text="And this?")))
    assert messages_to_openai([one, two]) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "text", "text": "And this?"}]}]


def test_parts_per_message_are_bounded() -> None:
    with pytest.raises(ValidationError, match="at most 1000"):
        Message(role="user", content=[{"type": "text", "text": "a"}] * 1001)
