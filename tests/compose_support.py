"""Read docker-compose.yml as compose would: `<<` merges, `${VAR}`, `${VAR:-default}`,
`${VAR:?message}` and `$$` resolved from a given environment (tests/test_compose_topology.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])((?:[^{}]|\{[^{}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class MissingVariable(Exception):
    pass


def interpolate(text: str, environ: Mapping[str, str]) -> str:
    """Compose's interpolation: `:-` default when unset or empty, `-` when unset, `:?`/`?` refuse."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, argument = match.group(2), match.group(3) or ""
        value = environ.get(name)
        unset = value is None or (operator is not None and operator.startswith(":") and value == "")
        if operator in (":-", "-") and unset:
            return interpolate(argument, environ)
        if operator in (":?", "?") and unset:
            raise MissingVariable(f"{name}: {argument}")
        return value or ""

    return _VARIABLE.sub(one, text)


def _resolve(value: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate(value, environ)
    if isinstance(value, list):
        return [_resolve(v, environ) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, environ) for k, v in value.items()}
    return value


def load_compose(path: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """The compose file with its variables resolved (yaml.safe_load applies `<<` merges)."""
    document = yaml.safe_load(path.read_text())
    return {"services": _resolve(document["services"], environ)}


def service_environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as strings (compose accepts a mapping or a list of KEY=VALUE)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items()}


def seconds(duration: str) -> float:
    """A compose duration (`30s`, `1m30s`) in seconds."""
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(ms|h|m|s)", duration):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total
