// Subscribing to GET /v1/stream/{id}: the browser's own EventSource, which reconnects by itself
// and sends Last-Event-ID; or, when an API key is set (EventSource cannot send headers), a fetch
// reader that does the same by hand: Authorization and Last-Event-ID headers, reconnect on a
// dropped connection. Both call onEvent(id, type, data, raw) and onState(state, detail).

export const EVENT_TYPES = ["start", "token", "reasoning", "tool_call", "tool_result", "final"];
const RETRY_MS = 1000;

export function subscribe(streamId, { afterId = 0, apiKey = "", onEvent, onState }) {
  const url = `/v1/stream/${encodeURIComponent(streamId)}` + (afterId ? `?after=${afterId}` : "");
  return apiKey ? fetchReader(url, afterId, apiKey, onEvent, onState) : eventSource(url, afterId, onEvent, onState);
}

function frameText(id, type, data) {
  return `id: ${id}\nevent: ${type}\ndata: ${data}`;
}

function deliver(onEvent, idText, type, dataText) {
  const id = Number.parseInt(idText, 10);
  let data;
  try {
    data = JSON.parse(dataText);
  } catch {
    data = { unparsed: dataText };
  }
  onEvent(Number.isFinite(id) ? id : 0, type, data, frameText(idText, type, dataText));
}

// The error body of a refused subscription (404 unknown or expired stream, 410 replay range
// gone, ...), for a clear message: EventSource itself only says "error".
export async function describeFailure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON
  }
  const error = body && body.error;
  return error ? `${error.message} (HTTP ${response.status}, ${error.code})` : `HTTP ${response.status}`;
}

function eventSource(url, afterId, onEvent, onState) {
  const source = new EventSource(url);
  let lastId = afterId;
  let closed = false;
  const handler = (event) => {
    lastId = Number.parseInt(event.lastEventId, 10) || lastId;
    deliver(onEvent, event.lastEventId, event.type, event.data);
  };
  for (const type of [...EVENT_TYPES, "message"]) source.addEventListener(type, handler);
  source.onopen = () => onState("open");
  source.onerror = async () => {
    if (closed) return;
    if (source.readyState === EventSource.CONNECTING) {
      onState("reconnecting");
      return;
    }
    // CLOSED: the server refused (not 200 text/event-stream). Ask once more for its reason.
    closed = true;
    let detail = "the stream could not be opened";
    try {
      const headers = { Accept: "text/event-stream" };
      if (lastId) headers["Last-Event-ID"] = String(lastId);
      const response = await fetch(url, { headers, cache: "no-store" });
      if (!response.ok) detail = await describeFailure(response);
      if (response.body) await response.body.cancel();
    } catch {
      detail = "the gateway cannot be reached";
    }
    onState("failed", detail);
  };
  return {
    kind: "EventSource",
    close() {
      closed = true;
      source.close();
    },
  };
}

function fetchReader(url, afterId, apiKey, onEvent, onState) {
  const abort = new AbortController();
  let lastId = afterId;
  let retry = RETRY_MS;
  let closed = false;

  async function readOnce() {
    const headers = { Accept: "text/event-stream", Authorization: `Bearer ${apiKey}` };
    if (lastId) headers["Last-Event-ID"] = String(lastId);
    const response = await fetch(url, { headers, cache: "no-store", signal: abort.signal });
    if (!response.ok) {
      onState("failed", await describeFailure(response));
      return false;
    }
    onState("open");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let fields = { id: null, event: "", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      buffer += value;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();  // the unfinished line (a lone trailing CR is finished by the next read)
      for (const line of lines) {
        if (line === "") {  // dispatch (WHATWG: only when there was data)
          if (fields.data.length) {
            deliver(onEvent, fields.id ?? String(lastId), fields.event || "message", fields.data.join("\n"));
          }
          fields = { id: null, event: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;  // comment (ping)
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let field = colon < 0 ? "" : line.slice(colon + 1);
        if (field.startsWith(" ")) field = field.slice(1);
        if (name === "data") fields.data.push(field);
        else if (name === "event") fields.event = field;
        else if (name === "id" && !field.includes("\0")) {
          fields.id = field;
          lastId = Number.parseInt(field, 10) || lastId;
        } else if (name === "retry" && /^\d+$/.test(field)) retry = Number(field);
      }
    }
  }

  (async () => {
    while (!closed) {
      try {
        if (!(await readOnce())) return;  // refused: do not retry
      } catch {
        if (closed) return;
      }
      if (closed) return;
      onState("reconnecting");  // the connection ended before the final: reconnect after lastId
      await new Promise((resolve) => setTimeout(resolve, retry));
    }
  })();

  return {
    kind: "fetch",
    close() {
      closed = true;
      abort.abort();
    },
  };
}
