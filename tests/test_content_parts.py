"""Content parts end to end: what each entry point accepts (native /v1/stream, /v1/chat/completions,
/v1/messages) reaches each provider (OpenAI chat, Responses, Anthropic, Gemini) in that provider's
documented shape, as the loopback upstream records the request body; several text parts stay several
and Anthropic's cache breakpoints arrive."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.main import create_app
from app.settings import Settings
from tests.compat_support import RecordedUpstream, facade_gateway
from tests.support import serve

MODELS = {"openai": "openai/text-include-usage", "responses": "openai-responses/text", "anthropic": "anthropic/text",
          "gemini": "gemini/text"}
CACHE = {"type": "ephemeral"}


async def _send(entry: str, model: str, system: list[dict[str, Any]], user: list[dict[str, Any]],
                **settings: Any) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """One request through an entry point; the response and the bodies the upstream received."""
    upstream = RecordedUpstream()
    async with facade_gateway(upstream, **settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        if entry == "native":
            body = {"model": model, "messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}]}
            response = await client.post("/v1/generate", json=body)
        elif entry == "chat":
            body = {"model": model, "messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}]}
            response = await client.post("/v1/chat/completions", json=body)
        else:
            body = {"model": model, "max_tokens": 64, "system": system, "messages": [{"role": "user", "content": user}]}
            response = await client.post("/v1/messages", json=body)
    return response, upstream.requests


def _text(text: str, cache: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": text, **({"cache_control": CACHE} if cache else {})}


# What each provider receives for system [S1, S2 (cached)] and user [U1, U2 (cached)].
TEXT_SHAPES: dict[str, Any] = {
    "openai": lambda b: (b["messages"][0]["content"], b["messages"][1]["content"]),
    "responses": lambda b: (b.get("instructions"), b["input"][0]["content"]),
    "anthropic": lambda b: (b["system"], b["messages"][0]["content"]),
    "gemini": lambda b: (b["systemInstruction"]["parts"], b["contents"][0]["parts"]),
}
TEXT_EXPECTED = {
    "openai": ([_text("Rule one."), _text("Rule two.")], [_text("Part A."), _text("Part B.")]),
    "responses": ("Rule one.\n\nRule two.", [{"type": "input_text", "text": "Part A."},
                                             {"type": "input_text", "text": "Part B."}]),
    "anthropic": ([_text("Rule one."), _text("Rule two.", cache=True)], [_text("Part A."), _text("Part B.", cache=True)]),
    "gemini": ([{"text": "Rule one."}, {"text": "Rule two."}], [{"text": "Part A."}, {"text": "Part B."}]),
}


@pytest.mark.parametrize("entry", ["native", "chat", "messages"])
@pytest.mark.parametrize("provider", list(MODELS))
async def test_several_text_parts_stay_several_and_cache_breakpoints_reach_anthropic(entry: str, provider: str) -> None:
    cached = entry != "chat"  # OpenAI's request shape has no cache_control
    system = [_text("Rule one."), _text("Rule two.", cache=cached)]
    user = [_text("Part A."), _text("Part B.", cache=cached)]
    response, received = await _send(entry, MODELS[provider], system, user)
    assert response.status_code == 200, response.text
    expected = TEXT_EXPECTED[provider]
    if provider == "anthropic" and not cached:
        expected = ([_text("Rule one."), _text("Rule two.")], [_text("Part A."), _text("Part B.")])
    assert TEXT_SHAPES[provider](received[0]) == expected


# -- images and documents ---------------------------------------------------------------------

PNG = base64.b64encode(
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82"
).decode()
PDF = base64.b64encode(
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
).decode()
PNG_URL = "https://example.com/cat.png"
PDF_URL = "https://example.com/one-page.pdf"

# How each entry point spells the media: (png base64, png url, pdf base64, pdf url); None: it has no spelling.
SPELLING: dict[str, tuple[dict[str, Any] | None, ...]] = {
    "native": ({"type": "image", "media_type": "image/png", "data": PNG}, {"type": "image", "url": PNG_URL},
               {"type": "document", "media_type": "application/pdf", "data": PDF}, {"type": "document", "url": PDF_URL}),
    "chat": ({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
             {"type": "image_url", "image_url": {"url": PNG_URL}},
             {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}}, None),
    "messages": ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                 {"type": "image", "source": {"type": "url", "url": PNG_URL}},
                 {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
                 {"type": "document", "source": {"type": "url", "url": PDF_URL}}),
    "responses": ({"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                  {"type": "input_image", "image_url": PNG_URL},
                  {"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF}"},
                  {"type": "input_file", "file_url": PDF_URL}),
}
# What the provider receives for each form, as the last part of the user turn; a str: refused, 400 naming it.
WIRE: dict[str, tuple[Any, ...]] = {
    "openai": ({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
               {"type": "image_url", "image_url": {"url": PNG_URL}},
               {"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
               "messages.0.content.1.url"),
    "responses": ({"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
                  {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
                  {"type": "input_file", "filename": "document.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
                  {"type": "input_file", "file_url": PDF_URL}),
    "anthropic": ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                  {"type": "image", "source": {"type": "url", "url": PNG_URL}},
                  {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
                  {"type": "document", "source": {"type": "url", "url": PDF_URL}}),
    "gemini": ({"inlineData": {"mimeType": "image/png", "data": PNG}}, "messages.0.content.1.url",
               {"inlineData": {"mimeType": "application/pdf", "data": PDF}}, "messages.0.content.1.url"),
}
USER_PART = {"openai": lambda b: b["messages"][0]["content"], "responses": lambda b: b["input"][0]["content"],
             "anthropic": lambda b: b["messages"][0]["content"], "gemini": lambda b: b["contents"][0]["parts"]}
FIRST_PART = {"openai": {"type": "text", "text": "What is this?"}, "responses": {"type": "input_text", "text": "What is this?"},
              "anthropic": {"type": "text", "text": "What is this?"}, "gemini": {"text": "What is this?"}}
FORMS = ["png-base64", "png-url", "pdf-base64", "pdf-url"]


async def _ask(entry: str, model: str, part: dict[str, Any], **settings: Any) -> tuple[httpx.Response, list[Any]]:
    user = [{"type": "input_text" if entry == "responses" else "text", "text": "What is this?"}, part]
    upstream = RecordedUpstream()
    async with facade_gateway(upstream, **settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        if entry == "native":
            response = await client.post("/v1/generate", json={"model": model, "messages": [{"role": "user", "content": user}]})
        elif entry == "chat":
            response = await client.post("/v1/chat/completions",
                                         json={"model": model, "messages": [{"role": "user", "content": user}]})
        elif entry == "responses":
            response = await client.post("/v1/responses",
                                         json={"model": model, "input": [{"role": "user", "content": user}]})
        else:
            response = await client.post("/v1/messages", json={"model": model, "max_tokens": 64,
                                                               "messages": [{"role": "user", "content": user}]})
    return response, upstream.requests


def _field(entry: str, response: httpx.Response) -> str:
    error = response.json()["error"]
    if entry in ("chat", "responses"):
        return re.sub(r"\[(\d+)\]", r".\1", error["param"]).replace("input.", "messages.")
    return str(error["field"] if entry == "native" else error["message"])


# Every entry point's spelling of every form (chat has none for a PDF by URL).
SPELLED = [pytest.param(entry, form, id=f"{entry}-{FORMS[form]}")
           for entry, forms in SPELLING.items() for form, part in enumerate(forms) if part is not None]


SAME_WIRE = {("chat", "openai"), ("responses", "responses"), ("messages", "anthropic")}
"""A facade in front of a provider of its own wire format passes the request through (docs/drop-in.md)."""


@pytest.mark.parametrize(("entry", "form"), SPELLED)
@pytest.mark.parametrize("provider", list(MODELS))
async def test_images_and_documents_reach_each_provider_in_its_own_shape(provider: str, entry: str, form: int) -> None:
    part = SPELLING[entry][form]
    assert part is not None
    response, received = await _ask(entry, MODELS[provider], part)
    wire = WIRE[provider][form]
    if isinstance(wire, str):  # the provider cannot take this form: refused before any upstream call
        assert response.status_code == 400, response.text
        assert wire in _field(entry, response) and not received
        assert "base64" in response.text  # says which form works
        return
    assert response.status_code == 200, response.text
    if (entry, provider) in SAME_WIRE:  # passed through: the provider gets the client's own part, nothing added
        wire = part
    assert USER_PART[provider](received[0]) == [FIRST_PART[provider], wire]


# -- bounds and checks at the edge ------------------------------------------------------------

BIG_PNG = base64.b64encode(base64.b64decode(PNG) + b"\0" * 3000).decode()  # a PNG's magic, 3 KB


def _image(entry: str, data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"native": {"type": "image", "media_type": media_type, "data": data},
            "chat": {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}},
            "messages": {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}},
            "responses": {"type": "input_image", "image_url": f"data:{media_type};base64,{data}"}}[entry]


@pytest.mark.parametrize("entry", list(SPELLING))
async def test_a_part_over_its_bound_is_413_naming_it(entry: str) -> None:
    response, received = await _ask(entry, MODELS["anthropic"], _image(entry, BIG_PNG), media_part_max_bytes=2048)
    assert response.status_code == 413, response.text
    assert "messages.0.content.1" in _field(entry, response) and not received
    assert "MEDIA_PART_MAX_BYTES" in response.text


async def test_the_parts_of_one_request_together_are_bounded() -> None:
    upstream = RecordedUpstream()
    user = [{"type": "text", "text": "Compare"}, _image("native", BIG_PNG), _image("native", BIG_PNG)]
    async with facade_gateway(upstream, media_request_max_bytes=5000) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/v1/generate", json={"model": "anthropic/text",
                                                          "messages": [{"role": "user", "content": user}]})
    assert response.status_code == 413 and response.json()["error"]["field"] == "messages.0.content.2"
    assert not upstream.requests


@pytest.mark.parametrize("entry", list(SPELLING))
async def test_the_body_limit_is_raised_for_media_parts_only(entry: str) -> None:
    """A 3 KB image passes a 1 KB body limit (the media allowance); 3 KB of text does not."""
    response, received = await _ask(entry, MODELS["anthropic"], _image(entry, BIG_PNG), max_body_bytes=1024)
    assert response.status_code == 200, response.text
    assert USER_PART["anthropic"](received[0])[1]["source"]["data"] == BIG_PNG
    text = "input_text" if entry == "responses" else "text"
    response, received = await _ask(entry, MODELS["anthropic"], {"type": text, "text": "x" * 3000},
                                    max_body_bytes=1024)
    assert response.status_code == 413 and not received
    assert "body" in response.text


MISFITS = {
    "mistyped": (PDF, "image/png", "the bytes are application/pdf"),
    "malformed": ("iVBORw0KGgo!!!", "image/png", "not valid base64"),
    "not-an-image-type": (PNG, "image/tiff", "image/webp"),  # names the types it takes
}


@pytest.mark.parametrize("misfit", list(MISFITS))
@pytest.mark.parametrize("entry", list(SPELLING))
async def test_mistyped_and_malformed_parts_are_422_naming_the_part(entry: str, misfit: str) -> None:
    data, media_type, says = MISFITS[misfit]
    response, received = await _ask(entry, MODELS["openai"], _image(entry, data, media_type))
    assert response.status_code == 422, response.text
    assert "messages.0.content.1" in _field(entry, response) and not received
    assert says in response.text


# -- records and transcripts ------------------------------------------------------------------


def _database_bytes(data_dir: Path) -> bytes:
    """The SQLite record store's files (database and write-ahead log), as bytes."""
    return b"".join(p.read_bytes() for p in data_dir.glob("foundry.db*"))


