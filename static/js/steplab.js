// The one shared module of the pages (an ES module: each page script imports what it
// uses from "./steplab.js"; base.html loads it on every page for the guidelines and the
// stacked tables). The pages call the REST API with the session cookie; DRF's
// SessionAuthentication then requires the CSRF token on every unsafe request, which
// Django keeps in the "csrftoken" cookie.

// What a page shows where there is no value: one character on every page.
export const NONE = "—";

// document.getElementById, the pages' only way to find their elements by id.
export const $ = (id) => document.getElementById(id);

// A new element: el("td", {text: 3, cls: "num", title: "...", data: {step: 1}}, child...).
// text is set with textContent (never as markup); null or undefined sets none.
export function el(tag, { text, cls, title, data } = {}, ...children) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (title) node.title = title;
  if (data) Object.assign(node.dataset, data);
  if (children.length) node.append(...children);
  return node;
}

// A status box (a <p role="status"> of the page): its kind is one class of MESSAGE_KINDS
// beside the box's own; empty text hides it. A box marked data-fade in its template hides
// again MESSAGE_MS after a message unless told {sticky: true}; an error never fades.
export const MESSAGE_MS = 6000;
const MESSAGE_KINDS = ["info", "ok", "warn", "error"];
const fadeTimers = new WeakMap();

export function showMessage(box, text, kind = "info", { sticky = false } = {}) {
  box.textContent = text;
  box.classList.remove(...MESSAGE_KINDS);
  box.classList.add(kind);
  box.hidden = !text;
  clearTimeout(fadeTimers.get(box));
  if (text && "fade" in box.dataset && !sticky && kind !== "error") {
    fadeTimers.set(box, setTimeout(() => (box.hidden = true), MESSAGE_MS));
  }
}

// An API error in words, nested errors kept: DRF's {"detail": "..."} is the detail;
// {"name": ["..."]} is "name: ..."; a list serializer's {"ratings": [{}, {"rating":
// ["..."]}]} is "ratings[1].rating: ..."; {"steps": {"3": ["..."]}} is "steps[3]: ...".
// An error without a body (the network, a bug) is its message. {fields: false}: the
// messages alone, for a form whose fields already stand beside the message box.
export function errorText(error, { fields = true } = {}) {
  const body = error && error.body;
  if (body === undefined || body === null) return (error && error.message) || String(error);
  const parts = [];
  collectErrors(body, "", parts);
  const texts = fields ? parts.map((part) => part.text) : parts.map((part) => part.message);
  return texts.join(fields ? "; " : " ") || "unknown error";
}

function collectErrors(value, where, parts) {
  if (value === null || value === undefined) return;
  if (typeof value !== "object") {
    parts.push({ text: where ? `${where}: ${value}` : String(value), message: String(value) });
  } else if (Array.isArray(value)) {
    value.forEach((item, i) => {
      const nested = item !== null && typeof item === "object";
      collectErrors(item, nested ? `${where}[${i}]` : where, parts);
    });
  } else {
    for (const [key, item] of Object.entries(value)) {
      let name = `${where}.${key}`;
      if (key === "detail" || key === "non_field_errors") name = where;
      else if (/^\d+$/.test(key)) name = `${where}[${key}]`;
      else if (!where) name = key;
      collectErrors(item, name, parts);
    }
  }
}

// Numbers: a count with thousands separators (1,000), a fixed number of digits, a share as
// a percentage; NONE where there is no number.
export function formatCount(n) {
  return Number(n || 0).toLocaleString("en-US");
}

// "1 chain", "2 chains": a count and its noun, singular only for exactly one.
export function formatCounted(n, noun, nouns = `${noun}s`) {
  return `${formatCount(n)} ${Number(n || 0) === 1 ? noun : nouns}`;
}

export function formatFixed(value, digits = 2) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : NONE;
}

export function formatPercent(value, digits = 0) {
  if (typeof value !== "number" || !Number.isFinite(value)) return NONE;
  return `${(value * 100).toFixed(digits)} %`;
}
// The rating keys of the workspace and the review page: 1/+ correct, 2/0 ambiguous,
// 3/- incorrect.
export const RATING_KEYS = Object.freeze({ "1": 1, "+": 1, "2": 0, "0": 0, "3": -1, "-": -1 });
// Delimiters KaTeX's auto-render reads itself. A single $ is not among them: texts
// mean money by it as often as math (GSM8K: "$5 ... $12"), so ``delimitedMath`` decides
// which $...$ are math and hands those over as \(...\).
const KATEX_OPTIONS = {
  delimiters: [
    { left: "$$", right: "$$", display: true },
    { left: "\\[", right: "\\]", display: true },
    { left: "\\(", right: "\\)", display: false },
  ],
  throwOnError: false,
  trust: false,
  strict: "ignore",
};

