// An annotator's history: the chains they submitted, newest first, and one reopened
// with their ratings, comments and rewrite. While the pass is open to change (the API's
// can_revise) its annotator revises it in place with the workspace's keys; once it is
// not, the page says why (closed_reason).
//
// Everything comes from the history API (projects/{id}/history/ and .../history/{id}/).
// Texts are data: put in the page with textContent, then typeset by the same helper as the
// workspace (renderMath: KaTeX with trust off, \boxed{} outside $...$
// included). The reopened chain is addressed by the URL's hash (#annotation-<id>), so the
// browser's back button returns to the list and a reopened chain can be linked.

import {
  $,
  el,
  api,
  renderMath,
  formatWhen,
  RATING_KEYS,
  errorText,
  showMessage,
  NONE,
} from "./steplab.js";
const config = JSON.parse(document.getElementById("history-config").textContent);
const RATINGS = {
  1: { symbol: "+1", name: "correct" },
  0: { symbol: "0", name: "ambiguous" },
  "-1": { symbol: "−1", name: "incorrect" },
};
const HASH = /^#annotation-(\d+)$/;

const root = $("history");
const els = {
  message: $("hist-message"),
  listView: $("hist-list-view"),
  loading: $("hist-loading"),
  empty: $("hist-empty"),
  list: $("hist-list"),
  more: $("hist-more"),
  chainView: $("hist-chain-view"),
  when: $("hist-chain-when"),
  verb: $("hist-chain-verb"),
  mode: $("hist-mode"),
  revise: $("hist-revise"),
  open: $("hist-open"),
  editing: $("hist-editing"),
  closed: $("hist-closed"),
  closedReason: $("hist-closed-reason"),
  newest: $("hist-newest"),
  rewriteEdit: $("hist-rewrite-edit"),
  rewriteBox: $("hist-rewrite-box"),
  summary: $("hist-chain-summary"),
  problem: $("hist-problem"),
  referenceWrap: $("hist-reference-wrap"),
  reference: $("hist-reference"),
  steps: $("hist-steps"),
  finalWrap: $("hist-final-wrap"),
  final: $("hist-final"),
};

let nextCursor = null; // the cursor of the next (older) page, null at the end
let listLoaded = false;
let shownId = null; // the annotation on screen in the chain view
let openedFromList = false; // the chain on screen was opened from the list on this page
let shown = null; // the reopened chain as the API answered it
// While revising: the ratings and comments by step index, the rewrite, the current step.
let edit = null;

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function listUrl() {
  const params = new URLSearchParams();
  if (config.annotator) params.set("annotator", String(config.annotator));
  if (nextCursor !== null) params.set("cursor", nextCursor);
  const query = params.toString();
  return query ? `${config.api.history}?${query}` : config.api.history;
}

// "+3 / 0 / −1": the annotator's labels on the chain, each count in its colour.
function labelsSummary(entry) {
  const span = el("span", { cls: "hist-labels" });
  span.title = "correct / ambiguous / incorrect";
  span.append(
    el("span", { text: `+${entry.correct}`, cls: "ok" }),
    " / ",
    el("span", { text: `${entry.ambiguous}`, cls: "warn" }),
    " / ",
    el("span", { text: `−${entry.incorrect}`, cls: "bad" }),
  );
  return span;
}

function entryRow(entry) {
  const li = el("li");
  li.dataset.annotation = String(entry.annotation);
  const link = el("a", { cls: "hist-entry" });
  link.href = `#annotation-${entry.annotation}`;
  const problem = el("span", { cls: "hist-problem" });
  renderMath(problem, entry.problem || "(no problem text)");
  const meta = el("span", { cls: "hist-meta" });
  const when = el("time", { text: formatWhen(entry.submitted_at) });
  when.dateTime = entry.submitted_at;
  meta.append(
    when,
    el("span", { text: `${entry.steps_rated} of ${plural(entry.step_count, "step")} rated` }),
    labelsSummary(entry),
    el("span", { text: entry.first_error === null ? "no error" : `first error: step ${entry.first_error}` }),
  );
  if (entry.comments) meta.append(el("span", { text: plural(entry.comments, "comment") }));
  if (entry.rewritten) meta.append(el("span", { text: "rewrite" }));
  if (entry.revised) meta.append(el("span", { text: "revised", cls: "badge" }));
  link.append(problem, meta);
  li.append(link);
  return li;
}

