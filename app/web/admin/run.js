// One run redisplayed from its record (GET /v1/runs/{id}) and transcript
// (GET /v1/stream/{id}/transcript): the request, then each turn in order (reasoning collapsed,
// tool calls with their arguments and results, the answer), the validators' decisions, the
// upstream attempts with their timings, usage and cost. A run still running is followed live
// from its stream log (GET /v1/stream/{id}, resumed after the last event on reconnect) and
// redrawn from its transcript when its final arrives.

import { subscribe } from "/web/stream.js";
import { ApiError, api, session } from "./api.js";
import { announce, badge, h, json, longText, ms, num, table, text, usd, when } from "./dom.js";

const TOKENS = [["input_tokens", "Input"], ["output_tokens", "Output"], ["cache_read_tokens", "Cache read"],
  ["cache_write_tokens", "Cache write"], ["reasoning_tokens", "Reasoning"], ["total_tokens", "Total"]];

async function orNull(promise) {
  try {
    return await promise;
  } catch (failure) {
    if (failure instanceof ApiError && failure.status === 404) return null;
    throw failure;
  }
}

function section(id, title, ...children) {
  return h("section", { class: "panel", id, "aria-labelledby": `${id}-title` }, h("h3", { id: `${id}-title` }, title), children);
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

function summary(id, record, transcript, final) {
  const status = record?.status || final?.status || transcript?.status || "unknown";
  return section("run-summary", "Summary", facts([
    ["Status", badge(status)],
    ["Model", text(record?.model || transcript?.model)],
    ["Served model", record?.served_model ? text(record.served_model) : null],
    ["Provider", text(record?.provider || transcript?.provider)],
    ["Key", record ? (record.owner ? h("span", { class: "mono" }, record.owner) : "admin key or open mode") : null],
    ["Created", record ? when(record.created_at) : null],
    ["Duration", record ? ms(record.duration_ms) : null],
    ["Time to first token", record ? ms(record.ttft_ms) : null],
    ["Steps", String(record?.steps ?? transcript?.steps ?? "")],
    ["Tools run by the gateway", record ? String(record.tools_run) : null],
    ["Stop reason", record?.stop_reason || transcript?.stop_reason],
    ["Error", record?.error_code || final?.error?.code],
    ["Request id", record?.request_id ? text(record.request_id) : null],
    ["Record", record ? null : "not in the run records (yet): shown from the stream"],
  ]), h("p", { class: "muted" }, "Run ", h("span", { class: "mono" }, id)));
}

function usage(record, transcript, final) {
  const u = record?.usage || final?.usage || transcript?.usage || {};
  const rows = [TOKENS.map(([name]) => num(u[name]))];
  const judge = record?.validation?.judge;
  return section("run-usage", "Usage and cost",
    table(TOKENS.map(([, label]) => label), rows, { caption: "Tokens", numeric: [0, 1, 2, 3, 4, 5] }),
    facts([["Cost", usd(u.cost_usd)], ["Judge calls", judge ? json(judge) : null]]));
}

function validation(data) {
  if (!data) return section("run-validation", "Validators", h("p", { class: "muted" }, "No validator applied."));
  const blocked = data.blocked
    ? h("div", { class: "blocked", id: "blocked" }, h("strong", {}, "Blocked by "), text(data.blocked.validator, "strong"),
      h("div", {}, "Reason: ", text(data.blocked.reason)),
      h("p", {}, "The text of the chunk that failed, and everything after it, was never released."))
    : null;
  const rows = Object.entries(data.validators || {}).map(([name, stats]) =>
    [text(name), num(stats.checks), num(stats.pass), num(stats.fail), num(stats.unknown), num(stats.error),
      ms((stats.seconds || 0) * 1000)]);
  return section("run-validation", "Validators", blocked,
    facts([["Chunking", data.chunking], ["Chunks checked", data.chunks ? `${data.chunks.text} text, ${data.chunks.reasoning} reasoning` : null],
      ["Redactions", String(data.redactions ?? 0)]]),
    table(["Validator", "Checks", "Pass", "Fail", "Unknown", "Error", "Time"], rows,
      { caption: "Verdicts per validator", numeric: [1, 2, 3, 4, 5, 6] }));
}

function attempts(list) {
  if (!list || !list.length) return section("run-attempts", "Upstream attempts", h("p", { class: "muted" }, "None recorded."));
  return section("run-attempts", "Upstream attempts",
    table(["#", "Target", "Outcome", "Duration", "HTTP status", "Code", "Step"], list.map((a, i) =>
      [String(i + 1), text(a.target), badge(a.outcome === "ok" ? "ok" : "error", a.outcome), ms(a.duration_ms),
        a.status ?? "—", a.code ?? "—", a.step ?? 1]), { caption: "Upstream attempts in order", numeric: [0, 3] }));
}

function part(p) {
  if (typeof p === "string") return longText(p, "div");
  if (p.type === "text") return longText(p.text, "div");
  const meta = { ...p };
  delete meta.data;  // media bytes (kept only when the operator asks) are never drawn
  return h("div", {}, h("span", { class: "kind" }, `${p.type} (metadata)`), json(meta));
}

function requestMessages(messages) {
  return messages.map((m) => h("li", { class: "k-request" }, h("div", { class: "kind" }, `request · ${m.role}`),
    m.content === undefined ? null : Array.isArray(m.content) ? m.content.map(part) : longText(m.content, "div"),
    m.tool_calls && m.tool_calls.length ? json(m.tool_calls) : null,
    m.tool_call_id ? h("div", { class: "muted" }, "for call ", text(m.tool_call_id)) : null));
}

// A tool's output as the tool gave it (a string), or as its display processor shaped it.
function shown(value) {
  return typeof value === "string" ? longText(value, "pre") : json(value);
}

function runner(call) {
  if (!call) return "";
  return call.server ? "run by the provider" : call.gateway ? "run by the gateway" : "for the caller";
}

function turn(message, calls) {
  const call = calls.get(message.id);
  const label = (kind) => h("div", { class: "kind" }, `step ${message.step} · ${kind}`);
  switch (message.type) {
    case "thinking":
      return h("li", { class: "k-thinking" }, h("details", { class: "reasoning" },
        h("summary", {}, `Reasoning (${num(String(message.content).length)} characters)`), longText(message.content, "div")));
    case "assistant_text":
      return h("li", { class: "k-assistant_text" }, label("assistant, calling tools"), longText(message.content, "div"));
    case "tool_call":
      return h("li", { class: "k-tool_call" }, label(`tool call · ${runner(call)}`),
        h("div", {}, text(message.content?.name, "strong"), " ", h("span", { class: "mono muted" }, message.id)),
        json(call?.input ?? message.content?.input));
    case "tool_output":
      return h("li", { class: "k-tool_output" }, label(`tool result${message.content?.is_error ? " · error" : ""}`),
        h("div", {}, text(message.content?.name, "strong"), " ← ", h("span", { class: "mono muted" }, message.id)),
        shown(call?.output ?? message.content?.output ?? ""));
    default:
      return h("li", { class: "k-response" }, label("answer"), longText(message.content, "div"));
  }
}

function conversation(transcript) {
  if (!transcript) return section("run-conversation", "Conversation", h("p", { class: "muted" }, "No transcript kept."));
  const calls = new Map((transcript.tool_calls || []).map((c) => [c.id, c]));
  const messages = [...transcript.reasoning_messages, ...transcript.response_messages]
    .map((m, i) => ({ m, i })).sort((a, b) => a.m.timestamp - b.m.timestamp || a.i - b.i).map(({ m }) => m);
  const notes = [];
  if (transcript.content_recorded === false) notes.push("Recorded without content (FOUNDRY_RECORD_CONTENT=false).");
  if (transcript.truncated) notes.push("The transcript outgrew its limits: later content is missing.");
  return section("run-conversation", "Conversation",
    notes.map((n) => h("p", { class: "muted" }, n)),
    h("ol", { class: "turns", id: "turns" }, requestMessages(transcript.request_messages || []),
      messages.map((m) => turn(m, calls))),
    transcript.unmatched_outputs?.length ? h("div", {}, h("h4", {}, "Outputs without a call"), json(transcript.unmatched_outputs)) : null);
}

function toolCalls(transcript) {
  const calls = transcript?.tool_calls || [];
  if (!calls.length) return null;
  return section("run-tools", "Tool calls, in order", table(["#", "Call", "Name", "Who ran it", "Arguments", "Result"],
    calls.map((c, i) => [String(i + 1), h("span", { class: "mono" }, c.id), text(c.name), runner(c) || c.origin,
      json(c.input), c.output === null ? "—" : h("div", {}, c.is_error ? badge("error") : null, longText(c.output, "pre"))]),
    { caption: "Tool calls" }));
}

export function draw(container, id, record, transcript, final = null) {
  const started = performance.now();
  container.replaceChildren(
    h("p", {}, h("a", { href: "#/runs" }, "← All runs")),
    h("h2", { id: "run-title" }, "Run ", h("span", { class: "mono" }, id)),
    h("div", { class: "grid-2" }, summary(id, record, transcript, final), usage(record, transcript, final)),
    conversation(transcript),
    toolCalls(transcript),
    validation(record?.validation || final?.validation),
    attempts(transcript?.attempts || final?.attempts));
  container.dataset.renderMs = String(Math.round(performance.now() - started));
  container.dataset.status = record?.status || final?.status || transcript?.status || "";
}

function follow(container, id) {
  const state = { reasoning: null, answer: null, calls: new Map(), lastId: 0, reconnects: 0, ended: false };
  const liveState = h("p", { class: "live-state", id: "live-state", "aria-live": "polite" }, "Following the stream…");
  const turns = h("ol", { class: "turns", id: "live-turns" });
  container.replaceChildren(
    h("p", {}, h("a", { href: "#/runs" }, "← All runs")),
    h("h2", { id: "run-title" }, "Run ", h("span", { class: "mono" }, id), " ", badge("running")),
    section("run-live", "Live", liveState, turns));
  container.dataset.live = "true";

  function answer() {
    if (!state.answer) {
      state.answer = h("div", { class: "data answer", id: "live-answer" });
      turns.append(h("li", { class: "k-response" }, h("div", { class: "kind" }, "answer"), state.answer));
      state.reasoning = null;
    }
    return state.answer;
  }

  function reasoning() {
    if (!state.reasoning) {
      state.reasoning = h("div", { class: "data" });
      turns.append(h("li", { class: "k-thinking" }, h("details", { class: "reasoning" }, h("summary", {}, "Reasoning"), state.reasoning)));
      state.answer = null;
    }
    return state.reasoning;
  }

  function onEvent(eventId, type, data) {
    if (eventId && eventId <= state.lastId) return;  // never twice, whatever a reconnect replays
    if (eventId) state.lastId = eventId;
    container.dataset.lastEvent = String(state.lastId);
    if (type === "token") answer().append(data.content);
    else if (type === "reasoning") reasoning().append(data.content);
    else if (type === "tool_call") {
      let call = state.calls.get(data.id);
      if (!call) {
        call = { args: h("pre", { class: "data" }), result: h("div", {}) };
        state.calls.set(data.id, call);
        turns.append(h("li", { class: "k-tool_call" }, h("div", { class: "kind" }, "tool call"),
          h("div", {}, text(data.name, "strong"), " ", h("span", { class: "mono muted" }, data.id)), call.args, call.result));
        state.answer = state.reasoning = null;
      }
      call.args.append(data.args_fragment || "");
    } else if (type === "tool_result") {
      const call = state.calls.get(data.tool_call_id);
      const out = h("div", {}, h("div", { class: "kind" }, `result${data.is_error ? " · error" : ""}`), longText(data.content, "pre"));
      if (call) call.result.append(out);
      else turns.append(h("li", { class: "k-tool_output" }, out));
    } else if (type === "final") {
      state.ended = true;
      liveState.textContent = `Ended: ${data.status}. Loading the record…`;
      announce(`Run ended: ${data.status}.`);
      subscription.close();
      finish(data);
    }
  }

  async function finish(final) {
    const transcript = await orNull(api(`/v1/stream/${encodeURIComponent(id)}/transcript`));
    const record = await orNull(api(`/v1/runs/${encodeURIComponent(id)}`));
    draw(container, id, record, transcript, final);
    container.dataset.live = "ended";
    container.dataset.reconnects = String(state.reconnects);
  }

  function onState(name, detail) {
    if (state.ended) return;
    if (name === "reconnecting") {
      state.reconnects += 1;
      container.dataset.reconnects = String(state.reconnects);
      liveState.textContent = `Connection lost: resuming after event ${state.lastId}…`;
    } else if (name === "open") {
      liveState.textContent = state.reconnects ? `Resumed after event ${state.lastId}: following.` : "Following the stream…";
    } else if (name === "failed") {
      liveState.textContent = `The stream could not be followed: ${detail}`;
    }
  }

  const subscription = subscribe(id, { apiKey: session.key, onEvent, onState });
  return () => subscription.close();
}

export async function render(container, { id }) {
  const [record, transcript] = await Promise.all([
    orNull(api(`/v1/runs/${encodeURIComponent(id)}`)),
    orNull(api(`/v1/stream/${encodeURIComponent(id)}/transcript`)),
  ]);
  if (!record && !transcript) {
    container.append(h("p", {}, h("a", { href: "#/runs" }, "← All runs")),
      h("p", { class: "error", role: "alert" }, `No run ${id}: unknown, or expired and not recorded.`));
    return null;
  }
  if (transcript && transcript.status === "running") return follow(container, id);
  draw(container, id, record, transcript);
  return null;
}
