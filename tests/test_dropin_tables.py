"""docs/drop-in.md's field tables are generated from the code that decides; CI fails when they
disagree, and the decisions themselves hold: same wire passes through, across formats a field the
provider's allow-list does not take is refused."""

from __future__ import annotations

from scripts.gen_dropin_tables import TARGET, render

from app.api.compat.fields import FACADES, fate


def test_the_field_tables_match_the_code() -> None:
    page = TARGET.read_text()
    assert page == render(page), "docs/drop-in.md field tables are stale: run scripts/gen_dropin_tables.py"


def test_the_decisions() -> None:
    chat, messages, responses = FACADES
    assert fate(messages, "context_management", "anthropic") == "passthrough"
    assert fate(messages, None, "openai") == "refused"
    assert fate(responses, "prompt_cache_key", "openai-responses") == "passthrough"
    assert fate(responses, "prompt_cache_key", "openai") == "carried"
    assert fate(responses, "background", "anthropic") == "refused"
    assert fate(chat, "validators", "openai") == "gateway"
    assert fate(chat, "service_tier", "gemini") == "refused"
    assert fate(chat, "messages", "anthropic") == "translated"
