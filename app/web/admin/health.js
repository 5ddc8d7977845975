// Health: GET /v1/admin/health: readiness (as /readyz), every provider served or not and why,
// the circuit breakers, and the runs this replica is running now (each can be followed live).

import { api } from "./api.js";
import { badge, h, table, text, when } from "./dom.js";

export async function render(container) {
  const health = await api("/v1/admin/health");
  const ready = health.readiness;
  const refresh = h("button", { type: "button", class: "secondary", id: "health-refresh" }, "Refresh");
  refresh.addEventListener("click", () => {
    container.replaceChildren();
    render(container);
  });
  const circuits = Object.entries(health.circuits || {});
  container.append(
    h("section", { class: "panel", "aria-labelledby": "health-title" },
      h("h2", { id: "health-title" }, "Health ", badge(ready.status)),
      ready.reason ? h("p", { class: "error" }, ready.reason) : null,
      h("dl", { class: "facts" },
        [["Stream store", `${ready.store_backend}: ${ready.store ? "reachable" : "unreachable"}`],
          ["Records", ready.records], ["Keys", `${ready.auth} (${ready.keys})`], ["Limits", ready.limits],
          ["Active runs", `${health.active_runs.length} of at most ${health.max_active_runs}`]]
          .map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)])),
      h("div", { class: "actions" }, refresh)),
    h("section", { class: "panel", "aria-labelledby": "providers-title" },
      h("h2", { id: "providers-title" }, "Providers"),
      table(["Provider", "Served", "Why"], health.providers.map((p) =>
        [text(p.name), badge(p.served ? "served" : "unserved", p.served ? "served" : "not served"), text(p.why)]),
      { caption: "Providers" })),
    h("section", { class: "panel", "aria-labelledby": "circuits-title" },
      h("h2", { id: "circuits-title" }, "Circuit breakers"),
      circuits.length ? table(["Target", "State"], circuits.map(([target, state]) => [text(target), badge(state)]),
        { caption: "Circuit breakers" }) : h("p", { class: "muted" }, "No upstream called yet.")),
    h("section", { class: "panel", "aria-labelledby": "active-title" },
      h("h2", { id: "active-title" }, "Active runs on this replica"),
      health.active_runs.length ? table(["Run", "Model", "Provider", "Key", "Started"], health.active_runs.map((r) =>
        [h("a", { href: `#/runs/${encodeURIComponent(r.stream_id)}` }, r.stream_id), text(r.model), text(r.provider),
          r.key_id ? h("span", { class: "mono" }, r.key_id) : "admin/open", when(r.created_at)]),
      { caption: "Active runs" }) : h("p", { class: "muted", id: "no-active" }, "None right now.")));
}
