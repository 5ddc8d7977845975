"""openapi/openapi.json is generated from the app; CI fails when they disagree."""

import json

from scripts.export_openapi import TARGET, render


def test_openapi_document_matches_the_app():
    assert TARGET.read_text() == render(), "openapi/openapi.json is stale: run `make openapi`"


def test_sse_event_payloads_are_named_schemas():
    doc = json.loads(render())
    schemas = doc["components"]["schemas"]
    for name in ("StartData", "TokenData", "ReasoningData", "ToolCallData", "ToolResultData", "FinalPayload"):
        assert name in schemas
    assert set(doc["x-sse-events"]) == {"start", "token", "reasoning", "tool_call", "tool_result", "final"}
