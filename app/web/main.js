// The playground: builds the request from the form, starts a background run
// (POST /v1/generate {"stream": true} -> 202 {stream_id}), follows it (stream.js), folds the
// events into the run state (state.js) and draws it (view.js). The run is saved to
// sessionStorage as it goes, so a reload redraws it and resumes after the last event seen.

import * as state from "./state.js";
import { describeFailure, subscribe } from "./stream.js";
import { createView } from "./view.js";

const $ = (id) => document.getElementById(id);
const FALLBACK_MODELS = ["mock/tool_call", "mock/simple", "mock/echo", "mock/lorem-50", "mock/lorem-500"];
const VALIDATORS = {
  regex_deny: { patterns: ["(?i)password"] },
  banned_words: { words: ["forbidden"] },
  pii: { action: "redact" },
  max_length: { max: 200, unit: "chars" },
  json_schema: { schema: { type: "object" } },
  llm_judge: { model: "mock/simple", policy: "No insults." },
};
const EXAMPLE_TOOLS = [{
  name: "get_weather",
  description: "Current weather for a city (answered by you, the caller)",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const SAVE_EVERY_MS = 200;

const view = createView();
let run = null;
let subscription = null;
let conversation = state.loadConversation();
let saveTimer = null;

function setStatus(text) {
  $("status").textContent = text;
}

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// -- conversation history -----------------------------------------------------------------

function drawHistory() {
  const list = $("history");
  list.replaceChildren();
  for (const message of conversation) {
    const item = document.createElement("li");
    item.className = `msg msg-${message.role}`;
    const role = document.createElement("span");
    role.className = "role";
    role.textContent = message.role + (message.tool_calls?.length ? ` (calls ${message.tool_calls.map((c) => c.name).join(", ")})` : "");
    item.append(role, ...contentNodes(message.content));
    list.append(item);
  }
  $("history-empty").hidden = conversation.length > 0;
}

// A message's content as nodes: its text (parts joined by a blank line, as the gateway joins
// them), then each image part (data drawn as an <img>, a URL named as text and never loaded).
function contentNodes(value) {
  const parts = Array.isArray(value) ? value : [{ type: "text", text: value || "" }];
  const text = document.createElement("span");
  text.className = "content";
  text.textContent = parts.filter((p) => p.type === "text").map((p) => p.text).join("\n\n");
  const nodes = [text];
  for (const part of parts) {
    if (part.type === "image" && part.data && IMAGE_TYPES.includes(part.media_type)) {
      const img = document.createElement("img");
      img.className = "part-image";
      img.alt = `attached image (${part.media_type})`;
      img.src = `data:${part.media_type};base64,${part.data}`;
      nodes.push(img);
    } else if (part.type !== "text") {
      const note = document.createElement("span");
      note.className = "part-note";
      note.textContent = `[${part.type}${part.url ? `: ${part.url}` : part.media_type ? ` (${part.media_type})` : ""}]`;
      nodes.push(note);
    }
  }
  return nodes;
}

// The image attached to the next message, read when chosen: {media_type, data} or null.
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
let attachment = null;
let attaching = Promise.resolve();  // settles when the chosen file has been read (send waits on it)

function attach() {
  const file = $("image").files[0];
  attachment = null;
  if (!file) return;
  if (!IMAGE_TYPES.includes(file.type)) {
    $("image").value = "";
    showFormError(`Attach a png, jpeg, gif or webp image (not ${file.type || "this file"})`, "image");
    return;
  }
  const reader = new FileReader();
  attaching = new Promise((resolve) => {
    reader.onload = () => {
      attachment = { media_type: file.type, data: String(reader.result).split(",", 2)[1] };
      resolve();
    };
    reader.onerror = () => resolve();
  });
  reader.readAsDataURL(file);
}

// A message as a request takes it back: only the fields it has (null is not "absent").
function asMessage(m) {
  const out = { role: m.role, content: m.content ?? "" };
  if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
  if (m.reasoning?.length) out.reasoning = m.reasoning;
  if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
  if (m.name) out.name = m.name;
  return out;
}

function remember(messages) {
  conversation.push(...messages);
  state.saveConversation(conversation);
  drawHistory();
}

// -- validators ----------------------------------------------------------------------------

function drawValidators() {
  const box = $("validators");
  for (const [name, config] of Object.entries(VALIDATORS)) {
    const wrap = document.createElement("div");
    wrap.className = "validator";
    const check = Object.assign(document.createElement("input"), { type: "checkbox", id: `v-${name}` });
    check.dataset.validator = name;
    const label = Object.assign(document.createElement("label"), { htmlFor: check.id, textContent: name });
    const configLabel = Object.assign(document.createElement("label"), {
      htmlFor: `v-${name}-config`, textContent: `${name} config (JSON)`, className: "sr-only",
    });
    const area = Object.assign(document.createElement("textarea"), {
      id: `v-${name}-config`, rows: 1, spellcheck: false, value: JSON.stringify(config),
    });
    area.disabled = true;
    check.addEventListener("change", () => { area.disabled = !check.checked; });
    wrap.append(check, label, configLabel, area);
    box.append(wrap);
  }
}

// -- the request ---------------------------------------------------------------------------

class FormError extends Error {
  constructor(message, field) {
    super(message);
    this.field = field;
  }
}

function parseJSON(id, what, check) {
  const text = $(id).value.trim();
  if (!text) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new FormError(`${what} is not valid JSON: ${error.message}`, id);
  }
  if (!check(value)) throw new FormError(`${what} has the wrong shape`, id);
  return value;
}

function buildRequest() {
  const model = $("model").value.trim();
  if (!model) throw new FormError("Choose a model", "model");
  const prompt = $("prompt").value;
  if (!prompt.trim()) throw new FormError("Write a message", "prompt");
  const user = { role: "user", content: attachment
    ? [{ type: "text", text: prompt }, { type: "image", media_type: attachment.media_type, data: attachment.data }]
    : prompt };
  const messages = [];
  if ($("system").value.trim()) messages.push({ role: "system", content: $("system").value });
  messages.push(...conversation, user);
  const body = { model, messages, stream: true };
  const tools = parseJSON("tools", "Tools", Array.isArray);
  if (tools) body.tools = tools;
  const validators = [];
  for (const check of document.querySelectorAll("#validators input[type=checkbox]")) {
    if (!check.checked) continue;
    const name = check.dataset.validator;
    const config = parseJSON(`v-${name}-config`, `The ${name} config`, (v) => v && typeof v === "object" && !Array.isArray(v));
    validators.push({ name, config: config ?? {} });
  }
  if (validators.length) body.validators = validators;
  if ($("chunking").value) body.chunking = $("chunking").value;
  if ($("max-steps").value) body.max_steps = Number($("max-steps").value);
  const options = parseJSON("provider-options", "provider_options", (v) => v && typeof v === "object" && !Array.isArray(v)) ?? {};
  if ($("delay-ms").value) options.delay_ms = Number($("delay-ms").value);
  if (Object.keys(options).length) body.provider_options = options;
  return { body, user };
}

function showFormError(message, field) {
  $("form-error").textContent = message;
  for (const node of document.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  const target = field && $(field);
  if (target) {
    target.setAttribute("aria-invalid", "true");
    target.focus();
  }
}

// The form control behind a field the gateway refused (`validators.1.config.patterns.0`, ...).
function controlFor(field, body) {
  if (!field) return null;
  const [head, index] = field.split(".");
  if (head === "validators" && body.validators?.[Number(index)]) return `v-${body.validators[Number(index)].name}-config`;
  if (head === "provider_options" && field.startsWith("provider_options.delay_ms")) return "delay-ms";
  if (/^messages\.\d+\.content\.\d+/.test(field) && !field.endsWith(".text")) return "image";
  const controls = { model: "model", messages: "prompt", tools: "tools", tool_choice: "tools", chunking: "chunking",
                     max_steps: "max-steps", provider_options: "provider-options" };
  return controls[head] ?? null;
}

async function send(event) {
  event.preventDefault();
  if (run && !run.done && !run.stopped) return;
  showFormError("");
  await attaching;
  let request;
  try {
    request = buildRequest();
  } catch (error) {
    if (error instanceof FormError) return showFormError(error.message, error.field);
    throw error;
  }
  $("send").disabled = true;
  setStatus("Starting…");
  const sentAt = Date.now();
  let response;
  try {
    response = await fetch("/v1/generate", {
      method: "POST",
      headers: { "content-type": "application/json", ...authHeaders() },
      body: JSON.stringify(request.body),
    });
  } catch {
    $("send").disabled = false;
    setStatus("Idle.");
    return showFormError("The gateway cannot be reached.");
  }
  if (response.status !== 202) {
    $("send").disabled = false;
    setStatus("Idle.");
    let field = null;
    try {
      field = (await response.clone().json()).error?.field;
    } catch { /* not JSON */ }
    const detail = await describeFailure(response);
    return showFormError(`Refused: ${detail}` + (field ? ` [field: ${field}]` : ""), controlFor(field, request.body));
  }
  const accepted = await response.json();
  remember([request.user]);
  $("prompt").value = "";
  $("image").value = "";
  attachment = null;
  run = state.newRun(accepted.stream_id, request.body.model, sentAt);
  state.saveRun(run);  // a reload before the first event still finds the run
  view.reset();
  view.render(run);
  follow();
}

// -- following the run ----------------------------------------------------------------------

function persistSoon() {
  if (saveTimer !== null) return;
  saveTimer = setTimeout(() => {
    saveTimer = null;
    if (run) state.saveRun(run);
  }, SAVE_EVERY_MS);
}

function streaming(on) {
  $("turn").setAttribute("aria-busy", String(on));
  $("send").disabled = on;
  $("stop").disabled = !on;
}

function follow() {
  streaming(true);
  $("load-transcript").disabled = false;
  setStatus(run.lastId ? `Resuming after event ${run.lastId}…` : "Streaming…");
  subscription = subscribe(run.streamId, {
    afterId: run.lastId,
    apiKey: $("api-key").value.trim(),
    onEvent(id, type, data, raw) {
      if (!state.apply(run, id, type, data, raw, Date.now())) return;
      view.render(run);
      if (type === "final") finish();
      else persistSoon();
    },
    onState(what, detail) {
      if (!run || run.done) return;
      if (what === "open") setStatus(`Streaming (${subscription?.kind ?? "EventSource"})…`);
      else if (what === "reconnecting") setStatus(`Connection lost; reconnecting after event ${run.lastId}…`);
      else if (what === "failed") {
        end(`Stream lost: ${detail}`);
      }
    },
  });
}

function end(note) {
  if (subscription) subscription.close();
  subscription = null;
  run.note = note;
  run.stopped = true;
  state.saveRun(run);
  setStatus(note);
  streaming(false);
}

function finish() {
  subscription.close();
  subscription = null;
  const final = run.final;
  if (final.status === "ok") {
    const answer = final.message.content || final.message.tool_calls?.length ? [final.message] : [];
    remember([...(final.messages || []), ...answer].map(asMessage));
  }
  state.saveRun(run);
  const labels = { ok: "Done.", blocked: "Blocked.", error: "Ended with an error.", cancelled: "Cancelled." };
  setStatus(`${labels[final.status] ?? final.status} Final received (event ${run.lastId}).`);
  streaming(false);
  loadTranscript();
}

async function stop() {
  if (!run || run.done) return;
  $("stop").disabled = true;
  let response = null;
  try {
    response = await fetch(`/v1/stream/${encodeURIComponent(run.streamId)}/cancel`, {
      method: "POST", headers: authHeaders(),
    });
  } catch { /* unreachable: treated as no cancel endpoint */ }
  if (response && response.ok) {
    setStatus("Cancel requested; waiting for the final…");  // the run ends with final{cancelled}
    return;
  }
  const why = response ? `HTTP ${response.status}` : "no answer";
  end(`Stopped watching. The gateway did not cancel the run (${why} from its cancel endpoint), ` +
      "so it may go on on the server; its transcript stays available.");
}

async function loadTranscript() {
  if (!run) return;
  const target = $("transcript");
  try {
    const response = await fetch(`/v1/stream/${encodeURIComponent(run.streamId)}/transcript`, {
      headers: authHeaders(), cache: "no-store",
    });
    target.textContent = response.ok ? JSON.stringify(await response.json(), null, 2) : await describeFailure(response);
  } catch {
    target.textContent = "The gateway cannot be reached.";
  }
}

// -- models ----------------------------------------------------------------------------------

async function loadModels() {
  const models = new Set(FALLBACK_MODELS);
  let providers = null;
  try {
    const ready = await (await fetch("/readyz", { cache: "no-store" })).json();
    providers = Object.entries(ready.providers || {}).filter(([, on]) => on).map(([name]) => name);
  } catch { /* shown below */ }
  try {  // an OpenAI-shaped model list, when this gateway has one
    const response = await fetch("/v1/models", { headers: authHeaders(), cache: "no-store" });
    if (response.ok) for (const item of (await response.json()).data || []) if (item.id) models.add(item.id);
  } catch { /* optional */ }
  const list = $("models");
  list.replaceChildren(...[...models].map((id) => Object.assign(document.createElement("option"), { value: id })));
  $("providers").textContent = providers
    ? `Served providers: ${providers.join(", ") || "none"}.`
    : "Could not read the served providers (/readyz).";
}

// -- start -----------------------------------------------------------------------------------

function restore() {
  const saved = state.loadRun();
  if (!saved || !saved.streamId) return;
  run = saved;
  view.render(run);
  $("load-transcript").disabled = false;
  if (run.done) {
    setStatus(`Restored: final received (event ${run.lastId}).`);
  } else if (run.stopped) {
    setStatus(run.note || "Stopped.");
  } else {
    follow();
  }
}

drawValidators();
drawHistory();
restore();
loadModels();
$("run-form").addEventListener("submit", send);
$("image").addEventListener("change", attach);
$("stop").addEventListener("click", stop);
$("load-transcript").addEventListener("click", loadTranscript);
$("clear-history").addEventListener("click", () => {
  conversation = [];
  state.saveConversation(conversation);
  drawHistory();
});
$("tools-example").addEventListener("click", () => {
  $("tools").value = JSON.stringify(EXAMPLE_TOOLS, null, 2);
  $("tools").focus();
});
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    $("run-form").requestSubmit();
  }
});
window.addEventListener("pagehide", () => {
  if (run) state.saveRun(run);
});
document.documentElement.dataset.ready = "true";
