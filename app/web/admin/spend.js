// Spend: GET /v1/usage/series per day, week or month, key and model: a stacked bar chart of cost
// (or tokens) per period, split by key or by model, the table behind it, and a CSV of that table.

import { api } from "./api.js";
import { h, num, table, text, usd } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const TOKENS = ["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "total_tokens"];
const COLUMNS = ["period", "key_id", "model", "requests", "errors", ...TOKENS, "cost_usd"];
const DAY = 86400000;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child);
  return el;
}

export function csv(rows) {
  const cell = (value) => {
    const s = value === null || value === undefined ? "" : String(value);
    // quoted when needed; a leading = + - @ is prefixed so a spreadsheet never runs it as a formula
    const safe = /^[=+\-@\t\r]/.test(s) && !/^-?\d/.test(s) ? `'${s}` : s;
    return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
  };
  const lines = [COLUMNS.join(",")];
  for (const r of rows) {
    lines.push(COLUMNS.map((c) => cell(TOKENS.includes(c) ? r.tokens[c] : r[c])).join(","));
  }
  return `${lines.join("\r\n")}\r\n`;
}

function chart(rows, splitBy, measure) {
  const periods = [...new Set(rows.map((r) => r.period))].sort();
  const series = [...new Set(rows.map((r) => (splitBy === "key" ? r.key_id || "admin/open" : r.model)))].sort();
  const value = (r) => (measure === "cost" ? r.cost_usd : r.tokens.total_tokens);
  const totals = new Map(periods.map((p) => [p, new Map()]));
  for (const r of rows) {
    const name = splitBy === "key" ? r.key_id || "admin/open" : r.model;
    const m = totals.get(r.period);
    m.set(name, (m.get(name) || 0) + value(r));
  }
  const max = Math.max(0, ...periods.map((p) => [...totals.get(p).values()].reduce((a, b) => a + b, 0))) || 1;
  const width = 760, height = 260, left = 70, bottom = 40, top = 10;
  const band = (width - left - 10) / Math.max(1, periods.length);
  const bar = Math.max(2, Math.min(48, band * 0.7));
  const label = measure === "cost" ? usd : (v) => num(v);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", id: "spend-chart",
    "aria-label": `${measure === "cost" ? "Cost" : "Total tokens"} per period, by ${splitBy}: ${periods.length} periods, ${series.length} series (the table below has the figures)` });
  for (const f of [0, 0.5, 1]) {
    const y = top + (height - top - bottom) * (1 - f);
    root.append(svg("line", { x1: left, x2: width - 5, y1: y, y2: y, stroke: "#c9ced6" }),
      svg("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, label(max * f)));
  }
  periods.forEach((period, i) => {
    let y = height - bottom;
    const x = left + i * band + (band - bar) / 2;
    for (const [s, name] of series.entries()) {
      const v = totals.get(period).get(name) || 0;
      if (!v) continue;
      const hgt = ((height - top - bottom) * v) / max;
      y -= hgt;
      root.append(svg("rect", { x, y, width: bar, height: Math.max(1, hgt), class: `c${s % 8}` },
        svg("title", {}, `${period} · ${name}: ${label(v)}`)));
    }
    if (periods.length <= 16 || i % Math.ceil(periods.length / 16) === 0) {
      root.append(svg("text", { x: x + bar / 2, y: height - bottom + 16, "text-anchor": "middle" }, period));
    }
  });
  const legend = h("ul", { class: "legend", "aria-label": "Chart legend" }, series.map((name, s) =>
    h("li", {}, h("span", { class: `swatch c${s % 8}`, "aria-hidden": "true" }), text(name))));
  return h("figure", {}, root, legend);
}

export async function render(container) {
  const until = new Date();
  const since = new Date(until.getTime() - 30 * DAY);
  const form = h("form", { id: "spend-form", "aria-label": "Spend period" },
    h("div", { class: "form-grid" },
      h("div", {}, h("label", { for: "s-since" }, "From (UTC day)"), h("input", { id: "s-since", name: "since", type: "date", value: since.toISOString().slice(0, 10) })),
      h("div", {}, h("label", { for: "s-until" }, "To (UTC day, included)"), h("input", { id: "s-until", name: "until", type: "date", value: until.toISOString().slice(0, 10) })),
      h("div", {}, h("label", { for: "s-bucket" }, "Per"), h("select", { id: "s-bucket", name: "bucket" },
        ["day", "week", "month"].map((b) => h("option", { value: b }, b)))),
      h("div", {}, h("label", { for: "s-split" }, "Split by"), h("select", { id: "s-split", name: "split" },
        h("option", { value: "key" }, "key"), h("option", { value: "model" }, "model"))),
      h("div", {}, h("label", { for: "s-measure" }, "Chart"), h("select", { id: "s-measure", name: "measure" },
        h("option", { value: "cost" }, "cost"), h("option", { value: "tokens" }, "tokens"))),
      h("div", {}, h("label", { for: "s-key" }, "Key id (empty: every key)"), h("input", { id: "s-key", name: "key_id", autocomplete: "off", spellcheck: "false" }))),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Show")));
  const error = h("p", { class: "error", role: "alert" });
  const out = h("div", { id: "spend-out" });
  let rows = [];
  const download = h("a", { class: "button secondary", id: "spend-csv", download: "foundry-spend.csv", href: "#" }, "Export CSV");
  download.addEventListener("click", (event) => {
    if (!rows.length) {
      event.preventDefault();
      return;
    }
    if (download.href.startsWith("blob:")) URL.revokeObjectURL(download.href);
    download.href = URL.createObjectURL(new Blob([csv(rows)], { type: "text/csv" }));
  });

  let latest = 0;

  async function load() {
    const seq = ++latest;  // an answer to an older query never overwrites a newer one
    const data = Object.fromEntries(new FormData(form));
    const end = new Date(`${data.until}T00:00:00Z`).getTime() + DAY;
    try {
      const result = await api("/v1/usage/series", { params: {
        since: new Date(`${data.since}T00:00:00Z`).toISOString(), until: new Date(end).toISOString(),
        bucket: data.bucket, key_id: data.key_id.trim() } });
      if (seq !== latest) return;
      rows = result.data;
      error.textContent = "";
      const total = rows.reduce((a, r) => a + r.cost_usd, 0);
      out.replaceChildren(
        h("p", { id: "spend-total" }, `${num(rows.reduce((a, r) => a + r.requests, 0))} runs, ${usd(total)} in the period.`),
        rows.length ? chart(rows, data.split, data.measure) : h("p", { class: "muted" }, "No runs in this period."),
        table(["Period", "Key", "Model", "Runs", "Errors", "Input", "Output", "Cache read", "Cache write", "Reasoning", "Total", "Cost"],
          rows.map((r) => [r.period, r.key_id ? h("span", { class: "mono" }, r.key_id) : "admin/open", text(r.model),
            num(r.requests), num(r.errors), ...TOKENS.map((t) => num(r.tokens[t])), usd(r.cost_usd)]),
          { caption: "Spend per period, key and model", numeric: [3, 4, 5, 6, 7, 8, 9, 10, 11] }),
        h("div", { class: "actions" }, download));
      Object.assign(out.dataset, { keyId: result.key_id || "", bucket: result.bucket, split: data.split });
    } catch (failure) {
      error.textContent = failure.message;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
  container.append(h("section", { class: "panel", "aria-labelledby": "spend-title" },
    h("h2", { id: "spend-title" }, "Spend"), form, error, out));
  await load();
}