// Put ``text`` in ``element`` as text, then let KaTeX (trust off) typeset its math
// (``delimitedMath``); a formula it cannot parse stays as source. ``raw``: leave the
// source as it is. KaTeX's auto-render is loaded (deferred) by the pages that show math,
// after this file.
export function renderMath(element, text, raw = false) {
  const typeset = !raw && typeof window.renderMathInElement === "function";
  element.textContent = typeset ? delimitedMath(text) : text;
  if (typeset) window.renderMathInElement(element, KATEX_OPTIONS);
}

// Text already delimited for KaTeX: $$...$$, \(...\) and \[...\].
const DELIMITED = /\$\$[\s\S]*?\$\$|\\\([\s\S]*?\\\)|\\\[[\s\S]*?\\\]/g;

// ``text`` with the math that auto-render would not find delimited as \(...\): a $...$
// that TeX writers mean as math, and \boxed{...} outside any math (model answers box
// their result bare). Text already delimited is left alone.
export function delimitedMath(text) {
  let out = "";
  let last = 0;
  for (const match of text.matchAll(DELIMITED)) {
    out += plainAsMath(text.slice(last, match.index)) + match[0];
    last = match.index + match[0].length;
  }
  return out + plainAsMath(text.slice(last));
}

function plainAsMath(plain) {
  return dollarSpans(plain)
    .map((span) => (span.math ? `\\(${span.text}\\)` : wrapBoxes(span.text)))
    .join("");
}

// The index of the next lone $ at or after ``from`` (not escaped as \$, not half of $$),
// or -1.
function nextDollar(text, from) {
  for (let i = text.indexOf("$", from); i >= 0; i = text.indexOf("$", i + 1)) {
    if (text[i + 1] === "$") {
      i += 1;
      continue;
    }
    if (text[i - 1] !== "\\") return i;
  }
  return -1;
}

// Pandoc's rule for $...$, which chat front-ends follow: the opening $ has a non-space
// right after it, the closing $ a non-space right before it and no digit right after it,
// and no other $ between them. So "$5 for one, $12 for two" holds no math. A span must
// also look like math (not two or more words of prose) and parse (KaTeX), else its
// dollars stay text. Returns the text cut into {math, text} spans.
function dollarSpans(plain) {
  const spans = [];
  let at = 0;
  for (let open = nextDollar(plain, 0); open >= 0; ) {
    const close = nextDollar(plain, open + 1);
    if (close < 0) break;
    const inner = plain.slice(open + 1, close);
    const opens = /\S/.test(plain[open + 1]);
    const closes = /\S/.test(plain[close - 1]) && !/[0-9]/.test(plain[close + 1] || "");
    if (opens && closes && looksLikeMath(inner)) {
      if (open > at) spans.push({ math: false, text: plain.slice(at, open) });
      spans.push({ math: true, text: inner });
      at = close + 1;
      open = nextDollar(plain, at);
    } else {
      open = close; // the next $ may open a span of its own
    }
  }
  if (at < plain.length) spans.push({ math: false, text: plain.slice(at) });
  return spans;
}

const PROSE_WORD = /(?:^|\s)[A-Za-z]{3,}(?=\s|[.,;:!?]|$)/g;

function looksLikeMath(inner) {
  if (/\n\s*\n/.test(inner)) return false; // math does not run across paragraphs
  if (!inner.includes("\\") && (inner.match(PROSE_WORD) || []).length >= 2) return false;
  if (typeof window.katex === "undefined") return true;
  try {
    window.katex.renderToString(inner, { throwOnError: true, strict: "ignore", trust: false });
    return true;
  } catch {
    return false;
  }
}

// Model answers often write \boxed{42} outside any math; KaTeX's auto-render only reads
// delimited math, so such a box (up to its matching brace, however nested) is wrapped in
// \( \).
function wrapBoxes(plain) {
  let out = "";
  let at = 0;
  for (let start = plain.indexOf("\\boxed{"); start >= 0; start = plain.indexOf("\\boxed{", at)) {
    let depth = 0;
    let end = -1;
    for (let i = start + "\\boxed".length; i < plain.length; i += 1) {
      if (plain[i] === "{") depth += 1;
      else if (plain[i] === "}" && --depth === 0) {
        end = i + 1;
        break;
      }
    }
    if (end < 0) break; // unbalanced: leave the rest as it is
    // A bare $ in the box is money (\boxed{$70}): in math it must read \$.
    const box = plain.slice(start, end).replace(/(?<!\\)\$/g, "\\$");
    out += plain.slice(at, start) + "\\(" + box + "\\)";
    at = end;
  }
  return out + plain.slice(at);
}

