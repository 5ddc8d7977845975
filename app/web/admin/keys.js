// Keys: every key with its policy and state; create (the secret shown once, with a copy button),
// edit limits, rotate (a new secret, the old one accepted for an overlap window), revoke.

import { api } from "./api.js";
import { announce, badge, h, table, text, usd, when } from "./dom.js";

const LIMITS = [
  ["rpm", "Requests per minute"],
  ["tpm", "Tokens per minute"],
  ["max_concurrent", "Runs at once"],
  ["budget_usd", "Budget, USD per month"],
];

export function keyState(key, now = Date.now()) {
  if (key.revoked_at) return "revoked";
  if (key.expires_at && new Date(key.expires_at).getTime() <= now) return "expired";
  if (key.previous_expires_at) return "rotating";
  return "active";
}

function stateLabel(key) {
  const state = keyState(key);
  if (state === "rotating") return badge(state, `active, old secret until ${when(key.previous_expires_at)}`);
  return badge(state);
}

function policy(key) {
  const limits = LIMITS.filter(([name]) => key[name] !== null && key[name] !== undefined)
    .map(([name]) => `${name} ${name === "budget_usd" ? usd(key[name]) : key[name]}`);
  return h("div", {},
    h("div", {}, "models: ", text(key.models ? key.models.join(", ") : "every model")),
    h("div", {}, limits.length ? limits.join(" · ") : "no limits"),
    key.validators && key.validators.length ? h("div", {}, "validators: ", text(key.validators.map((v) => v.name).join(", "))) : null);
}

function secretPanel(title, created) {
  const code = h("code", { id: "new-secret", tabindex: "0" }, created.key);
  const copied = h("span", { role: "status", class: "muted" });
  const copy = h("button", { type: "button", id: "copy-secret" }, "Copy");
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(created.key);
      copied.textContent = "Copied.";
    } catch {
      const range = document.createRange();  // no clipboard permission: select it for Ctrl+C
      range.selectNodeContents(code);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      copied.textContent = "Selected: press Ctrl+C (⌘+C) to copy.";
    }
  });
  const done = h("button", { type: "button", class: "secondary" }, "I stored it");
  const panel = h("section", { class: "secret", "aria-labelledby": "secret-title" },
    h("h3", { id: "secret-title" }, title),
    h("p", {}, "This is the only time the gateway shows this secret (it keeps a hash). Store it now."),
    h("p", {}, "Key id ", h("span", { class: "mono" }, created.id), created.previous_expires_at
      ? ` · the previous secret works until ${when(created.previous_expires_at)}` : ""),
    code, h("div", { class: "actions" }, copy, done, copied));
  done.addEventListener("click", () => panel.remove());
  return panel;
}

function numberOrNull(value) {
  return value.trim() === "" ? null : Number(value);
}

function isoOrNull(value) {
  return value ? new Date(value).toISOString() : null;
}

function localInput(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 16);
}

function fields(prefix, key = {}) {
  const input = (name, label, attrs = {}) => h("div", {},
    h("label", { for: `${prefix}-${name}` }, label),
    h("input", { id: `${prefix}-${name}`, name, ...attrs }));
  return [
    input("models", "Models (comma-separated patterns; empty: every model)",
      { value: key.models ? key.models.join(", ") : "", spellcheck: "false", autocomplete: "off" }),
    ...LIMITS.map(([name, label]) => input(name, label, {
      type: "number", min: name === "budget_usd" ? "0" : "1", step: name === "budget_usd" ? "any" : "1",
      value: key[name] ?? "", inputmode: "decimal",
    })),
    input("expires_at", "Expires at (local time; empty: never)", { type: "datetime-local", value: localInput(key.expires_at) }),
  ];
}

function readFields(form) {
  const value = (name) => form.elements[name].value;
  const models = value("models").split(",").map((m) => m.trim()).filter(Boolean);
  const body = { models: models.length ? models : null, expires_at: isoOrNull(value("expires_at")) };
  for (const [name] of LIMITS) body[name] = numberOrNull(value(name));
  return body;
}