async function loadPage() {
  els.more.disabled = true;
  let page;
  try {
    page = await api(listUrl());
  } catch {
    els.loading.hidden = true;
    els.more.disabled = false;
    showMessage(els.message, "Could not load the history; reload the page to try again.", "error");
    return;
  }
  listLoaded = true;
  els.loading.hidden = true;
  els.list.append(...page.results.map(entryRow));
  nextCursor = page.next_cursor;
  els.list.hidden = els.list.children.length === 0;
  els.empty.hidden = els.list.children.length > 0;
  els.more.hidden = nextCursor === null;
  els.more.disabled = false;
  root.dataset.entries = String(els.list.children.length);
}

function stepRow(step, chain) {
  const li = el("li", { cls: "ws-step" });
  li.dataset.index = String(step.index);
  li.dataset.rating = step.rating === null ? "" : String(step.rating);
  li.classList.toggle("is-unrated", step.rating === null);
  const number = el("span", { text: String(step.index + 1), cls: "ws-step-no" });
  const rate = el("span", { cls: "ws-rate" });
  if (step.rating === null) {
    const none = el("span", { text: NONE, cls: "ws-rate-btn" });
    none.title = "not rated";
    rate.append(none);
  } else {
    const shown = RATINGS[step.rating];
    const badge = el("span", { text: shown.symbol, cls: `ws-rate-btn rate-${shown.name} is-on` });
    badge.title = shown.name;
    badge.setAttribute("aria-label", `${shown.name}, step ${step.index + 1}`);
    rate.append(badge);
  }
  const body = el("div", { cls: "ws-step-body" });
  const text = el("div", { cls: "ws-text math" });
  renderMath(text, step.text);
  body.append(text);
  if (step.comment) body.append(el("p", { text: step.comment, cls: "ws-comment" }));
  li.append(number, rate, body);
  // The rewrite corrects the first step rated −1: shown under it, as the workspace did.
  if (chain.rewrite && chain.first_error === step.index + 1) {
    const box = el("div", { cls: "hist-rewrite" });
    box.append(el("span", { text: `Corrected step ${step.index + 1}`, cls: "ws-label" }));
    const rewritten = el("div", { cls: "ws-text math" });
    renderMath(rewritten, chain.rewrite);
    box.append(rewritten);
    li.append(box);
  }
  return li;
}

function showChain(chain) {
  shown = chain;
  edit = null;
  els.verb.textContent = chain.supersedes === null ? "Submitted" : "Revised";
  els.when.textContent = formatWhen(chain.submitted_at);
  const rated = chain.steps.filter((step) => step.rating !== null);
  const count = (value) => rated.filter((step) => step.rating === value).length;
  els.summary.textContent =
    `${rated.length} of ${plural(chain.steps.length, "step")} rated: ` +
    `+${count(1)} / ${count(0)} / −${count(-1)}` +
    (chain.first_error === null ? "; no error." : `; first error at step ${chain.first_error}.`);
  renderMath(els.problem, chain.problem);
  els.referenceWrap.hidden = !chain.reference_answer;
  if (chain.reference_answer) renderMath(els.reference, chain.reference_answer);
  const final = chain.final_answer && chain.final_answer.trim();
  els.finalWrap.hidden = !final;
  if (final) renderMath(els.final, chain.final_answer);
  els.steps.replaceChildren(...chain.steps.map((step) => stepRow(step, chain)));
  root.dataset.annotation = String(chain.annotation);
  showRevisable(chain);
}

// Whether the pass can still change: the Revise button, or the plain reason it cannot.
function showRevisable(chain) {
  const own = !config.annotator;
  els.revise.hidden = !own && !chain.closed_reason;
  els.open.hidden = !chain.can_revise;
  els.editing.hidden = true;
  els.rewriteEdit.hidden = true;
  els.closed.hidden = chain.can_revise || !chain.closed_reason;
  els.closedReason.textContent = chain.closed_reason;
  els.newest.hidden = chain.superseded_by === null;
  if (chain.superseded_by !== null) els.newest.href = `#annotation-${chain.superseded_by}`;
  els.mode.textContent = chain.can_revise ? "open to change" : "read-only";
  root.dataset.revisable = chain.can_revise ? "yes" : "no";
  delete root.dataset.editing;
}

