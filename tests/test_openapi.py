"""openapi/openapi.json is generated from the app; CI fails when they disagree."""

import json
from typing import Literal, NotRequired

from scripts.export_openapi import TARGET, render


def test_openapi_document_matches_the_app():
    assert TARGET.read_text() == render(), "openapi/openapi.json is stale: run `make openapi`"


def test_sse_event_payloads_are_named_schemas():
    doc = json.loads(render())
    schemas = doc["components"]["schemas"]
    for name in ("StartData", "TokenData", "ReasoningData", "ToolCallData", "ToolResultData", "FinalPayload"):
        assert name in schemas
    assert set(doc["x-sse-events"]) == {"start", "token", "reasoning", "tool_call", "tool_result", "final"}


def test_the_document_does_not_depend_on_what_else_the_process_parametrized_first():
    """typing caches `NotRequired[...]` (and `Optional`, `Union`...) by arguments that compare
    equal in any order: `str | int == int | str`. Once the app's entry has been evicted (the cache
    keeps 128), a library that wrote `NotRequired[int | str]` first hands the app its order when
    pydantic evaluates the app's annotations anew for each app: the document flipped `"string",
    "integer"` when the SDK tests ran before this file in one process."""
    for i in range(200):  # evict whatever the cache holds (its size is 128), as a busy process does
        NotRequired[Literal[f"filler-{i}"]]  # parametrized for the cache only
    NotRequired[int | str]  # a library's order: the other way round
    assert TARGET.read_text() == render(), "the document follows the order another module cached"
