"""`foundry-gateway` (also `python -m app`): serve, migrate, prune, keys, config.

One entry point for operators, so the Makefile, the Dockerfile and compose start the server the
same way (uvicorn with the gateway's log configuration and drain timings) and a configuration
mistake is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from app import VERSION
from app.config_file import GROUPS, STRUCTURED, ConfigError

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = ["main"]

CONFIG_ERROR = 2  # argparse's status for a bad command line, and ours for a bad configuration
KEEP_ALIVE_SECONDS = 75
"""How long the server keeps an idle connection (uvicorn's default is 5 s): longer than the proxies
in front keep theirs pooled (nginx's upstream keep-alive and cloud load balancers: 60 s), so the
proxy, not the gateway, closes an idle connection first. A server that closes first races the
proxy's reuse: a request written as the connection closes is reset, and the proxy answers 502."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status (0 ok, 1 failed, 2 bad command line or configuration)."""
    args = _parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except ConfigError as exc:
        for line in exc.lines:
            print(f"foundry-gateway: configuration error: {line}", file=sys.stderr)
        return CONFIG_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foundry-gateway", description="Foundry Gateway: one canonical SSE event stream for every LLM provider.",
        epilog="Configuration: FOUNDRY_* environment variables and the TOML file named by FOUNDRY_CONFIG "
               "(deploy/foundry.example.toml). `foundry-gateway COMMAND --help` for each command.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the gateway (uvicorn)", description=(
        "Serve the gateway under uvicorn with the gateway's log configuration. SIGTERM drains: readiness "
        "turns 503, new runs are refused, running streams get FOUNDRY_SHUTDOWN_GRACE_SECONDS to finish."))
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; "
                                                           "0.0.0.0 in a container)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=_positive, default=1, help=(
        "worker processes on the one port (default 1; uvicorn's workers, one per core): more than one needs the "
        "Redis stream store (FOUNDRY_REDIS_URL), so that a stream, its cancel and its limits are every worker's"))
    serve.set_defaults(run=_serve)

    migrate = commands.add_parser("migrate", help="migrate the records database to the latest revision",
                                  description="Bring the records database (FOUNDRY_DATABASE_URL, or the SQLite "
                                              "file under FOUNDRY_DATA_DIR) to the latest schema revision.")
    migrate.set_defaults(run=lambda args: asyncio.run(_records_command("migrate")))
    prune = commands.add_parser("prune", help="delete run records past the retention now",
                                description="Delete the run records older than FOUNDRY_RECORD_RETENTION_DAYS.")
    prune.set_defaults(run=lambda args: asyncio.run(_records_command("prune")))

    _add_keys(commands)
    _add_config(commands)
    return parser


def _add_keys(commands: Any) -> None:
    """`keys create|list|revoke|rotate`."""
    keys = commands.add_parser("keys", help="create, list or revoke gateway keys in the records database",
                               description="Manage the keys kept in the records database, for an operator "
                                           "without the admin key at hand (the same store as /v1/admin/keys).")
    key_commands = keys.add_subparsers(title="key commands", required=True, metavar="KEY_COMMAND")
    create = key_commands.add_parser("create", help="create a key (printed once)",
                                     description="Create a key; the key itself is printed once, never again.")
    create.add_argument("name", help="who holds the key (team, app); shown in logs and metrics")
    create.add_argument("--models", nargs="+", metavar="PATTERN",
                        help="allowed models: provider/model, patterns such as openai/*, aliases (default: every model)")
    create.add_argument("--rpm", type=int, help="requests per minute")
    create.add_argument("--tpm", type=int, help="tokens per minute")
    create.add_argument("--max-concurrent", type=int, help="runs in progress at once")
    create.add_argument("--budget-usd", type=float, help="spend per calendar month (UTC)")
    create.add_argument("--expires-at", help="ISO 8601 instant after which the key is refused")
    create.set_defaults(run=lambda args: asyncio.run(_keys(args)))
    listing = key_commands.add_parser("list", help="list keys (ids, names, states, policies; never the keys)",
                                      description="List the keys kept in the records database, one JSON line each: "
                                                  "id, name, state (active, expired, revoked), the policy (models, "
                                                  "rpm, tpm, max_concurrent, budget_usd, expires_at, validators) "
                                                  "and when it was created, changed and revoked.")
    listing.set_defaults(run=lambda args: asyncio.run(_keys(args)))
    revoke = key_commands.add_parser("revoke", help="revoke a key by id", description="Revoke a key by id "
                                     "(its runs and usage keep naming it).")
    revoke.add_argument("key_id", help="the key's id (from `keys list` or `keys create`)")
    revoke.set_defaults(run=lambda args: asyncio.run(_keys(args)))
    rotate = key_commands.add_parser("rotate", help="give a key a new secret (printed once); the old one works "
                                                    "for an overlap window", description=(
        "Give a key a new secret, printed once. The current secret stays accepted for --overlap-seconds "
        "(default 3600; 0 refuses it at once), so clients can move over; the id, policy, runs and spend stay."))
    rotate.add_argument("key_id", help="the key's id (from `keys list` or `keys create`)")
    rotate.add_argument("--overlap-seconds", type=int, default=3600,
                        help="seconds the current secret still works (0 to 2592000; default 3600)")
    rotate.set_defaults(run=lambda args: asyncio.run(_keys(args)))
    for name, parser_ in (("create", create), ("list", listing), ("revoke", revoke), ("rotate", rotate)):
        parser_.set_defaults(key_command=name)