@pytest.mark.parametrize("keep", [False, True], ids=["summary", "bytes-allowed"])
async def test_records_keep_kind_type_size_and_hash_not_the_bytes(tmp_path: Path, keep: bool) -> None:
    app = create_app(Settings(data_dir=str(tmp_path), stream_ttl_seconds=0.001, record_media_bytes=keep))
    ask = {"model": "mock/simple", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, _image("native", BIG_PNG),
                                     {"type": "document", "url": PDF_URL}]}]}
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("POST", "/v1/stream", json=ask) as response:
            assert response.status_code == 200
            stream_id = response.headers["x-stream-id"]
            await response.aread()
        await app.state.records.flush()
        assert app.state.gateway.store.get(stream_id) is None  # expired: served from the record store
        transcript = (await client.get(f"/v1/stream/{stream_id}/transcript")).json()
    raw = base64.b64decode(BIG_PNG)
    summary = {"type": "image", "media_type": "image/png", "size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    assert transcript["request_messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"}, {**summary, **({"data": BIG_PNG} if keep else {})},
        {"type": "document", "url": PDF_URL}]
    stored = _database_bytes(tmp_path)
    assert (BIG_PNG[:200].encode() in stored) is keep


async def test_media_bytes_are_never_recorded_without_content_recording(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path), record_media_bytes=True, record_content=False))
    ask = {"model": "mock/simple", "messages": [{"role": "user", "content": [_image("native", BIG_PNG)]}]}
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/v1/generate", json=ask)).status_code == 200
        await app.state.records.flush()
    stored = _database_bytes(tmp_path)
    assert BIG_PNG[:200].encode() not in stored


