"""docs/configuration-reference.md is generated from the settings' schema; CI fails when they disagree."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from scripts.gen_config_reference import TARGET, Row, _rows, main, render

from app.settings import Settings


def test_configuration_reference_matches_the_settings() -> None:
    assert TARGET.read_text() == render(), "docs/configuration-reference.md is stale: run scripts/gen_config_reference.py"


def test_check_mode_fails_on_a_stale_page(monkeypatch, tmp_path, capsys) -> None:
    stale = tmp_path / "configuration-reference.md"
    stale.write_text(render().replace("FOUNDRY_MAX_BODY_BYTES", "FOUNDRY_MAX_BODYBYTES"))
    monkeypatch.setattr("scripts.gen_config_reference.TARGET", stale)
    monkeypatch.setattr("scripts.gen_config_reference.ROOT", tmp_path)
    assert main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert main([]) == 0
    assert main(["--check"]) == 0


def test_every_setting_is_on_the_page() -> None:
    page = render()
    for name in Settings.model_fields:
        assert f"`{name}`" in page or f"`{name}." in page, name


class _Group(BaseModel):
    batch_size: int = Field(default=200, ge=1, description="Rows per insert.")
    url: SecretStr | None = None


class _OwnGroup(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FOUNDRY_LOG_")

    level: str = Field(default="info", description="Threshold.")


class _Sample(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FOUNDRY_", env_nested_delimiter="__")

    plain: float = Field(default=0.5, gt=0, le=10, description="A | piped <value>.")
    key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("SAMPLE_API_KEY", "OTHER_KEY", "key"))
    records: _Group = Field(default_factory=_Group)


def test_rows_follow_prefixes_aliases_groups_and_secrets(monkeypatch) -> None:
    schema = _Sample.model_json_schema()
    rows = {row.key: row for row in _rows(_Sample, schema, schema.get("$defs", {}))}
    assert rows["plain"] == Row(key="plain", env=("FOUNDRY_PLAIN",), type="number, > 0, <= 10", default="`0.5`",
                                long_default=None, secret=False, description="A | piped <value>.")
    assert rows["key"].env == ("SAMPLE_API_KEY", "OTHER_KEY", "KEY")
    assert rows["key"].secret and rows["key"].default == "unset"
    assert rows["records.batch_size"].env == ("FOUNDRY_RECORDS__BATCH_SIZE",)
    assert rows["records.batch_size"].type == "integer, >= 1"
    assert rows["records.url"].secret
    # the page names the variables that work
    monkeypatch.setenv("FOUNDRY_RECORDS__BATCH_SIZE", "7")
    monkeypatch.setenv("OTHER_KEY", "s3cret")
    sample = _Sample()
    assert sample.records.batch_size == 7 and sample.key is not None and sample.key.get_secret_value() == "s3cret"


class _Grouped(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FOUNDRY_")

    log: _OwnGroup = Field(default_factory=_OwnGroup)


def test_a_group_that_reads_the_environment_itself_keeps_its_prefix(monkeypatch) -> None:
    schema = _Grouped.model_json_schema()
    rows = {row.key: row for row in _rows(_Grouped, schema, schema.get("$defs", {}))}
    assert rows["log.level"].env == ("FOUNDRY_LOG_LEVEL",)
    assert rows["log.level"].default == '`"info"`'
    monkeypatch.setenv("FOUNDRY_LOG_LEVEL", "debug")  # the page names the variable that works
    assert _Grouped().log.level == "debug"
