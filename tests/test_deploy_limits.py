"""The shipped front door (deploy/nginx.conf, as docker-compose.yml runs it) is no narrower and no
slower than the gateway behind it: its body limit lets through every body the gateway takes (a
larger one gets the gateway's JSON 413, not nginx's HTML one), and its timeouts match the gateway's
request timeout and outlast a run's total deadline."""

from __future__ import annotations

import re

import yaml

from app.api.media import largest_body
from app.settings import Settings
from tests.support import REPO

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def _directive(conf: str, name: str) -> str:
    [value] = re.findall(rf"^\s*{name}\s+([^;]+);", conf, flags=re.MULTILINE)
    return value.strip()


def _size(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG]?)", value).groups()  # type: ignore[union-attr]
    return int(number) * _UNITS[unit.lower()]


def _seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)([smh]?)", value).groups()  # type: ignore[union-attr]
    return int(number) * _SECONDS[unit]


def _compose_settings() -> Settings:
    """The replicas' settings as docker-compose.yml gives them (its HTTP limits, when it sets any)."""
    environment = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["gateway-a"]["environment"]
    fields = ("max_body_bytes", "media_request_max_bytes", "request_timeout_seconds", "max_total_timeout")
    given = {field: environment[f"FOUNDRY_{field.upper()}"] for field in fields
             if f"FOUNDRY_{field.upper()}" in environment}
    return Settings(**given)


def test_the_proxy_takes_every_body_the_gateway_takes_and_not_much_more() -> None:
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    gateway = largest_body(_compose_settings())
    proxy = _size(_directive(conf, "client_max_body_size"))
    assert gateway <= proxy <= gateway + (1 << 20), (proxy, gateway)


def test_the_proxy_timeouts_follow_the_gateway() -> None:
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    settings = _compose_settings()
    for name in ("client_header_timeout", "client_body_timeout"):
        assert _seconds(_directive(conf, name)) == settings.request_timeout_seconds, name
    assert _seconds(_directive(conf, "proxy_read_timeout")) >= settings.max_total_timeout
    assert _directive(conf, "proxy_buffering") == "off"
