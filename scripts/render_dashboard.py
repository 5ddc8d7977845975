"""Render the Grafana dashboard's panels (deploy/grafana/dashboards/foundry-gateway.json) as one HTML
page of SVG charts, from a Prometheus that scraped the gateway: each panel's queries run through
Prometheus's HTTP API (`/api/v1/query_range`) over the last `--minutes`, `$job` as every job and
`$__rate_interval` as `--rate`. For a picture of the dashboard where Grafana is not at hand (the
README's screenshot: a headless browser shoots the page).

Usage: `python scripts/render_dashboard.py --prometheus http://127.0.0.1:9090 --out dashboard.html`.
"""

from __future__ import annotations

import argparse
import html
import json
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "foundry-gateway.json"
COLOURS = ("#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#b877d9", "#f2495c", "#8ab8ff", "#96d98d")
WIDTH, HEIGHT, PAD = 560, 200, 40


def query(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus}/api/v1/query_range",
                         params={"query": expr, "start": start, "end": end, "step": step}, timeout=30)
    response.raise_for_status()
    return response.json()["data"]["result"]


def legend(template: str, labels: dict[str, str]) -> str:
    out = template
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
    if unit == "percentunit":
        return f"{value * 100:.3g} %"
    return f"{value:.3g}"


def chart(series: list[tuple[str, list[tuple[float, float]]]], unit: str) -> str:
    points = [p for _, values in series for p in values]
    if not points:
        return f'<svg width="{WIDTH}" height="{HEIGHT}"><text x="{PAD}" y="{HEIGHT // 2}" fill="#888">no data</text></svg>'
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(v for _, v in points) or 1.0
    def x(t: float) -> float:
        return PAD + (t - t0) / max(t1 - t0, 1e-9) * (WIDTH - PAD - 10)
    def y(v: float) -> float:
        return HEIGHT - 20 - v / top * (HEIGHT - 40)
    parts = [f'<svg width="{WIDTH}" height="{HEIGHT}">',
             f'<line x1="{PAD}" y1="{HEIGHT - 20}" x2="{WIDTH - 10}" y2="{HEIGHT - 20}" stroke="#444"/>',
             f'<text x="2" y="24" fill="#aaa" font-size="10">{html.escape(fmt(top, unit))}</text>',
             f'<text x="2" y="{HEIGHT - 22}" fill="#aaa" font-size="10">0</text>']
    for i, (_, values) in enumerate(series):
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values)
        parts.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.6" points="{path}"/>')
    parts.append("</svg>")
    return "".join(parts)


def panel_html(panel: dict[str, Any], prometheus: str, start: float, end: float, step: float, rate: str) -> str:
    series: list[tuple[str, list[tuple[float, float]]]] = []
    for target in panel["targets"]:
        expr = target["expr"].replace('job=~"$job"', 'job=~".+"').replace("$__rate_interval", rate)
        for result in query(prometheus, expr, start, end, step):
            values = [(float(t), float(v)) for t, v in result["values"] if v not in ("NaN", "+Inf", "-Inf")]
            if values:
                series.append((legend(target.get("legendFormat", ""), result["metric"]), values))
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    keys = "".join(f'<span style="color:{COLOURS[i % len(COLOURS)]}">&#9632; {html.escape(name)}</span> '
                   for i, (name, _) in enumerate(series[:8]))
    return (f'<div class="panel"><h3>{html.escape(panel["title"])}</h3>{chart(series, unit)}'
            f'<div class="keys">{keys}</div></div>')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", default="1m")
    parser.add_argument("--out", type=Path, default=Path("dashboard.html"))
    args = parser.parse_args()
    dashboard = json.loads(DASHBOARD.read_text())
    end = time.time()
    start = end - args.minutes * 60
    step = max(5.0, args.minutes * 60 / 120)
    panels = "".join(panel_html(p, args.prometheus, start, end, step, args.rate) for p in dashboard["panels"])
    args.out.write_text(
        "<!doctype html><meta charset='utf-8'><title>Foundry Gateway dashboard</title><style>"
        "body{background:#111217;color:#ccccdc;font:13px sans-serif;margin:12px}"
        ".grid{display:grid;grid-template-columns:repeat(2,580px);gap:10px}"
        ".panel{background:#181b1f;border:1px solid #2c3235;padding:6px 8px}h3{margin:2px 0 6px;font-size:13px}"
        ".keys{font-size:11px;margin-top:4px}</style>"
        f"<h2>{html.escape(dashboard['title'])} <small style='color:#888'>(panels of "
        f"deploy/grafana/dashboards/foundry-gateway.json, last {args.minutes:g} minutes)</small></h2>"
        f"<div class='grid'>{panels}</div>")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