// --- revising: the workspace's keys over the reopened chain ---------------------------

function startEdit() {
  if (!shown || !shown.can_revise || edit) return;
  edit = { ratings: {}, comments: {}, rewrite: shown.rewrite, current: 0 };
  for (const step of shown.steps) {
    if (step.rating !== null) edit.ratings[step.index] = step.rating;
    edit.comments[step.index] = step.comment;
  }
  els.open.hidden = true;
  els.editing.hidden = false;
  els.mode.textContent = "editing";
  els.rewriteBox.value = edit.rewrite;
  els.rewriteEdit.hidden = !edit.rewrite;
  root.dataset.editing = "yes";
  els.steps.replaceChildren(...shown.steps.map(editRow));
  paintEdit();
}

function editRow(step) {
  const li = el("li", { cls: "ws-step" });
  li.dataset.index = String(step.index);
  li.addEventListener("click", () => moveTo(step.index));
  const number = el("span", { text: String(step.index + 1), cls: "ws-step-no" });
  const rate = el("span", { cls: "ws-rate" });
  for (const [rating, key] of [
    [1, "1"],
    [0, "2"],
    [-1, "3"],
  ]) {
    const shownAs = RATINGS[rating];
    const button = el("button", { text: shownAs.symbol, cls: `ws-rate-btn rate-${shownAs.name}` });
    button.type = "button";
    button.tabIndex = -1;
    button.dataset.rating = String(rating);
    button.title = `${shownAs.name} (${key})`;
    button.setAttribute("aria-label", `${shownAs.name}, step ${step.index + 1}`);
    button.addEventListener("click", (event) => {
      event.stopPropagation();
      moveTo(step.index);
      rateCurrent(rating);
    });
    rate.append(button);
  }
  const body = el("div", { cls: "ws-step-body" });
  const text = el("div", { cls: "ws-text math" });
  renderMath(text, step.text);
  const box = el("textarea", { cls: "ws-comment-box" });
  box.rows = 2;
  box.maxLength = 10000;
  box.placeholder = "Comment on this step (Enter or Esc to leave)";
  box.value = edit.comments[step.index] || "";
  box.hidden = !box.value;
  box.setAttribute("aria-label", `Comment on step ${step.index + 1}`);
  box.addEventListener("input", () => {
    edit.comments[step.index] = box.value;
  });
  box.addEventListener("keydown", (event) => {
    if ((event.key === "Enter" && !event.shiftKey) || event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      box.hidden = !box.value.trim();
      box.blur();
    }
  });
  body.append(text, box);
  li.append(number, rate, body);
  return li;
}

function paintEdit() {
  for (const li of els.steps.children) {
    const index = Number(li.dataset.index);
    const rating = edit.ratings[index];
    li.classList.toggle("is-current", index === edit.current);
    li.dataset.rating = rating === undefined ? "" : String(rating);
    for (const button of li.querySelectorAll(".ws-rate-btn")) {
      button.classList.toggle("is-on", Number(button.dataset.rating) === rating);
    }
  }
}

function moveTo(index) {
  if (!edit) return;
  edit.current = Math.max(0, Math.min(shown.steps.length - 1, index));
  paintEdit();
  els.steps.children[edit.current].scrollIntoView({ block: "nearest" });
}

function rateCurrent(rating) {
  edit.ratings[shown.steps[edit.current].index] = rating;
  paintEdit();
  if (edit.current < shown.steps.length - 1) moveTo(edit.current + 1);
}

function rateRestCorrect() {
  for (const step of shown.steps) {
    if (edit.ratings[step.index] === undefined) edit.ratings[step.index] = 1;
  }
  paintEdit();
}

function openComment() {
  const box = els.steps.children[edit.current].querySelector(".ws-comment-box");
  box.hidden = false;
  box.focus();
}

function openRewrite() {
  els.rewriteEdit.hidden = false;
  els.rewriteBox.focus();
}

