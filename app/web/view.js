// Drawing the run. Everything that comes from the model, a tool, the gateway's errors or the
// user goes into the page as text (textContent, Text nodes), never as HTML.
// `render(run)` is incremental: text already drawn is extended (Text.appendData), so a long
// answer costs the same per token; `reset()` then `render(run)` redraws a restored run.

import { MAX_FRAMES, ranBy } from "./state.js";

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const json = (value) => JSON.stringify(value, null, 2);
const ms = (value) => (value === null || value === undefined ? "–" : `${Math.round(value)} ms`);

export function createView() {
  let drawn;

  function reset() {
    drawn = { segments: [], reasoning: 0, frames: 0, shownFrames: 0, final: false };
    $("turn").replaceChildren();
    $("reasoning").replaceChildren(document.createTextNode(""));
    $("reasoning-lane").hidden = true;
    $("reasoning-count").textContent = "";
    $("frames").replaceChildren(document.createTextNode(""));
    $("frames-count").textContent = "";
    $("transcript").textContent = "";
    $("blocked").hidden = true;
    $("run-error").hidden = true;
    $("verdicts").tBodies[0].replaceChildren();
    for (const id of ["f-model", "f-status", "f-stop", "f-steps", "f-usage", "f-ttft", "f-duration", "f-stream", "f-last-id"]) {
      $(id).textContent = "–";
    }
    $("final").dataset.status = "";
  }

  function toolCard(call) {
    const card = el("article", "tool");
    card.dataset.callId = call.id;
    const title = el("h4");
    title.append(el("span", "tool-name", call.name), " ", el("code", "call-id", call.id));
    const list = el("dl");
    const row = (label, node) => {
      const dd = el("dd");
      dd.append(node);
      list.append(el("dt", "", label), dd);
    };
    const fragments = el("code", "fragments");
    const args = el("pre", "args", "(assembling…)");
    const result = el("pre", "result", "(no result yet)");
    const who = el("span", "ran-by");
    const events = el("span", "event-ids");
    row("argument fragments", fragments);
    row("parsed arguments", args);
    row("result", result);
    row("ran by", who);
    row("event ids", events);
    card.append(title, list);
    return { node: card, fragments, args, result, who, events, fragmentCount: 0 };
  }

  function drawTool(slot, call, run) {
    while (slot.fragmentCount < call.fragments.length) {
      slot.fragments.append(el("span", "frag", call.fragments[slot.fragmentCount]));
      slot.fragmentCount += 1;
    }
    if (call.arguments !== null) slot.args.textContent = json(call.arguments);
    if (call.result) {
      slot.result.textContent = call.result.content;
      slot.node.classList.toggle("is-error", call.result.is_error);
      if (call.result.is_error) slot.result.prepend(el("strong", "", "error: "));
    }
    slot.who.textContent = ranBy(call, run);
    slot.events.textContent = (call.events || []).join(", ");
  }

  function drawFinal(run) {
    const final = run.final;
    $("f-stream").textContent = run.streamId;
    $("f-model").textContent = run.final ? `${run.final.provider}/${run.final.model}` : (run.served ?? run.model);
    $("f-last-id").textContent = String(run.lastId || "–");
    $("f-ttft").textContent = run.firstAt !== null ? ms(run.firstAt - run.sentAt) : "–";
    $("f-duration").textContent = run.endAt !== null ? ms(run.endAt - run.sentAt) : "–";
    if (!final || drawn.final) return;
    drawn.final = true;
    $("final").dataset.status = final.status;
    $("f-status").textContent = final.status;
    $("f-stop").textContent = final.stop_reason ?? "–";
    $("f-steps").textContent = `${final.steps ?? 1}` + (final.max_steps_reached ? " (max_steps reached)" : "");
    const u = final.usage || {};
    const count = (n) => (n === null || n === undefined ? "unknown" : n);  // null: never reported
    $("f-usage").textContent =
      `${count(u.input_tokens)} in, ${count(u.output_tokens)} out, ${count(u.total_tokens)} total` +
      (u.reasoning_tokens ? `, ${u.reasoning_tokens} reasoning` : "") +
      (u.cache_read_tokens ? `, ${u.cache_read_tokens} cache read` : "") +
      (u.cache_write_tokens ? `, ${u.cache_write_tokens} cache write` : "");
    const error = final.error || null;
    if (final.status === "blocked") {
      const blocked = (final.validation && final.validation.blocked) || {};
      $("blocked-validator").textContent = (error && error.validator) || blocked.validator || "the provider";
      $("blocked-reason").textContent = (error && error.reason) || blocked.reason || (error && error.message) || "content filtered";
      $("blocked").hidden = false;
    } else if (error) {
      $("run-error").textContent = `${final.status}: ${error.message || error.code || "failed"}` +
        (error.code ? ` (${error.code})` : "");
      $("run-error").hidden = false;
    }
    const validation = final.validation;
    if (validation) {
      const body = $("verdicts").tBodies[0];
      for (const [name, stats] of Object.entries(validation.validators || {})) {
        const tr = el("tr");
        tr.append(el("th", "", name));
        tr.firstChild.scope = "row";
        for (const key of ["pass", "fail", "unknown", "error"]) tr.append(el("td", "", String(stats[key] ?? 0)));
        if (stats.fail) tr.className = "failed";
        body.append(tr);
      }
      $("verdicts-note").textContent =
        `chunking: ${validation.chunking}; chunks checked: ${validation.chunks?.text ?? 0} text, ` +
        `${validation.chunks?.reasoning ?? 0} reasoning; redactions: ${validation.redactions ?? 0}`;
      if (final.status === "blocked") $("validation-lane").open = true;
    }
  }

  function drawFrames(run) {
    const total = run.framesDropped + run.frames.length;
    const fresh = total - drawn.frames;
    if (fresh <= 0) return;
    const pre = $("frames");
    if (drawn.shownFrames + fresh > 2 * MAX_FRAMES) {  // trim: redraw the frames the run keeps
      pre.replaceChildren(document.createTextNode(run.frames.join("\n\n") + "\n\n"));
      drawn.shownFrames = run.frames.length;
    } else {
      pre.firstChild.appendData(run.frames.slice(-Math.min(fresh, run.frames.length)).join("\n\n") + "\n\n");
      drawn.shownFrames += fresh;
    }
    drawn.frames = total;
    $("frames-count").textContent = run.framesDropped ? `(last ${run.frames.length} of ${total})` : `(${total})`;
  }

  function render(run) {
    const turn = $("turn");
    run.segments.forEach((segment, i) => {
      let slot = drawn.segments[i];
      if (segment.kind === "text") {
        if (!slot) {
          const p = el("p", "text-segment");
          const text = document.createTextNode("");
          p.append(text);
          turn.append(p);
          slot = drawn.segments[i] = { text, length: 0 };
        }
        if (segment.text.length > slot.length) {
          slot.text.appendData(segment.text.slice(slot.length));
          slot.length = segment.text.length;
        }
      } else {
        if (!slot) {
          slot = drawn.segments[i] = toolCard(run.tools[segment.id]);
          turn.append(slot.node);
        }
        drawTool(slot, run.tools[segment.id], run);
      }
    });
    if (run.reasoning.length > drawn.reasoning) {
      $("reasoning").firstChild.appendData(run.reasoning.slice(drawn.reasoning));
      drawn.reasoning = run.reasoning.length;
      $("reasoning-lane").hidden = false;
      $("reasoning-count").textContent = `(${drawn.reasoning} characters)`;
    }
    drawFrames(run);
    drawFinal(run);
  }

  reset();
  return { reset, render };
}
