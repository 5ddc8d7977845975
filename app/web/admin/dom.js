// Building the page without markup strings: every piece of data goes in as a text node
// (textContent, Node.append of a string), never parsed as markup, so a transcript carrying
// HTML or a `javascript:` URL is shown as the characters it is.

const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// Data shown as text: bidirectional controls (which could reorder what follows them) are shown
// as their code points, and the element isolates its direction from the page (CSS `.data`).
export function text(value, tag = "span", cls = "") {
  const el = h(tag, { class: `data ${cls}`.trim(), dir: "auto" });
  const s = value === null || value === undefined ? "" : String(value);
  let last = 0;
  for (const match of s.matchAll(BIDI)) {
    el.append(s.slice(last, match.index));
    const code = match[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    el.append(h("span", { class: "bidi", title: "a bidirectional control character" }, `[U+${code}]`));
    last = match.index + match[0].length;
  }
  el.append(s.slice(last));
  return el;
}

const PREVIEW = 20000;

// Text in blocks of about PREVIEW characters, cut at a space where one is near: each block is
// laid out only when scrolled to (CSS `content-visibility: auto` on `.chunk`), so a 2 MB answer
// costs the layout of what is on screen.
function chunks(s, tag) {
  const el = h(tag, { class: "data chunks", dir: "auto" });
  for (let start = 0; start < s.length;) {
    let end = Math.min(s.length, start + PREVIEW);
    if (end < s.length) {
      const space = s.lastIndexOf(" ", end);
      if (space > end - 200 && space > start) end = space + 1;
    }
    el.append(text(s.slice(start, end), "span", "chunk"));
    start = end;
  }
  return el;
}

// Long text: the first PREVIEW characters, and a button that shows the rest (a 2 MB answer
// stays text nodes, never parsed as anything).
export function longText(value, tag = "pre") {
  const s = value === null || value === undefined ? "" : String(value);
  if (s.length <= PREVIEW) return text(s, tag);
  const el = text(s.slice(0, PREVIEW), tag);
  const more = h("button", { type: "button", class: "secondary" }, `Show all ${s.length.toLocaleString("en")} characters`);
  more.addEventListener("click", () => {
    el.replaceWith(chunks(s, tag));
    more.remove();
  });
  return h("div", {}, el, more);
}

export function json(value) {
  return longText(JSON.stringify(value, null, 2), "pre");
}

export function badge(state, label = state) {
  return h("span", { class: `badge s-${String(state).replace(/[^a-z_]/g, "")}` }, label);
}

// A table that turns into one card per row on a phone (CSS `.cards`: each cell then shows its
// column's name from `data-label`); the explicit roles keep it a table to assistive technology
// whatever its display.
export function table(headers, rows, { caption = "", numeric = [] } = {}) {
  const cls = (i) => (numeric.includes(i) ? "num" : null);
  const head = h("tr", { role: "row" }, headers.map((name, i) => h("th", { scope: "col", role: "columnheader", class: cls(i) }, name)));
  const body = rows.map((cells) => h("tr", { role: "row" }, cells.map((cell, i) =>
    h("td", { role: "cell", class: cls(i), "data-label": headers[i] }, h("div", {}, cell)))));
  const t = h("table", { role: "table" }, caption ? h("caption", { class: "sr-only" }, caption) : null,
    h("thead", { role: "rowgroup" }, head), h("tbody", { role: "rowgroup" }, body));
  // A scrollable region is focusable, so a keyboard can scroll it (axe: scrollable-region-focusable).
  return h("div", { class: "table-wrap cards", tabindex: "0", role: "region", "aria-label": `${caption || "Data"} (table)` }, t);
}

export function when(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function num(value, digits = 0) {
  if (value === null || value === undefined) return "—";
  return Number(value).toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function usd(value) {
  if (value === null || value === undefined) return "—";
  return `$${Number(value).toFixed(Number(value) !== 0 && Math.abs(value) < 0.01 ? 6 : 4)}`;
}

export function ms(value) {
  return value === null || value === undefined ? "—" : `${num(value, value < 100 ? 1 : 0)} ms`;
}

export function announce(message) {
  const status = document.getElementById("status");
  status.textContent = "";
  status.textContent = message;
}