// The pass as the API takes it: in first_error mode grading stops at the first −1.
function editedPass() {
  const ratings = [];
  for (const step of shown.steps) {
    const rating = edit.ratings[step.index];
    if (rating === undefined) continue;
    ratings.push({ step: step.id, rating, comment: (edit.comments[step.index] || "").trim() });
    if (shown.labeling_mode === "first_error" && rating === -1) break;
  }
  return { ratings, rewrite: els.rewriteBox.value.trim() };
}

function cancelEdit() {
  if (!edit) return;
  els.message.hidden = true;
  showChain(shown);
}

// Texts written for a step whose rating the revision changes: a comment on a re-rated
// step, and the rewrite when the first −1 moved (it was written for the old one). Each
// is {kind, index, text}; index is where it was written (the rewrite: the old first −1).
function textsToAsk() {
  const asked = [];
  for (const step of shown.steps) {
    const comment = (edit.comments[step.index] || "").trim();
    if (comment && comment === (step.comment || "").trim() && edit.ratings[step.index] !== step.rating) {
      asked.push({ kind: "comment", index: step.index, text: comment });
    }
  }
  const rewrite = els.rewriteBox.value.trim();
  const firstNow = shown.steps.findIndex((step) => edit.ratings[step.index] === -1);
  if (rewrite && rewrite === (shown.rewrite || "").trim() && shown.first_error
      && firstNow !== -1 && firstNow !== shown.first_error - 1) {
    asked.push({ kind: "rewrite", index: shown.first_error - 1, text: rewrite, to: firstNow });
  }
  return asked;
}

// One row a text: keep it (a comment where it was written; the rewrite for the new first
// −1) or delete it. A comment is kept unless the annotator says otherwise; the rewrite is
// deleted unless they say it now belongs to the new first wrong step.
function askRow(item, number) {
  const li = el("li", { cls: "hist-text" });
  li.dataset.kind = item.kind;
  li.dataset.index = String(item.index);
  const what = item.kind === "comment" ? `Your comment on step ${item.index + 1}`
    : `Your rewrite of step ${item.index + 1}, the first −1 when you wrote it`;
  li.append(el("p", { text: `${what}:` }), el("blockquote", { text: item.text }));
  const choices = item.kind === "comment"
    ? [["keep", `Keep it on step ${item.index + 1}`], ["delete", "Delete it"]]
    : [["delete", "Delete it"], ["keep", `Keep it for step ${item.to + 1}, the first −1 now`]];
  choices.forEach(([value, text], position) => {
    const label = el("label", { cls: "hist-text-choice" });
    const input = el("input");
    input.type = "radio";
    input.name = `hist-text-${number}`;
    input.value = value;
    input.checked = position === 0;
    label.append(input, document.createTextNode(` ${text}`));
    li.append(label);
  });
  return li;
}

function askTexts(asked) {
  const dialog = $("hist-texts-dialog");
  $("hist-texts-list").replaceChildren(...asked.map(askRow));
  dialog.showModal();
  return new Promise((resolve) => {
    const done = (answer) => {
      $("hist-texts-save").onclick = $("hist-texts-back").onclick = dialog.oncancel = null;
      dialog.close();
      resolve(answer);
    };
    $("hist-texts-back").onclick = () => done(null);
    dialog.oncancel = () => done(null);
    $("hist-texts-save").onclick = () => done([...$("hist-texts-list").children].map((li) => ({
      kind: li.dataset.kind,
      index: Number(li.dataset.index),
      keep: li.querySelector("input:checked").value === "keep",
    })));
  });
}

// The pass to send once every asked text has its answer; null: back to editing.
async function passToSave() {
  const asked = textsToAsk();
  const body = editedPass();
  if (!asked.length) return body;
  const answers = await askTexts(asked);
  if (answers === null) return null;
  for (const answer of answers) {
    if (answer.kind === "rewrite") {
      if (answer.keep) body.rewrite_moved = true;
      else body.rewrite = "";
    } else if (!answer.keep) {
      // A step past the first −1 in first_error mode is not sent, nor its comment.
      const step = shown.steps[answer.index];
      const sent = body.ratings.find((item) => item.step === step.id);
      if (sent) sent.comment = "";
    }
  }
  return body;
}

