"""The dashboards and alerts shipped in deploy/: every metric the Grafana dashboard and the
Prometheus alert rules query is one the gateway exports (its /metrics scraped after a run), the
rules and the Prometheus configuration pass promtool (with the rules' own unit tests), and the compose
file's `observability` profile is optional and points at what exists."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.settings import Settings
from tests.support import REPO

DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "foundry-gateway.json"
RULES = DEPLOY / "prometheus" / "alerts.yml"
OURS = re.compile(r"\b((?:foundry|gen_ai)_[a-z0-9_]+)\b")
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "gauge": ("",), "summary": ("_sum", "_count", "_created")}


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


def _rule_queries() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


async def _exported() -> set[str]:
    """Every series name the gateway's /metrics can show (a family's samples, by its type)."""
    app = create_app(Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        await c.post("/v1/stream", json={"model": "mock/tool_call", "messages": [{"role": "user", "content": "2+2?"}]})
        text = (await c.get("/metrics")).text
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names


async def test_every_metric_the_dashboard_and_the_alerts_query_is_exported() -> None:
    exported = await _exported()
    queries = _dashboard_queries() + _rule_queries()
    referenced = {name for query in queries for name in OURS.findall(query)}
    assert len(referenced) >= 12  # the dashboard covers runs, TTFT, tokens, attempts, breakers, stores, records
    assert referenced - exported == set()
    for needed in ("gen_ai_server_time_to_first_token_seconds_bucket", "foundry_circuit_state",
                   "foundry_store_errors_total", "foundry_records_dropped_total", "foundry_active_runs"):
        assert needed in referenced


def test_the_alerts_cover_what_operators_page_on() -> None:
    names = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    assert {"FoundryRunErrorRatioHigh", "FoundryTimeToFirstTokenP95High", "FoundryCircuitOpen",
            "FoundryStreamStoreUnavailable", "FoundryRunRecordsDropped", "FoundrySaturated"} <= names


def test_the_dashboard_uses_the_provisioned_datasource() -> None:
    datasources = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uids = {d["uid"] for d in datasources["datasources"]}
    dashboard = json.loads(DASHBOARD.read_text())
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} <= uids
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not installed (.ci/run installs Debian's prometheus package)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


@pytest.mark.parametrize("args", [
    ("check", "config", "prometheus.yml"),  # the configuration and the rule file it loads
    ("test", "rules", "alerts_test.yml"),  # the alerts fire on the series that should fire them
])
def test_promtool_accepts_the_configuration_and_the_rules(args: tuple[str, ...]) -> None:
    done = subprocess.run([_promtool(), *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_the_observability_profile_is_optional_and_its_files_exist() -> None:
    services = _compose()["services"]
    profiled = {name for name, s in services.items() if "observability" in (s.get("profiles") or [])}
    assert profiled == {"prometheus", "grafana", "otel-collector", "jaeger"}
    assert all(not services[name].get("profiles") for name in ("redis", "postgres", "gateway-a", "gateway-b", "nginx"))
    for name in profiled:
        for volume in services[name].get("volumes", []):
            source = volume.split(":")[0]
            assert (REPO / source).exists(), f"{name}: {source}"
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    [gateways] = [job for job in scrape if job["job_name"] == "foundry-gateway"]
    targets = {t.split(":")[0] for config in gateways["static_configs"] for t in config["targets"]}
    assert targets == {name for name in services if name.startswith("gateway-")}
    collector = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in services["gateway-a"]["environment"]

