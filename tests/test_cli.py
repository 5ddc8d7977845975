"""`foundry-gateway` (app/cli.py) and configuration that fails loudly: every mistake is one line
naming the variable or TOML key, exit status 2; empty variables are unset ones; an unknown
FOUNDRY_* variable is a warning naming the closest setting; deploy/foundry.example.toml loads."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.auth.keystore import KeyStore
from app.auth.policy import KeyFields
from app.cli import main
from app.config_file import STRUCTURED
from app.config_load import load_settings
from app.records.store import RecordStore
from app.settings import Settings
from tests.support import REPO

EXAMPLE = REPO / "deploy" / "foundry.example.toml"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FOUNDRY_* or provider key from the machine leaks into these checks."""
    for name in list(os.environ):
        if name.startswith("FOUNDRY_") or name.endswith("_API_KEY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FOUNDRY_DATA_DIR", str(tmp_path))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse: --help and usage errors
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def test_an_empty_variable_is_an_unset_one_for_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose passes `KEY: ""` for every variable it was not given (FOUNDRY_PRICES= crashed the replicas)."""
    for field in Settings.model_fields:
        monkeypatch.setenv(f"FOUNDRY_{field.upper()}", "")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, "")
    assert load_settings().model_dump() == Settings().model_dump()


@pytest.mark.parametrize(("env", "names", "reason"), [
    ({"FOUNDRY_ALIASES": "{bad"}, "FOUNDRY_ALIASES", "not valid JSON"),
    ({"FOUNDRY_CONFIG": "/nonexistent.toml"}, "FOUNDRY_CONFIG", "does not exist"),
    ({"FOUNDRY_MAX_STEPS": "many"}, "FOUNDRY_MAX_STEPS", "valid integer"),
    ({"FOUNDRY_AUTH": "required"}, "FOUNDRY_AUTH=required", "FOUNDRY_ADMIN_KEY"),
    ({"FOUNDRY_ROUTES": '{"r": {"targets": ["nowhere/x"]}}'}, "routes.r.targets.0.model", "unknown provider"),
    ({"FOUNDRY_STOP_GRACE_SECONDS": "20", "FOUNDRY_SHUTDOWN_GRACE_SECONDS": "19"}, "FOUNDRY_SHUTDOWN_GRACE_SECONDS",
     "does not fit"),
    ({"FOUNDRY_REDIS_URL": "localhost:6379"}, "FOUNDRY_REDIS_URL", "must start with redis://"),
    ({"FOUNDRY_REDIS_URL": "redis://localhost:sixty/0"}, "FOUNDRY_REDIS_URL", "cannot be read"),
    ({"FOUNDRY_REDIS_URL": "redis:///0"}, "FOUNDRY_REDIS_URL", "has no host"),
    ({"OPENAI_BASE_URL": "api.openai.com/v1"}, "OPENAI_BASE_URL", "must start with http:// or https://"),
    ({"ANTHROPIC_BASE_URL": "htps://api.anthropic.com"}, "ANTHROPIC_BASE_URL", "must start with http://"),
    ({"GEMINI_BASE_URL": "https://"}, "GEMINI_BASE_URL", "has no host"),
    ({"FOUNDRY_PROVIDERS": '[{"name": "vllm", "base_url": "localhost:8000/v1"}]'}, "FOUNDRY_PROVIDERS: 0.base_url",
     "must start with http://"),
    ({"FOUNDRY_DATABASE_URL": "mysql://db/foundry"}, "FOUNDRY_DATABASE_URL", "'mysql' is not supported"),
    ({"FOUNDRY_DATABASE_URL": "postgresql+psycopg2://db/foundry"}, "FOUNDRY_DATABASE_URL", "not installed"),
    ({"FOUNDRY_DATABASE_URL": "db:5432/foundry"}, "FOUNDRY_DATABASE_URL", "not a database URL"),
    ({"FOUNDRY_ADMIN_KEY": "abc"}, "FOUNDRY_ADMIN_KEY", "too short or too repetitive (3 characters)"),
    ({"FOUNDRY_ADMIN_KEY": "ab" * 20}, "FOUNDRY_ADMIN_KEY", "at least 32 random characters"),
])
@pytest.mark.parametrize("command", [("config", "check"), ("serve",)])
def test_each_mistake_is_one_line_and_exit_status_2(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str], names: str,
        reason: str, command: tuple[str, ...]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    status, out, err = run(capsys, *command)
    assert status == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith("foundry-gateway: configuration error: ") and names in line and reason in line
    assert "Traceback" not in err


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_url_as_users_write_it_opens_with_asyncpg(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, postgres_url: str, scheme: str) -> None:
    """Provider consoles and libpq write postgresql:// or postgres://; the store runs on asyncpg."""
    written = scheme + postgres_url[postgres_url.index(":"):]
    monkeypatch.setenv("FOUNDRY_DATABASE_URL", written)
    assert load_settings().records_url().startswith("postgresql+asyncpg://")
    status, out, _ = run(capsys, "migrate")
    assert status == 0 and "(postgresql) migrated" in out