# -- the official SDKs' vision calls ----------------------------------------------------------


async def test_openai_sdks_vision_call_passes_through() -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-client",
                                                                     max_retries=0) as client:
        answer = await client.chat.completions.create(model=MODELS["openai"], messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}}]}])
        chunks = [c async for c in await client.chat.completions.create(
            model=MODELS["openai"], stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_URL}}]}])]
    assert answer.choices[0].message.content and answer.usage is not None and answer.usage.prompt_tokens > 0
    assert upstream.requests[0]["messages"][0]["content"][1] == {
        "type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}}
    assert upstream.requests[1]["messages"][0]["content"] == [{"type": "image_url", "image_url": {"url": PNG_URL}}]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


async def test_anthropic_sdks_vision_call_passes_through_with_the_providers_usage() -> None:
    upstream = RecordedUpstream()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG},
             "cache_control": {"type": "ephemeral"}}
    async with facade_gateway(upstream) as url, anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-client",
                                                                           max_retries=0) as client:
        answer = await client.messages.create(model="anthropic/prompt-cache-usage", max_tokens=64, messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "Describe it."}]}])
        async with client.messages.stream(model="anthropic/text", max_tokens=64, messages=[
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": PNG_URL}}]}]) as stream:
            final = await stream.get_final_message()
    assert upstream.requests[0]["messages"][0]["content"] == [image, {"type": "text", "text": "Describe it."}]
    assert upstream.requests[1]["messages"][0]["content"] == [{"type": "image", "source": {"type": "url", "url": PNG_URL}}]
    # the provider's usage for the image request, cache fields included (the recording's message_delta)
    assert (answer.usage.cache_creation_input_tokens, answer.usage.cache_read_input_tokens) == (3337, 6289)
    assert final.content[0].type == "text"


TOOL_RESULT_WIRE: dict[str, Any] = {
    "anthropic": lambda b: b["messages"][2]["content"][0]["content"],
    "responses": lambda b: b["input"][2]["output"],
}
TOOL_RESULT_EXPECTED: dict[str, Any] = {
    "anthropic": [{"type": "text", "text": "Here it is."},
                  {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}],
    "responses": [{"type": "input_text", "text": "Here it is."},
                  {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"}],
    "openai": "messages.2.content.1",  # Chat Completions tool messages take text parts only
    "gemini": "messages.2.content",  # a function response is JSON
}


@pytest.mark.parametrize("provider", list(MODELS))
async def test_an_image_in_a_tool_result_reaches_providers_that_take_one(provider: str) -> None:
    upstream = RecordedUpstream()
    ask = {"model": MODELS[provider], "tools": [{"name": "chart"}], "messages": [
        {"role": "user", "content": "Show me the chart."},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "name": "chart", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "chart",
         "content": [{"type": "text", "text": "Here it is."}, _image("native", PNG)]}]}
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.post("/v1/generate", json=ask)
    expected = TOOL_RESULT_EXPECTED[provider]
    if isinstance(expected, str):
        assert response.status_code == 400 and response.json()["error"]["field"] == expected, response.text
        assert not upstream.requests
        return
    assert response.status_code == 200, response.text
    assert TOOL_RESULT_WIRE[provider](upstream.requests[0]) == expected
