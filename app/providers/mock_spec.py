"""The descriptor of `mock`, the embedded default (app/providers/descriptor.py)."""

from __future__ import annotations

from app.providers.descriptor import ProviderDescriptor, lazy

__all__ = ["MOCK"]

MOCK = ProviderDescriptor(
    name="mock",
    summary="built in: canned scenarios (`simple`, `tool_call`, `echo`, `lorem-<N>`), always served",
    build=lazy("app.providers.mock:build_mock"),
    options=("delay_ms", "fail_after"),
)