def test_a_toml_mistake_names_the_file_the_table_and_the_key(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[http]\nmax_body_bytes = 12\n\n[streams]\nstream_ttl = 5\n')
    monkeypatch.setenv("FOUNDRY_CONFIG", str(config))
    status, _, err = run(capsys, "config", "check")
    assert status == 2
    assert err.splitlines() == [
        f"foundry-gateway: configuration error: {config}: [streams] stream_ttl: unknown setting "
        "(did you mean stream_ttl_seconds?)"]
    config.write_text('[http]\nmax_body_bytes = 12\n')
    status, _, err = run(capsys, "config", "check")
    assert status == 2 and f"{config}: [http] max_body_bytes: Input should be greater than or equal to 1024" in err
    config.write_text('[http\n')
    status, _, err = run(capsys, "config", "check")
    assert status == 2 and len(err.splitlines()) == 1 and "not valid TOML" in err


def test_an_unknown_variable_is_a_warning_naming_the_closest_setting(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_MAX_BODYBYTES", "10")
    status, _, err = run(capsys, "config", "check")
    assert status == 0
    assert "warning: FOUNDRY_MAX_BODYBYTES: no such setting, ignored (did you mean FOUNDRY_MAX_BODY_BYTES?)" in err


def test_a_lease_one_slow_renewal_would_lapse_is_a_warning_naming_both_settings(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Renewed every third of itself, a lease no longer than three reply timeouts lapses when one
    renewal waits its whole bound (twice the timeout): a Redis cluster's failover did that to a
    live replica's streams in the suites (2 s lease, 1 s timeout)."""
    monkeypatch.setenv("FOUNDRY_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("FOUNDRY_REDIS_LEASE_SECONDS", "3")
    monkeypatch.setenv("FOUNDRY_REDIS_TIMEOUT_SECONDS", "1")
    status, _, err = run(capsys, "config", "check")
    assert status == 0
    assert ("warning: FOUNDRY_REDIS_LEASE_SECONDS (3) is not more than three times FOUNDRY_REDIS_TIMEOUT_SECONDS (1): "
            "one slow lease renewal lets the lease lapse") in err
    monkeypatch.setenv("FOUNDRY_REDIS_LEASE_SECONDS", "3.5")
    status, _, err = run(capsys, "config", "check")
    assert status == 0 and "FOUNDRY_REDIS_LEASE_SECONDS" not in err
    monkeypatch.delenv("FOUNDRY_REDIS_URL")  # no Redis: no lease
    monkeypatch.setenv("FOUNDRY_REDIS_LEASE_SECONDS", "1")
    status, _, err = run(capsys, "config", "check")
    assert status == 0 and "FOUNDRY_REDIS_LEASE_SECONDS" not in err


def test_config_check_masks_secrets_and_says_why_a_provider_is_not_served(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    key, password = "sk-proj-0123456789abcdefABCDEF", "db-pass-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("FOUNDRY_DATABASE_URL", f"postgresql+asyncpg://foundry:{password}@db:5432/foundry")
    monkeypatch.setenv("FOUNDRY_ADMIN_KEY", "admin-0123456789abcdef-0123456789abcdef")
    monkeypatch.setenv("FOUNDRY_PROVIDERS", json.dumps([{"name": "groq", "base_url": "https://api.groq.com/openai/v1",
                                                          "api_key_env": "GROQ_API_KEY"}]))
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    status, out, _ = run(capsys, "config", "check")
    assert status == 0
    assert "openai: served (OPENAI_API_KEY set)" in out and "groq: not served: GROQ_API_KEY is not set" in out
    assert "mock: served (embedded)" in out and "postgresql+asyncpg://foundry:***@db:5432/foundry" in out
    assert key not in out and password not in out and "admin-0123456789abcdef-0123456789abcdef" not in out
    assert 'admin_key = "********"' in out


def test_config_schema_describes_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "config", "schema")
    schema = json.loads(out)
    assert status == 0 and set(schema["properties"]) == set(Settings.model_fields)
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"{name} has no description"
        assert prop["x-env"] and prop["x-toml"]
    assert schema["properties"]["transcript_max_items"]["x-toml"] == "[tool_runs] transcript_max_items"
    assert schema["properties"]["openai_api_key"]["x-env"] == "OPENAI_API_KEY"


def test_the_example_config_file_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_CONFIG", str(EXAMPLE))
    settings = load_settings()
    assert settings.aliases == {"fast": "mock/simple"} and [p.name for p in settings.providers] == ["local", "groq"]
    assert settings.routes["default"].targets[1].model == "mock/echo" and settings.keys[0].name == "team-a"
    assert settings.max_steps == 8 and settings.default_chunking == "sentence"
    text = EXAMPLE.read_text()
    for field in STRUCTURED:  # every structured setting has an example
        assert f"[{field}" in text or f"[[{field}]]" in text, field


def test_keys_create_list_revoke_through_the_key_store(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "keys", "create", "team-cli", "--models", "mock/*", "--rpm", "60")
    assert status == 0 and "shown this once" in err
    created = json.loads(out)
    assert created["key"].startswith("fgw-") and created["name"] == "team-cli"
    status, out, _ = run(capsys, "keys", "list")
    [listed] = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and listed["id"] == created["id"] and listed["state"] == "active"
    assert created["key"] not in out
    assert run(capsys, "keys", "revoke", created["id"])[0] == 0
    assert json.loads(run(capsys, "keys", "list")[1])["state"] == "revoked"
    status, _, err = run(capsys, "keys", "revoke", created["id"])
    assert status == 1 and f"key {created['id']!r} was already revoked at " in err
    status, _, err = run(capsys, "keys", "revoke", "key_nope")
    assert status == 1 and "'key_nope' does not exist" in err
    assert run(capsys, "keys", "create", "bad name!")[0] == 2


def test_no_example_key_expiry_is_a_fixed_date() -> None:
    """A fixed date in an example passes one day, and the example then makes a key refused at once."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "deploy").glob("*"))]
    fixed = re.compile(r"(expires_at\W+|--expires-at\s+)\d{4}-\d{2}-\d{2}")
    found = [f"{page.name}: {match.group(0)}" for page in pages if page.is_file()
             for match in fixed.finditer(page.read_text(errors="replace"))]
    assert not found


def test_keys_list_prints_the_policy_and_an_expired_key_as_expired(capsys: pytest.CaptureFixture[str]) -> None:
    soon = (datetime.now(UTC) + timedelta(days=90)).isoformat()
    status, out, _ = run(capsys, "keys", "create", "team-a", "--models", "mock/*", "--rpm", "60", "--tpm", "1000",
                         "--max-concurrent", "2", "--budget-usd", "5", "--expires-at", soon)
    assert status == 0
    status, _, err = run(capsys, "keys", "create", "team-b", "--expires-at", "2020-01-01T00:00:00Z")
    assert status == 2 and err.splitlines() == [
        "foundry-gateway: keys create: expires_at: Value error, is in the past: a key would be refused from the start "
        "(revoke a key to stop it now)"]

    async def expired_key() -> None:  # as a key made earlier would be once its expiry passed
        store = RecordStore(load_settings().records_url())
        try:
            await KeyStore(store.engine).create(KeyFields(name="team-old", expires_at=datetime.now(UTC)))
        finally:
            await store.aclose()

    asyncio.run(expired_key())
    status, out, _ = run(capsys, "keys", "list")
    listed = {line["name"]: line for line in map(json.loads, out.splitlines())}
    assert listed["team-a"]["state"] == "active" and listed["team-old"]["state"] == "expired"
    policy = {k: listed["team-a"][k] for k in ("models", "rpm", "tpm", "max_concurrent", "budget_usd")}
    assert policy == {"models": ["mock/*"], "rpm": 60, "tpm": 1000, "max_concurrent": 2, "budget_usd": 5.0}
    assert listed["team-a"]["expires_at"] and "key" not in listed["team-a"]
    _, help_text, _ = run(capsys, "keys", "list", "--help")
    assert "expired" in help_text and "budget_usd" in help_text


def test_migrate_and_prune(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "migrate")
    assert status == 0 and "latest revision" in out
    status, out, _ = run(capsys, "prune")
    assert status == 0 and "deleted 0 records" in out


@pytest.mark.parametrize("argv", [[], ["serve"], ["migrate"], ["prune"], ["keys"], ["keys", "create"], ["keys", "list"],
                                  ["keys", "revoke"], ["config"], ["config", "check"], ["config", "schema"]])
def test_help_on_every_command(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    status, out, _ = run(capsys, *argv, "--help")
    assert status == 0 and out.startswith("usage: foundry-gateway")


def test_the_console_script_and_python_dash_m_app() -> None:
    script = Path(sys.executable).parent / "foundry-gateway"
    for argv in ([str(script)], [sys.executable, "-m", "app"]):
        done = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 0 and done.stdout.startswith("foundry-gateway "), done.stderr


# What an answer that needs no provider must not import: the SDKs, the web stack, the gateway.
_SERVING = ("anthropic", "openai", "fastapi", "starlette", "uvicorn", "aiohttp", "app.providers.base", "app.main",
            "app.pipeline")
# And --help and --version need no settings at all.
_SETTINGS = ("app.settings", "pydantic", "sqlalchemy")
_IMPORTED_AFTER = """
import json, sys
from app.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize(("argv", "forbidden"), [
    (["--version"], _SERVING + _SETTINGS),
    (["--help"], _SERVING + _SETTINGS),
    (["config", "check"], (*_SERVING, "sqlalchemy", "alembic", "genai_prices")),  # nor the records machinery
])
def test_help_version_and_config_check_import_no_provider(tmp_path: Path, argv: list[str],
                                                          forbidden: tuple[str, ...]) -> None:
    """The modules a fresh interpreter holds after the command (a count, not a clock): those commands
    answer at once because the SDKs and the app behind `serve` are imported only by the commands
    that use them. `config check` with routes builds the providers to check them (tested above)."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FOUNDRY_") or k.endswith("_API_KEY"))}
    env["FOUNDRY_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", _IMPORTED_AFTER, *argv], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stderr.splitlines()[-1])
    assert [m for m in imported if m in forbidden or m.split(".")[0] in forbidden] == []


@pytest.mark.parametrize("url", [
    "postgresql+asyncpg://u:p%40ss@h:5432/db", "postgresql+asyncpg://u@h/db", "sqlite+aiosqlite:///var/foundry.db",
    "postgresql+asyncpg://u:pw@h/db?ssl=require", "postgresql+asyncpg://:pw@h/db", "postgresql+asyncpg://u:a:b@h/db",
])
def test_a_masked_database_url_reads_as_sqlalchemys(url: str) -> None:
    """`config check` masks the URL with the standard library (no SQLAlchemy import): the same text."""
    from sqlalchemy.engine import make_url

    from app.records.urls import masked_url

    assert masked_url(url) == make_url(url).render_as_string(hide_password=True)