async function saveEdit() {
  if (!edit || edit.saving) return;
  edit.saving = true;
  els.message.hidden = true;
  const body = await passToSave();
  if (body === null) {
    edit.saving = false;
    return;
  }
  let revised;
  try {
    revised = await api(`${config.api.chain}${shown.annotation}/revise/`, {
      method: "POST",
      body,
    });
  } catch (error) {
    edit.saving = false;
    if (error.status === 409) {
      // Closed meanwhile (a snapshot, a ruling, another tab): reopen it as it stands.
      showMessage(els.message, `Not saved: ${errorText(error)}`, "error");
      shownId = null;
      await route();
      els.message.hidden = false;
      return;
    }
    showMessage(els.message, `Not saved: ${errorText(error)}`, "error");
    return;
  }
  listLoaded = false;
  els.list.replaceChildren();
  nextCursor = null;
  shownId = String(revised.annotation);
  showChain(revised);
  window.history.replaceState(null, "", `#annotation-${revised.annotation}`);
  showMessage(els.message, "Saved: this revision replaces the pass you submitted, which is kept.", "ok");
}

function onKey(event) {
  if (root.dataset.state !== "chain" || event.ctrlKey || event.metaKey || event.altKey) return;
  const typing = ["TEXTAREA", "INPUT"].includes(document.activeElement.tagName);
  if (typing) {
    if (event.key === "Escape") document.activeElement.blur();
    return;
  }
  const key = event.key;
  if ($("hist-texts-dialog").open) return; // the dialog's own buttons answer it
  if (!edit) {
    if (key === "e" && shown && shown.can_revise) {
      event.preventDefault();
      startEdit();
    }
    return;
  }
  let handled = true;
  if (key === "j" || key === "ArrowDown") moveTo(edit.current + 1);
  else if (key === "k" || key === "ArrowUp") moveTo(edit.current - 1);
  else if (key in RATING_KEYS) rateCurrent(RATING_KEYS[key]);
  else if (key === "a") rateRestCorrect();
  else if (key === "c") openComment();
  else if (key === "w") openRewrite();
  else if (key === "Enter") saveEdit();
  else if (key === "Escape") cancelEdit();
  else handled = false;
  if (handled) event.preventDefault();
}

function setView(view) {
  root.dataset.state = view;
  root.setAttribute("aria-busy", "false");
  els.listView.hidden = view !== "list";
  els.chainView.hidden = view !== "chain";
}

// The hash decides the view: #annotation-<id> reopens that chain, anything else lists.
async function route() {
  els.message.hidden = true;
  const match = HASH.exec(window.location.hash);
  if (!match) {
    shownId = null;
    delete root.dataset.annotation;
    setView("list");
    if (!listLoaded) await loadPage();
    return;
  }
  const id = match[1];
  openedFromList = root.dataset.state === "list";
  if (shownId === id) {
    setView("chain");
    return;
  }
  root.dataset.state = "loading";
  let chain;
  try {
    chain = await api(`${config.api.chain}${id}/`);
  } catch (error) {
    setView("list");
    if (!listLoaded) await loadPage();
    showMessage(
      els.message,
      error.status === 404 ? "That chain is not in this history." : "Could not load the chain; try again.",
      "error",
    );
    return;
  }
  shownId = id;
  showChain(chain);
  setView("chain");
  window.scrollTo(0, 0);
}

$("hist-back").addEventListener("click", (event) => {
  event.preventDefault();
  // Back the way the browser would when the list is where the chain was opened from;
  // a chain opened from a link goes to the list.
  if (openedFromList) window.history.back();
  else window.location.hash = "";
});
els.more.addEventListener("click", loadPage);
$("hist-edit").addEventListener("click", startEdit);
$("hist-save").addEventListener("click", saveEdit);
$("hist-cancel").addEventListener("click", cancelEdit);
els.rewriteBox.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    event.preventDefault();
    event.stopPropagation();
    els.rewriteBox.blur();
  }
});
document.addEventListener("keydown", onKey);
window.addEventListener("hashchange", route);
route();
