// The run's state: a plain object the canonical events are folded into (`apply`), saved to
// sessionStorage so a reloaded page redraws it and resumes the stream after `lastId`.
// The state holds text, not events, so it stays about the size of the answer.

const RUN_KEY = "foundry.playground.run";
const CONVERSATION_KEY = "foundry.playground.conversation";
export const MAX_FRAMES = 500;

export function newRun(streamId, model, sentAt) {
  return {
    streamId, model, sentAt,
    firstAt: null, endAt: null,
    lastId: 0,
    segments: [],         // [{kind: "text", text}] and [{kind: "tool", id}] in arrival order
    reasoning: "",
    tools: {},            // id -> {id, name, index, fragments, arguments, server, result}
    final: null,
    frames: [],           // the last MAX_FRAMES frames as text
    framesDropped: 0,
    note: "",             // what the page says about the connection (stopped, lost, ...)
    done: false,
  };
}

// Fold one event into the run. Events at or before `lastId` were already applied: ignored, so
// a replay that overlaps never duplicates text. Returns false for an ignored event.
export function apply(run, id, type, data, raw, now) {
  if (id <= run.lastId) return false;
  run.lastId = id;
  run.frames.push(raw);
  if (run.frames.length > MAX_FRAMES) {
    run.frames.shift();
    run.framesDropped += 1;
  }
  if (run.firstAt === null && (type === "token" || type === "reasoning" || type === "tool_call")) {
    run.firstAt = now;
  }
  switch (type) {
    case "token": {
      const last = run.segments[run.segments.length - 1];
      if (last && last.kind === "text") last.text += data.content;
      else run.segments.push({ kind: "text", text: data.content });
      break;
    }
    case "start":
      run.served = `${data.provider} (${data.model})`;
      break;
    case "reasoning":
      run.reasoning += data.content;
      break;
    case "tool_call": {
      let call = run.tools[data.id];
      if (!call) {
        call = { id: data.id, name: data.name, index: data.index, fragments: [], arguments: null,
                 server: Boolean(data.server), result: null, events: [] };
        run.tools[data.id] = call;
        run.segments.push({ kind: "tool", id: data.id });
      }
      call.events.push(id);
      if (data.args_fragment) call.fragments.push(data.args_fragment);
      if (data.is_final) call.arguments = data.arguments ?? {};
      break;
    }
    case "tool_result": {
      let call = run.tools[data.tool_call_id];
      if (!call) {  // an output whose call was not streamed: still shown
        call = { id: data.tool_call_id, name: data.name, index: null, fragments: [], arguments: null,
                 server: false, result: null, events: [] };
        run.tools[data.tool_call_id] = call;
        run.segments.push({ kind: "tool", id: data.tool_call_id });
      }
      call.events.push(id);
      call.result = { content: data.content, is_error: Boolean(data.is_error) };
      break;
    }
    case "final":
      run.final = data;
      run.endAt = now;
      run.done = true;
      break;
    default:
      break;  // kinds this page does not know yet: kept in the raw frames
  }
  return true;
}

// Who ran a call, as far as the stream tells: the provider (server tools), the gateway (a
// result came back in the stream), or nobody yet (the caller must answer it).
export function ranBy(call, run) {
  if (call.server) return "provider";
  if (call.result) return "gateway";
  if (run.done) return "caller (not run: answer it in a tool message)";
  return "pending";
}

export function answerText(run) {
  return run.segments.filter((s) => s.kind === "text").map((s) => s.text).join("");
}

function load(key) {
  try {
    const raw = sessionStorage.getItem(key);
    return raw ? JSON.parse(raw) : null;
  } catch {
    return null;
  }
}

function save(key, value) {
  try {
    sessionStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;  // storage full or refused: the page still works, it just cannot resume
  }
}

export const loadRun = () => load(RUN_KEY);
export const saveRun = (run) => save(RUN_KEY, run);
export const loadConversation = () => load(CONVERSATION_KEY) ?? [];
export const saveConversation = (messages) => save(CONVERSATION_KEY, messages);
