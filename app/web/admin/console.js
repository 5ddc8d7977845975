// The console: sign-in with the admin key, then one page per hash route (#/keys, #/runs,
// #/runs/<id>, #/spend, #/health). Each page module draws into #page and may return a cleanup
// (a live stream to close) run when the route changes.

import { ApiError, api, session } from "./api.js";
import { announce, h } from "./dom.js";
import * as health from "./health.js";
import * as keys from "./keys.js";
import * as run from "./run.js";
import * as runs from "./runs.js";
import * as spend from "./spend.js";

const $ = (id) => document.getElementById(id);
let cleanup = null;

function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  if (page === "runs" && rest.length) return { page: "runs", view: run, params: { id: decodeURIComponent(rest.join("/")) } };
  const views = { keys, runs, spend, health };
  return views[page] ? { page, view: views[page], params: {} } : { page: "keys", view: keys, params: {} };
}

async function show() {
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const container = $("page");
  container.replaceChildren();
  if (!session.key) {
    signedOut();
    return;
  }
  $("signin-panel").hidden = true;
  $("nav").hidden = false;
  const { page, view, params } = route();
  for (const link of document.querySelectorAll("#nav a[data-page]")) {
    if (link.dataset.page === page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  container.dataset.page = page;
  container.dataset.loaded = "false";
  try {
    cleanup = (await view.render(container, params)) || null;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      session.clear();
      signedOut("The admin key was refused (HTTP 401): sign in again.");
      return;
    }
    container.append(h("p", { class: "error", role: "alert" }, error.message));
  }
  container.dataset.loaded = "true";
}

function signedOut(message = "") {
  $("nav").hidden = true;
  $("signin-panel").hidden = false;
  $("signin-error").textContent = message;
  $("page").replaceChildren();
  $("admin-key").focus();
}

async function signIn(event) {
  event.preventDefault();
  const key = $("admin-key").value.trim();
  const error = $("signin-error");
  if (!key) {
    error.textContent = "Enter the admin key.";
    return;
  }
  $("signin-button").disabled = true;
  try {
    await api("/v1/admin/keys", { key });  // only the admin key may list keys
    session.set(key);
    $("admin-key").value = "";
    error.textContent = "";
    announce("Signed in.");
    if (!location.hash) location.hash = "#/keys";
    await show();
    $("view").focus();
  } catch (failure) {
    error.textContent = refusal(failure);
  } finally {
    $("signin-button").disabled = false;
  }
}

function refusal(failure) {
  if (!(failure instanceof ApiError)) return String(failure.message || failure);
  if (failure.code === "admin_only") return "This is a gateway key, not the admin key: the console is for the admin key only.";
  if (failure.code === "admin_disabled") return "This gateway has no FOUNDRY_ADMIN_KEY: set one to use the console.";
  if (failure.status === 401) return "The gateway refused this key (HTTP 401).";
  return failure.message;
}

function main() {
  $("signin").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => {
    session.clear();
    announce("Signed out.");
    show();
  });
  window.addEventListener("hashchange", () => show());
  show().finally(() => {
    document.documentElement.dataset.ready = "true";
  });
}

main();