def _add_config(commands: Any) -> None:
    """`config check|schema`."""
    config = commands.add_parser("config", help="check the configuration or print its schema",
                                 description="Check the configuration, or print its JSON schema.")
    config_commands = config.add_subparsers(title="config commands", required=True, metavar="CONFIG_COMMAND")
    check = config_commands.add_parser("check", help="print the effective configuration (secrets masked) and "
                                                     "which providers are served",
                                       description="Print the effective configuration with secrets masked, and "
                                                   "for every provider `served` or `not served: <why>`. Exit "
                                                   "status 2 with one line per mistake when it cannot serve.")
    check.set_defaults(run=_config_check)
    schema = config_commands.add_parser("schema", help="print the JSON schema of the configuration",
                                        description="The JSON schema of the configuration: every setting with "
                                                    "its description, default, variable (x-env) and TOML key (x-toml).")
    schema.set_defaults(run=_config_schema)


def _print_json(value: object) -> int:
    print(json.dumps(value, indent=2, sort_keys=False))
    return 0


def _load_settings() -> Settings:
    """The configuration, after one warning per unknown FOUNDRY_* variable.

    Imported here, not at the top: `--help` and `--version` need no settings, and the settings
    and everything below them cost more to import than those answers take.
    """
    from app.config_load import load_settings, setting_warnings, unknown_variables

    for warning in unknown_variables():
        print(f"foundry-gateway: warning: {warning}", file=sys.stderr)
    settings = load_settings()
    for warning in setting_warnings(settings):
        print(f"foundry-gateway: warning: {warning}", file=sys.stderr)
    return settings


def _config_schema(args: argparse.Namespace) -> int:
    from app.config_load import config_schema

    return _print_json(config_schema())


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.config_load import load_settings, setting_error
    from app.lifecycle import SERVER_CLOSE_SECONDS
    from app.observability import logging_config

    settings = load_settings()  # unknown FOUNDRY_* variables: warned at start, through the log (app/startup.py)
    options: dict[str, Any] = dict(
        host=args.host, port=args.port, log_config=logging_config(settings.log_level, settings.log_json),
        access_log=False,  # the gateway logs one line per request itself
        timeout_graceful_shutdown=int(SERVER_CLOSE_SECONDS), timeout_keep_alive=KEEP_ALIVE_SECONDS,
        proxy_headers=True)
    if args.workers > 1:
        if settings.redis_url is None:  # each worker's memory store would hold its own streams, cancels and limits
            raise setting_error("redis_url", f"--workers {args.workers} needs the Redis stream store: set "
                                "FOUNDRY_REDIS_URL (the in-memory store serves one process)")
        _check_routes(settings)  # each worker builds its app; a mistake is one line here, not one per worker
        # Each worker builds its own app and protocol from the same environment (by import string:
        # uvicorn starts the workers as fresh processes).
        uvicorn.run("app.main:create_app", factory=True, workers=args.workers, http="app.cli:DeadlineProtocol",
                    **options)
        return 0
    from app.api.deadline import deadline_protocol
    from app.main import create_app

    app = create_app(settings)  # a ConfigError here (a route naming no served provider) is exit 2 too
    uvicorn.run(app, http=deadline_protocol(settings.request_timeout_seconds), **options)
    return 0


def __getattr__(name: str) -> Any:
    # `app.cli:DeadlineProtocol`, uvicorn's `http=` in a worker process: the request deadline of the
    # worker's configuration (built on access: the command line's other answers do not need it).
    if name == "DeadlineProtocol":
        from app.api.deadline import deadline_protocol
        from app.config_load import load_settings

        return deadline_protocol(load_settings().request_timeout_seconds)
    raise AttributeError(name)


async def _records_command(command: str) -> int:
    from app.records.store import RecordStore

    settings = _load_settings()
    store = RecordStore(settings.records_url())
    try:
        await store.migrate()
        if command == "migrate":
            print(f"records database {settings.records_url_masked()} ({store.backend}) migrated to the latest revision")
        elif settings.record_retention_days <= 0:
            print("FOUNDRY_RECORD_RETENTION_DAYS is 0: records are kept forever, nothing pruned")
        else:
            cutoff = datetime.now(UTC) - timedelta(days=settings.record_retention_days)
            print(f"deleted {await store.prune(cutoff)} records created before {cutoff.isoformat()}")
    finally:
        await store.aclose()
    return 0