// Guidelines (annotation/guidelines.py) come as the server's HTML with each formula as
// escaped text in a .math-tex box; KaTeX (trust off) typesets that text in place, so
// no markup is ever built from what a lead wrote. A formula KaTeX cannot parse is shown
// as KaTeX's error text. Needs katex.min.js on the page; without it the source stays.
export function typesetGuidelines(root) {
  if (typeof window.katex === "undefined" || !root) return;
  for (const box of root.querySelectorAll(".math-tex:not([data-typeset])")) {
    window.katex.render(box.textContent, box, {
      displayMode: box.classList.contains("math-display"),
      throwOnError: false,
      trust: false,
      strict: "ignore",
    });
    box.dataset.typeset = "true";
  }
}

// A .table-stack turns into one block a row on a phone (steplab.css); each cell is named
// by its column's header (data-label), kept up when a script refills the table.
export function labelCells(table) {
  const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const row of table.querySelectorAll("tbody tr")) {
    let column = 0;
    for (const cell of row.children) {
      const label = heads[column];
      if (label && !cell.dataset.label) cell.dataset.label = label;
      column += cell.colSpan || 1;
    }
  }
}

function watchStackedTables() {
  for (const table of document.querySelectorAll("table.table-stack")) {
    labelCells(table);
    new MutationObserver(() => labelCells(table)).observe(table, {
      childList: true,
      subtree: true,
    });
  }
}

// Deferred scripts (KaTeX among them) have run by DOMContentLoaded.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".guidelines").forEach(typesetGuidelines);
  watchStackedTables();
});

// One date format on every page, as the server's templates write it ("Y-m-d H:i"):
// 2026-11-25 08:33, in the browser's time zone. Unparseable input comes back as it is.
export function formatWhen(iso) {
  if (!iso) return NONE;
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const two = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} ` +
    `${two(date.getHours())}:${two(date.getMinutes())}`;
}

export function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

// api("/api/v1/projects/", {method: "POST", body: {...}}) -> parsed JSON (or null on 204).
// Rejects with an Error carrying .status and .body for any non-2xx answer.
export async function api(path, options = {}) {
  const method = (options.method || "GET").toUpperCase();
  const headers = { Accept: "application/json" };
  let body;
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  if (!["GET", "HEAD", "OPTIONS"].includes(method)) {
    headers["X-CSRFToken"] = csrfToken();
  }
  const response = await fetch(path, { method, headers, body, credentials: "same-origin" });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const error = new Error(`${method} ${path}: ${response.status}`);
    error.status = response.status;
    error.body = data;
    throw error;
  }
  return data;
}

// Machine labels (Monte-Carlo rollouts, a judge, the PRM, an import's), shown beside the
// votes on the review and data manager pages and never counted among them. A verdict is
// {rating, value, hard, detail, model, run_kind, run_id} as the labels API sends it.
export const MACHINE_SHORT = Object.freeze({ monte_carlo: "MC", judge: "Judge", prm: "PRM", import: "Import" });
const SIGNED = { 1: "+1", 0: "0", "-1": "−1" };

export function machineText(verdict) {
  if (!verdict) return "·";
  const parts = [];
  if (verdict.rating !== null) parts.push(SIGNED[verdict.rating]);
  if (verdict.value !== null) parts.push(verdict.value.toFixed(2));
  return parts.join(" · ") || "·";
}

export function machineTitle(column, verdict) {
  if (!verdict) return `${column.name}: no label on this step`;
  const parts = [column.name];
  if (verdict.value !== null) parts.push(`P(correct) ${verdict.value.toFixed(2)}`);
  const detail = verdict.detail || {};
  if (typeof detail.rollouts === "number" && typeof detail.reached === "number") {
    parts.push(`${detail.reached} of ${detail.rollouts} rollouts reached the answer`);
  }
  if (verdict.confidence !== null) parts.push(`confidence ${verdict.confidence.toFixed(2)}`);
  if (verdict.model) parts.push(verdict.model);
  parts.push(`${verdict.run_kind} run ${verdict.run_id}`);
  return parts.join(" · ");
}

// A source's first error in words: "step 3", "none", or "—" with no verdict.
export function machineFirstError(index) {
  if (index === null || index === undefined) return NONE;
  return index === -1 ? "none" : `step ${index + 1}`;
}

// Where routing sent a chain (issue 23), as the lead's pages name it; "" is none. Only
// lead pages show it: to an annotator a spot check is a chain like any other.
export const ROUTING_NAMES = Object.freeze({
  agreed: "machine-agreed",
  spot_check: "spot check",
  disagreed: "machines disagree",
  second_look: "second look",
});

// A badge of a chain's routing, or null when routing left it alone.
export function routingBadge(routing) {
  if (!routing) return null;
  const badge = document.createElement("span");
  badge.className = `badge routing-badge routing-${routing}`;
  badge.dataset.routing = routing;
  badge.textContent = ROUTING_NAMES[routing] || routing;
  return badge;
}
