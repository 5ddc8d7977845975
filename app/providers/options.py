"""`provider_options`: what a caller may pass to a provider with the operator's key.

The gateway streams one choice and caps the answer's length, so whatever a provider calls them:
- choice counts (`n`, `candidateCount`, `candidate_count`) above 1 are refused;
- every spelling of the length limit (`max_tokens`, `max_completion_tokens`, `max_output_tokens`,
  `maxOutputTokens`, `max_tokens_to_sample`) gets the cap of the request's `max_tokens`.
Beyond that, each provider has an allow-list of option keys: the operator's
(`FOUNDRY_PROVIDER_OPTIONS_ALLOW`, per provider name) or the safe default of its descriptor (`options`), which leaves out
what reaches other resources (server tools, MCP servers, vector stores) but takes every field the
drop-in facades carry (docs/drop-in.md: `store`, `metadata`, `prompt_cache_key`, `service_tier`,
`safety_identifier`, `verbosity`). Anything else is a 422 naming `provider_options.<key>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.core.errors import RequestError
from app.providers.catalog import default_options

__all__ = ["DEFAULT_ALLOWED", "MAX_OUTPUT_TOKENS", "check_provider_options"]

MAX_OUTPUT_TOKENS = 1_000_000
_CHOICE_COUNTS = frozenset({"n", "candidateCount", "candidate_count"})
_LIMITS = frozenset({"max_tokens", "max_completion_tokens", "max_output_tokens", "maxOutputTokens",
                     "max_tokens_to_sample"})
_NESTED = ("generationConfig",)  # Gemini puts counts and limits one level down

DEFAULT_ALLOWED: dict[str, tuple[str, ...]] = default_options()
"""Used for a provider the operator's allow-list does not name."""


def check_provider_options(provider: str, options: Mapping[str, Any],
                           allowed: Mapping[str, Sequence[str]] | None = None) -> None:
    """Refuse (422 naming `provider_options.<key>`) an option outside the provider's allow-list,
    a choice count above 1, or a length limit outside 1..MAX_OUTPUT_TOKENS."""
    allowed = allowed or {}
    keys = allowed.get(provider)
    if keys is None:
        keys = DEFAULT_ALLOWED.get(provider, DEFAULT_ALLOWED["*"])
    for key, value in options.items():
        if key not in keys:
            raise RequestError(f"provider_options.{key} is not allowed for {provider} on this gateway "
                               f"(allowed: {', '.join(sorted(keys)) or 'none'})",
                               status=422, code="option_not_allowed", field=f"provider_options.{key}")
        _check_value(f"provider_options.{key}", key, value)
        if key in _NESTED and isinstance(value, Mapping):
            for inner, inner_value in value.items():
                _check_value(f"provider_options.{key}.{inner}", str(inner), inner_value)


def _check_value(field: str, key: str, value: Any) -> None:
    if key in _CHOICE_COUNTS and value is not None and (type(value) is not int or value != 1):
        raise RequestError(f"{field}: the gateway streams one choice; only 1 is accepted",
                           status=422, code="invalid_request", field=field)
    if key in _LIMITS and value is not None and (type(value) is not int or not 1 <= value <= MAX_OUTPUT_TOKENS):
        raise RequestError(f"{field} must be an integer from 1 to {MAX_OUTPUT_TOKENS}",
                           status=422, code="invalid_request", field=field)