export async function render(container) {
  const list = h("div", { id: "keys-table" });
  const notice = h("div", { id: "keys-notice" });
  const error = h("p", { class: "error", role: "alert", id: "keys-error" });

  async function reload() {
    const { data } = await api("/v1/admin/keys");
    list.replaceChildren(table(
      ["Id", "Name", "State", "Policy", "Expires", "Created", "Source", "Actions"],
      data.map((key) => row(key)), { caption: "Keys" }));
  }

  function fail(failure) {
    error.textContent = failure.message;
  }

  function row(key) {
    const actions = h("div", { class: "actions" });
    const state = keyState(key);
    if (key.source === "database" && state !== "revoked") {
      actions.append(
        h("button", { type: "button", class: "secondary", "data-action": "edit", "aria-label": `Edit limits of ${key.name}`,
          onclick: () => edit(key) }, "Edit limits"),
        h("button", { type: "button", class: "secondary", "data-action": "rotate", "aria-label": `Rotate ${key.name}`,
          onclick: () => rotate(key) }, "Rotate"),
        revokeButton(key));
    } else if (key.source === "config") {
      actions.append(h("span", { class: "muted" }, "in configuration"));
    }
    return [h("span", { class: "mono" }, key.id), text(key.name), stateLabel(key), policy(key), when(key.expires_at),
      when(key.created_at), key.source, actions];
  }

  function revokeButton(key) {
    const button = h("button", { type: "button", class: "danger", "data-action": "revoke", "aria-label": `Revoke ${key.name}` }, "Revoke");
    button.addEventListener("click", async () => {
      if (button.dataset.confirm !== "yes") {  // a second click confirms: no blocking dialog
        button.dataset.confirm = "yes";
        button.textContent = "Confirm revoke";
        button.setAttribute("aria-label", `Confirm: revoke ${key.name}`);
        return;
      }
      try {
        await api(`/v1/admin/keys/${encodeURIComponent(key.id)}`, { method: "DELETE" });
        announce(`Key ${key.id} revoked.`);
        await reload();
      } catch (failure) {
        fail(failure);
      }
    });
    return button;
  }

  function edit(key) {
    const form = h("form", { class: "panel", id: "edit-form", "aria-labelledby": "edit-title" },
      h("h3", { id: "edit-title" }, `Edit limits of ${key.name} (${key.id})`),
      h("div", { class: "form-grid" }, fields("edit", key)),
      h("div", { class: "actions" }, h("button", { type: "submit" }, "Save"),
        h("button", { type: "button", class: "secondary", onclick: () => form.remove() }, "Cancel")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api(`/v1/admin/keys/${encodeURIComponent(key.id)}`, { method: "PATCH", body: readFields(form) });
        form.remove();
        announce(`Key ${key.id} changed.`);
        error.textContent = "";
        await reload();
      } catch (failure) {
        fail(failure);
      }
    });
    notice.replaceChildren(form);
    form.querySelector("input").focus();
  }

  function rotate(key) {
    const form = h("form", { class: "panel", id: "rotate-form", "aria-labelledby": "rotate-title" },
      h("h3", { id: "rotate-title" }, `Rotate ${key.name} (${key.id})`),
      h("p", {}, "A new secret is issued; the current one keeps working for the overlap, so clients can move over."),
      h("label", { for: "rotate-overlap" }, "Overlap, seconds (0: the current secret is refused at once)"),
      h("input", { id: "rotate-overlap", type: "number", min: "0", max: "2592000", value: "3600", inputmode: "numeric" }),
      h("div", { class: "actions" }, h("button", { type: "submit" }, "Rotate now"),
        h("button", { type: "button", class: "secondary", onclick: () => form.remove() }, "Cancel")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const overlap = Number(form.querySelector("#rotate-overlap").value || "0");
        const rotated = await api(`/v1/admin/keys/${encodeURIComponent(key.id)}/rotate`,
          { method: "POST", body: { overlap_seconds: overlap } });
        notice.replaceChildren(secretPanel(`New secret for ${rotated.name}`, rotated));
        error.textContent = "";
        announce(`Key ${key.id} rotated: copy the new secret.`);
        await reload();
        document.getElementById("copy-secret").focus();
      } catch (failure) {
        fail(failure);
      }
    });
    notice.replaceChildren(form);
    form.querySelector("input").focus();
  }

  const create = h("form", { id: "create-form", "aria-labelledby": "create-title" },
    h("div", { class: "form-grid" },
      h("div", {}, h("label", { for: "create-name" }, "Name"),
        h("input", { id: "create-name", name: "name", required: true, autocomplete: "off", spellcheck: "false" })),
      fields("create")),
    h("div", { class: "actions" }, h("button", { type: "submit", id: "create-button" }, "Create key")));
  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { name: create.elements.name.value.trim(), ...readFields(create) };
    for (const name of Object.keys(body)) if (body[name] === null) delete body[name];
    try {
      const created = await api("/v1/admin/keys", { method: "POST", body });
      create.reset();
      error.textContent = "";
      notice.replaceChildren(secretPanel(`Key ${created.name} created`, created));
      announce(`Key ${created.id} created: copy its secret.`);
      await reload();
      document.getElementById("copy-secret").focus();
    } catch (failure) {
      fail(failure);
    }
  });

  container.append(
    h("section", { class: "panel", "aria-labelledby": "keys-title" },
      h("h2", { id: "keys-title" }, "Keys"), error, notice, list),
    h("section", { class: "panel", "aria-labelledby": "create-title" },
      h("h2", { id: "create-title" }, "Create a key"), create));
  await reload();
}