async def _keys(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from app.api.key_schemas import KeyCreate, KeyOut
    from app.auth.keystore import KeyStore
    from app.records.store import RecordStore

    settings = _load_settings()
    if not settings.records:
        raise ConfigError(["FOUNDRY_RECORDS: off, so there is no database to keep keys in (use [[keys]] in "
                           "the config file)"])
    store = RecordStore(settings.records_url())
    keystore = KeyStore(store.engine)
    try:
        await store.migrate()
        if args.key_command == "create":
            given = {"name": args.name, "models": args.models, "rpm": args.rpm, "tpm": args.tpm,
                     "max_concurrent": args.max_concurrent, "budget_usd": args.budget_usd,
                     "expires_at": args.expires_at}
            try:
                fields = KeyCreate.model_validate({k: v for k, v in given.items() if v is not None})
            except ValidationError as exc:
                for error in exc.errors():
                    print(f"foundry-gateway: keys create: {'.'.join(map(str, error['loc']))}: {error['msg']}",
                          file=sys.stderr)
                return CONFIG_ERROR
            row, key = await keystore.create(fields)
            print(json.dumps({"id": row.policy.id, "name": fields.name, "key": key}))
            print("Store the key now: it is shown this once and never again.", file=sys.stderr)
        elif args.key_command == "rotate":
            return await _rotate(keystore, args.key_id, args.overlap_seconds)
        elif args.key_command == "list":
            for row in await keystore.list():
                print(json.dumps(KeyOut.of(row.policy, row).model_dump(mode="json", exclude={"source"})))
        elif not await keystore.revoke(args.key_id):
            held = await keystore.get(args.key_id)
            said = f"was already revoked at {held.revoked_at.isoformat()}" if held is not None and held.revoked_at \
                else "does not exist"
            print(f"foundry-gateway: keys revoke: key {args.key_id!r} {said}", file=sys.stderr)
            return 1
        else:
            print(f"revoked {args.key_id}")
    finally:
        await store.aclose()
    return 0


async def _rotate(keystore: Any, key_id: str, overlap_seconds: int) -> int:
    from app.auth.keystore import MAX_OVERLAP_SECONDS

    if not 0 <= overlap_seconds <= MAX_OVERLAP_SECONDS:
        print(f"foundry-gateway: keys rotate: --overlap-seconds must be from 0 to {MAX_OVERLAP_SECONDS}",
              file=sys.stderr)
        return CONFIG_ERROR
    rotated = await keystore.rotate(key_id, overlap_seconds)
    if rotated is None:
        print(f"foundry-gateway: keys rotate: no active key {key_id!r}", file=sys.stderr)
        return 1
    row, key = rotated
    until = row.previous_expires_at.isoformat() if row.previous_expires_at else None
    print(json.dumps({"id": row.policy.id, "name": row.policy.name, "key": key, "previous_expires_at": until}))
    print("Store the new key now: it is shown this once. The old one works until previous_expires_at.",
          file=sys.stderr)
    return 0


def _config_check(args: argparse.Namespace) -> int:
    from app.core.cost import price_sources
    from app.startup import describe_settings, provider_statuses, stream_store_label

    settings = _load_settings()
    _check_routes(settings)
    shown = describe_settings(settings)
    for group, fields in GROUPS.items():
        print(f"[{group}]")
        for field in fields:
            print(f"{field} = {json.dumps(shown[field])}")
        print()
    for field in STRUCTURED:
        print(f"{field} = {json.dumps(shown[field])}")
    print()
    print("[served]")
    for status in provider_statuses(settings):
        print(status.line())
    print(f"stream store: {stream_store_label(settings)}")
    print(f"records: {settings.records_url_masked() if settings.records else 'off'}")
    print(f"auth: {settings.auth}" + (" (keys required)" if settings.admin_key or settings.keys else ""))
    print(f"prices: {price_sources(settings.prices, library=settings.price_library)}")
    return 0


def _check_routes(settings: Settings) -> None:
    """Routes whose targets name no served provider: the same check the server makes at start.

    The check builds the providers, so it (and their SDKs) is imported only when there is a route
    to check: with none, `config check` answers without them.
    """
    if not settings.routes:
        return
    from app.config_load import setting_error
    from app.providers.registry import build_registry
    from app.routing.router import RouteConfigError, check_routes

    try:
        check_routes(settings.routes, build_registry(settings.provider_config()))
    except RouteConfigError as exc:
        raise setting_error("routes", str(exc)) from None
