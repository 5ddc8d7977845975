"""The provider catalog (app/providers/catalog.py) is the one list: every listed provider has its
recordings, a row in the docs' provider table, settings the gateway reads, and code that loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.config_file import GROUPS
from app.providers.catalog import PROVIDERS, default_options, default_patterns, setting_specs
from app.providers.config import ProviderConfig, ReadLimits
from app.providers.descriptor import ProviderDescriptor
from app.settings import Settings
from tests.support import recordings

DOCS = Path(__file__).resolve().parents[1] / "docs" / "providers.md"
NAMES = [d.name for d in PROVIDERS]


def test_names_are_unique_and_patterns_name_listed_providers() -> None:
    assert len(NAMES) == len(set(NAMES))
    assert set(default_patterns().values()) <= set(NAMES)
    assert set(default_options()) == {*NAMES, "*"}


@pytest.mark.parametrize("provider", PROVIDERS, ids=NAMES)
def test_every_streaming_provider_has_recordings(provider: ProviderDescriptor) -> None:
    if provider.name == "mock":
        return  # embedded: no wire
    assert provider.fixtures, f"{provider.name}: no fixtures folder named"
    assert recordings(provider.fixtures), f"{provider.name}: no recordings"
    assert provider.framing is not None and provider.normalizer is not None


@pytest.mark.parametrize("provider", PROVIDERS, ids=NAMES)
def test_every_provider_has_a_docs_row(provider: ProviderDescriptor) -> None:
    rows = re.findall(r"^\| `([a-z0-9<>_.-]+)/\*` \|", DOCS.read_text(), flags=re.MULTILINE)
    assert provider.name in rows, f"docs/providers.md has no `{provider.name}/*` row"


@pytest.mark.parametrize("provider", PROVIDERS, ids=NAMES)
def test_every_provider_setting_is_a_setting_and_in_the_upstream_table(provider: ProviderDescriptor) -> None:
    for spec in provider.settings:
        field = Settings.model_fields[spec.field]
        assert field.description == spec.description
        assert spec.field in GROUPS["upstream"]
    assert set(provider.credentials) <= {spec.field for spec in provider.settings}
    assert provider.base_url_setting is None or provider.base_url_setting in {s.field for s in provider.settings}


@pytest.mark.parametrize("provider", PROVIDERS, ids=NAMES)
def test_the_code_fields_load(provider: ProviderDescriptor) -> None:
    assert isinstance(provider.build(ProviderConfig(), {}), dict)
    if provider.framing is not None and provider.normalizer is not None:
        decoder = provider.framing(ReadLimits())
        assert decoder.feed(b"") == []
        assert hasattr(provider.normalizer(provider.name), "feed")


def test_settings_from_the_environment_reach_the_provider_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for spec in setting_specs():
        monkeypatch.setenv(spec.env[-1], "https://x.test/v1" if spec.kind == "url" else f"value-of-{spec.field}")
    config = Settings().provider_config()
    for spec in setting_specs():
        assert config.secret(spec.field)
