// Runs: the runs running now on this replica (GET /v1/admin/health; a run is recorded when it
// ends), then the run records, newest first, filtered and paged by the gateway (GET /v1/runs with
// a cursor): a page holds at most `limit` rows whatever the number of runs.

import { api } from "./api.js";
import { badge, h, ms, num, table, text, usd, when } from "./dom.js";

const STATUSES = ["", "ok", "blocked", "error", "cancelled"];

function utc(local) {
  return local ? new Date(local).toISOString() : "";
}

export async function render(container) {
  const form = h("form", { id: "runs-filter", "aria-label": "Filter runs" });
  const input = (name, label, attrs = {}) => h("div", {}, h("label", { for: `f-${name}` }, label),
    h("input", { id: `f-${name}`, name, autocomplete: "off", spellcheck: "false", ...attrs }));
  const keySelect = h("select", { id: "f-key_id", name: "key_id" }, h("option", { value: "" }, "every key"));
  form.append(
    h("div", { class: "form-grid" },
      h("div", {}, h("label", { for: "f-key_id" }, "Key"), keySelect),
      input("model", "Model"),
      input("provider", "Provider"),
      h("div", {}, h("label", { for: "f-status" }, "Status"),
        h("select", { id: "f-status", name: "status" }, STATUSES.map((s) => h("option", { value: s }, s || "any")))),
      input("since", "Since (local time)", { type: "datetime-local" }),
      input("until", "Until (local time)", { type: "datetime-local" }),
      h("div", {}, h("label", { for: "f-limit" }, "Per page"),
        h("select", { id: "f-limit", name: "limit" }, ["50", "100", "200"].map((n) => h("option", { value: n }, n))))),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply"),
      h("button", { type: "reset", class: "secondary" }, "Clear")));

  const error = h("p", { class: "error", role: "alert", id: "runs-error" });
  const list = h("div", { id: "runs-table" });
  const pageInfo = h("span", { id: "runs-page", "aria-live": "polite" });
  const prev = h("button", { type: "button", class: "secondary", id: "runs-prev", disabled: true }, "Previous page");
  const next = h("button", { type: "button", class: "secondary", id: "runs-next", disabled: true }, "Next page");
  let cursors = [null];  // the cursor of each page seen so far (page 1 has none)
  let filters = {};

  async function load() {
    const page = cursors.length;
    try {
      const result = await api("/v1/runs", { params: { ...filters, cursor: cursors[page - 1] } });
      error.textContent = "";
      list.replaceChildren(table(
        ["Created", "Run", "Key", "Model", "Provider", "Status", "Cost", "Duration", "First token", "Tokens in/out"],
        result.data.map((run) => [
          when(run.created_at),
          h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, run.id),
          run.owner ? h("span", { class: "mono" }, run.owner) : h("span", { class: "muted" }, "admin/open"),
          text(run.model), text(run.provider), badge(run.status), usd(run.usage.cost_usd), ms(run.duration_ms),
          ms(run.ttft_ms), `${num(run.usage.input_tokens)} / ${num(run.usage.output_tokens)}`,
        ]), { caption: "Runs, newest first", numeric: [6, 7, 8, 9] }));
      list.dataset.rows = String(result.data.length);
      pageInfo.textContent = `Page ${page}: ${result.data.length} runs${result.next_cursor ? "" : " (last page)"}`;
      prev.disabled = page === 1;
      next.disabled = !result.next_cursor;
      next.onclick = () => {
        cursors.push(result.next_cursor);
        load();
      };
    } catch (failure) {
      error.textContent = failure.message;
    }
    list.dataset.page = String(page);
  }

  prev.addEventListener("click", () => {
    if (cursors.length > 1) cursors.pop();
    load();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    filters = { ...data, since: utc(data.since), until: utc(data.until) };
    cursors = [null];
    load();
  });
  form.addEventListener("reset", () => {
    filters = {};
    cursors = [null];
    setTimeout(load);  // after the form cleared its fields
  });

  const running = h("section", { class: "panel", id: "running", "aria-labelledby": "running-title", hidden: true });
  container.append(
    running,
    h("section", { class: "panel", "aria-labelledby": "runs-title" },
      h("h2", { id: "runs-title" }, "Runs"), form),
    h("section", { class: "panel", "aria-label": "Run list" }, error, list,
      h("div", { class: "actions" }, prev, next, pageInfo)));
  try {
    const { active_runs: active } = await api("/v1/admin/health");
    if (active.length) {
      running.hidden = false;
      running.append(h("h2", { id: "running-title" }, "Running now"), table(["Run", "Model", "Key", "Started"],
        active.map((r) => [h("a", { href: `#/runs/${encodeURIComponent(r.stream_id)}` }, r.stream_id), text(r.model),
          r.key_id ? h("span", { class: "mono" }, r.key_id) : "admin/open", when(r.created_at)]),
        { caption: "Runs running now on this replica" }));
    }
  } catch {
    // the records below still show
  }
  try {
    const { data } = await api("/v1/admin/keys");
    for (const key of data) keySelect.append(h("option", { value: key.id }, `${key.name} (${key.id})`));
  } catch {
    // the list still works without the key names
  }
  await load();
}
