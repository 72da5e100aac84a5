// The annotator workspace: grade each step of a leased chain from the keyboard.
//
// Everything goes through the REST API (api): next, submit, renew, skip,
// flag, my-stats. Text from imports is data: it is put in the page with textContent only,
// and KaTeX (trust off) turns $...$ into math afterwards; a formula it cannot parse stays
// as source text. Ratings, comments and times live in localStorage under the assignment
// id until the server confirms the submit, so a reload or a crash loses nothing.
//
// Verification: when the project shows machine pre-labels and the chain is not held out,
// each step carries the machine's verdict (step.prelabel, whose source is
// chain.prelabel_source). v accepts every verdict on the steps not rated yet; any step is
// overridden with the usual keys. The server decides from its own record of what it
// showed whether each rating confirmed or overrode a verdict: the page never says.
//
// Prefetch: once a chain is on screen, the page leases the next one (assignments/prefetch/,
// a second live lease) and builds its rows off-screen, KaTeX included. After the server
// confirms a submit (or a skip), the prepared rows are swapped in, with no round trip
// for the next chain and no math to typeset; then the page prefetches again. Both leases
// are renewed quietly.

import { $, el, api, renderMath, RATING_KEYS, showMessage, errorText } from "./steplab.js";
const config = JSON.parse(document.getElementById("workspace-config").textContent);
const FIRST_ERROR = config.labelingMode === "first_error";
const STORAGE_PREFIX = "steplab:assignment:";
const STORAGE_MAX_AGE_MS = 14 * 24 * 3600 * 1000;
const RATING_LABELS = { 1: "correct", 0: "ambiguous", "-1": "incorrect" };
const RATING_SYMBOLS = { 1: "+1", 0: "0", "-1": "−1" };
const SOURCE_NAMES = { judge: "Judge", monte_carlo: "Monte-Carlo", prm: "PRM", import: "Import" };
const SKIP_PRESETS = ["Outside my expertise", "Too long to grade now", "Problem is unclear"];
const FLAG_PRESETS = ["Garbled or truncated text", "Steps split wrongly", "Problem is missing"];

const root = $("workspace");
const els = {
  message: $("ws-message"),
  loading: $("ws-loading"),
  empty: $("ws-empty"),
  chain: $("ws-chain"),
  problem: $("problem-text"),
  referenceWrap: $("reference-wrap"),
  reference: $("reference-text"),
  steps: $("steps"),
  finalWrap: $("final-wrap"),
  final: $("final-text"),
  rewriteWrap: $("rewrite-wrap"),
  rewrite: $("rewrite"),
  rewriteStepNo: $("rewrite-step-no"),
  rewritePreview: $("rewrite-preview"),
  progress: $("progress-text"),
  prelabelNote: $("prelabel-note"),
  prelabelSource: $("prelabel-source"),
  acceptAll: $("btn-accept-prelabels"),
  submit: $("btn-submit"),
  raw: $("btn-raw"),
  help: $("help-dialog"),
  guidelines: $("guidelines-dialog"),
  reason: $("reason-dialog"),
  reasonForm: $("reason-form"),
  reasonTitle: $("reason-title"),
  reasonHelp: $("reason-help"),
  reasonPresets: $("reason-presets"),
  reasonInput: $("reason-input"),
};

// --- state ------------------------------------------------------------------------------

let lease = null; // {id, expires_at}
let chain = null; // the chain as the API sent it
let state = null; // what is persisted: ratings, comments, rewrite, times, cursor
let rows = []; // one {li, buttons, comment, commentBox} per step, in order
let busy = false; // a submit, skip or flag is in flight
let leaseLost = false;
// The raw-source toggle stays where the annotator left it, across chains and visits.
const RAW_KEY = "steplab:raw-source";
let showRaw = remembered(RAW_KEY) === "true";
let focusSince = performance.now(); // when the current step got the focus
let renewTimer = null;
let reasonAction = null; // "skip" or "flag" while the reason dialog is open
// The step the last rating key or button rated −1 or 0, until the annotator moves the
// cursor by hand (j, k, the arrows, a click on a step), rates again or undoes: c
// comments on that step, so "3 then c" says why the −1 although the cursor moved on.
// After a +1, c comments on the current step, as before a rating.
let justRated = null;
// The next chain, leased and rendered off-screen: {data, view} or null. ``prefetching``
// is the request in flight; ``canPrefetch`` turns false for good if the server has no
// prefetch endpoint. One prefetch per chain shown: an empty answer (204) waits for the next.
let prefetched = null;
let prefetching = null;
let canPrefetch = Boolean(config.api.prefetch);

function newState(assignmentId) {
  return {
    assignmentId,
    ratings: {}, // step id -> -1 | 0 | 1
    comments: {}, // step id -> text
    rewrite: "",
    stepMs: {}, // step id -> ms the step held the focus
    elapsedMs: 0, // visible time on this chain, summed over page loads
    current: 0,
    history: [], // undo stack: [{changes: [[stepId, previous rating or null]], current}]
    // One id per assignment: a submit repeated after a dropped answer changes nothing.
    requestId: `ws-${assignmentId}-${Math.random().toString(36).slice(2, 12)}`,
    savedAt: Date.now(),
  };
}

function storageKey(assignmentId) {
  return STORAGE_PREFIX + assignmentId;
}

// A setting kept in localStorage; none when storage is off (the page works the same).
function remembered(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

function remember(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    /* not kept across visits */
  }
}

function save() {
  if (!state) return;
  accrueTime();
  state.savedAt = Date.now();
  try {
    localStorage.setItem(storageKey(state.assignmentId), JSON.stringify(state));
  } catch {
    // Storage full or disabled: the work still submits, it just would not survive a reload.
    showMessage(els.message, "This browser will not keep your ratings across a reload.", "warn");
  }
}

function load(assignmentId) {
  try {
    const raw = localStorage.getItem(storageKey(assignmentId));
    return raw ? JSON.parse(raw) : null;
  } catch {
    return null;
  }
}

function forget(assignmentId) {
  try {
    localStorage.removeItem(storageKey(assignmentId));
  } catch {
    /* nothing to forget */
  }
}

function purgeOldDrafts() {
  try {
    const now = Date.now();
    for (let i = localStorage.length - 1; i >= 0; i -= 1) {
      const key = localStorage.key(i);
      if (!key || !key.startsWith(STORAGE_PREFIX)) continue;
      const draft = JSON.parse(localStorage.getItem(key) || "{}");
      if (!draft.savedAt || now - draft.savedAt > STORAGE_MAX_AGE_MS) {
        localStorage.removeItem(key);
      }
    }
  } catch {
    /* best effort */
  }
}

// Time: the chain's clock runs while the page is visible; each step's clock while it
// is the current step and the page is visible.
let clockSince = performance.now();
function accrueTime() {
  if (!state || document.hidden) return;
  const now = performance.now();
  state.elapsedMs += now - clockSince;
  clockSince = now;
  const step = chain && chain.steps[state.current];
  if (step) state.stepMs[step.id] = (state.stepMs[step.id] || 0) + (now - focusSince);
  focusSince = now;
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    accrueTime();
    save();
  } else {
    clockSince = performance.now();
    focusSince = clockSince;
    if (lease && !leaseLost) renew();
  }
});

// --- rules of the labeling mode ----------------------------------------------------------

// Index of the first step rated -1, or -1 if none.
function firstErrorIndex() {
  if (!chain) return -1;
  return chain.steps.findIndex((step) => state.ratings[step.id] === -1);
}

// The steps the mode asks for: all of them, or in first_error mode those up to and
// including the first -1.
function requiredCount() {
  const first = FIRST_ERROR ? firstErrorIndex() : -1;
  return first >= 0 ? first + 1 : chain.steps.length;
}

function isAsked(index) {
  return index < requiredCount();
}

function unratedIndexes() {
  const out = [];
  for (let i = 0; i < requiredCount(); i += 1) {
    if (state.ratings[chain.steps[i].id] === undefined) out.push(i);
  }
  return out;
}

function isComplete() {
  return chain !== null && unratedIndexes().length === 0;
}

// --- rendering ---------------------------------------------------------------------------

function typeset(element, text) {
  renderMath(element, text, showRaw);
}

// Builds the DOM of a chain without touching the page: the problem, reference and final
// answer texts and one row per step, math typeset. Called for the chain on screen and,
// ahead of time, for the prefetched one; ``mountView`` puts it on the page.
function buildView(data) {
  const view = { raw: showRaw, assignmentId: data.assignment.id };
  const shown = data.chain;
  view.problem = el("div");
  typeset(view.problem, shown.problem.text);
  view.reference = null;
  if (shown.problem.reference_answer) {
    view.reference = el("span");
    typeset(view.reference, shown.problem.reference_answer);
  }
  view.final = null;
  if (shown.final_answer && shown.final_answer.trim()) {
    view.final = el("span");
    typeset(view.final, shown.final_answer);
  }
  view.fragment = document.createDocumentFragment();
  const anyVerdict = shown.steps.some((s) => s.prelabel !== null && s.prelabel !== undefined);
  view.rows = shown.steps.map((step, index) => {
    const li = el("li", { cls: "ws-step" });
    li.dataset.index = String(index);
    li.dataset.stepId = String(step.id);
    li.addEventListener("click", () => moveTo(index));

    const number = el("span", { text: String(index + 1), cls: "ws-step-no" });
    const buttons = el("span", { cls: "ws-rate" });
    const buttonsByRating = {};
    for (const [rating, symbol, key] of [
      [1, "+1", "1"],
      [0, "0", "2"],
      [-1, "−1", "3"],
    ]) {
      const button = el("button", { text: symbol, cls: `ws-rate-btn rate-${RATING_LABELS[rating]}` });
      button.type = "button";
      button.tabIndex = -1; // the keyboard drives the page, not the tab order
      button.title = `${RATING_LABELS[rating]} (${key})`;
      button.setAttribute("aria-label", `${RATING_LABELS[rating]}, step ${index + 1}`);
      button.addEventListener("click", (event) => {
        event.stopPropagation();
        moveTo(index);
        rate(rating);
      });
      buttons.append(button);
      buttonsByRating[rating] = button;
    }
    // Comment by touch or mouse: this step's own comment button (c on the keyboard).
    const commentButton = el("button", { text: "✎", cls: "ws-comment-btn" });
    commentButton.type = "button";
    commentButton.tabIndex = -1;
    commentButton.title = "Comment on this step (c)";
    commentButton.setAttribute("aria-label", `Comment on step ${index + 1}`);
    commentButton.addEventListener("click", (event) => {
      event.stopPropagation();
      openComment(index);
    });
    buttons.append(commentButton);
    // The machine's verdict on this step, when shown: text only, never markup. A step
    // without one, in a chain with verdicts, keeps the place empty so the texts align.
    let machine = null;
    const name = SOURCE_NAMES[shown.prelabel_source] || shown.prelabel_source;
    if (anyVerdict && (step.prelabel === null || step.prelabel === undefined)) {
      // The same words, unseen: as wide as the verdicts beside it, whatever the source.
      const empty = el("span", { cls: "ws-prelabel is-empty" });
      empty.setAttribute("aria-hidden", "true");
      empty.append(el("span", { text: name, cls: "ws-prelabel-source" }),
        el("span", { text: RATING_SYMBOLS[-1], cls: "ws-prelabel-value" }));
      buttons.append(empty);
    } else if (anyVerdict) {
      machine = el("span", { cls: `ws-prelabel rate-${RATING_LABELS[step.prelabel]}` });
      machine.append(
        el("span", { text: name, cls: "ws-prelabel-source" }),
        el("span", { text: RATING_SYMBOLS[step.prelabel], cls: "ws-prelabel-value" }),
      );
      machine.title = `${name} says ${RATING_LABELS[step.prelabel]}; v accepts every verdict`;
      machine.setAttribute("aria-label", `${name} verdict: ${RATING_LABELS[step.prelabel]}`);
      buttons.append(machine);
    }
    const body = el("div", { cls: "ws-step-body" });
    const text = el("div", { cls: "ws-text math" });
    typeset(text, step.text);
    const comment = el("p", { cls: "ws-comment" });
    const commentBox = el("textarea", { cls: "ws-comment-box" });
    commentBox.rows = 2;
    commentBox.maxLength = 10000;
    commentBox.placeholder = "Comment on this step (Enter or Esc to leave)";
    commentBox.hidden = true;
    commentBox.addEventListener("keydown", (event) => {
      if ((event.key === "Enter" && !event.shiftKey) || event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        closeComment(index);
      }
    });
    commentBox.addEventListener("blur", () => closeComment(index));
    body.append(text, comment, commentBox);
    li.append(number, buttons, body);
    view.fragment.append(li);
    return { li, text, buttons: buttonsByRating, comment, commentBox, machine };
  });
  return view;
}

// Puts a built view on the page (moving its nodes, so a view mounts once).
function mountView(view) {
  els.problem.replaceChildren(...view.problem.childNodes);
  els.referenceWrap.hidden = !view.reference;
  if (view.reference) els.reference.replaceChildren(...view.reference.childNodes);
  els.finalWrap.hidden = !view.final;
  if (view.final) els.final.replaceChildren(...view.final.childNodes);
  rows = view.rows;
  els.steps.replaceChildren(view.fragment);
  els.prelabelNote.hidden = !hasPrelabels();
  if (hasPrelabels()) {
    const source = chain.prelabel_source;
    els.prelabelSource.textContent = SOURCE_NAMES[source] || source;
  }
  els.rewrite.value = state.rewrite || "";
  typeset(els.rewritePreview, els.rewrite.value);
  // The raw-source toggle moved while the view waited: typeset it the current way.
  if (view.raw !== showRaw) rerenderTexts();
  refresh();
}

// Re-renders the math of every text on the page (raw-source toggle).
function rerenderTexts() {
  if (!chain) return;
  typeset(els.problem, chain.problem.text);
  if (chain.problem.reference_answer) typeset(els.reference, chain.problem.reference_answer);
  if (chain.final_answer) typeset(els.final, chain.final_answer);
  chain.steps.forEach((step, index) => typeset(rows[index].text, step.text));
  typeset(els.rewritePreview, els.rewrite.value);
}

// Brings the classes, progress and buttons in line with the state.
function refresh() {
  const required = requiredCount();
  const first = firstErrorIndex();
  chain.steps.forEach((step, index) => {
    const row = rows[index];
    const rating = state.ratings[step.id];
    row.li.classList.toggle("is-current", index === state.current);
    row.li.classList.toggle("is-comment-target", index === commentTarget());
    row.li.classList.toggle("is-dimmed", index >= required);
    row.li.dataset.rating = rating === undefined ? "" : String(rating);
    if (row.machine) {
      // How this rating stands to the verdict, as the server will record it.
      let verdict = "";
      if (rating !== undefined) verdict = rating === step.prelabel ? "confirmed" : "overridden";
      row.li.dataset.prelabel = verdict;
    }
    for (const [value, button] of Object.entries(row.buttons)) {
      const on = rating !== undefined && Number(value) === rating;
      button.classList.toggle("is-on", on);
      button.setAttribute("aria-pressed", on ? "true" : "false");
    }
    const comment = state.comments[step.id] || "";
    row.li.classList.toggle("has-comment", Boolean(comment));
    row.comment.textContent = comment;
    row.comment.hidden = !comment || !row.commentBox.hidden;
  });
  // A rewrite corrects the first incorrect step, in either mode: the box opens under
  // that step, starting as its text until the annotator writes their own.
  const showRewrite = first >= 0;
  els.rewriteWrap.hidden = !showRewrite;
  if (showRewrite) {
    els.rewriteStepNo.textContent = String(first + 1);
    const li = rows[first].li;
    if (els.rewriteWrap.parentElement !== li) li.append(els.rewriteWrap);
    if (!state.rewrite && els.rewrite.value !== chain.steps[first].text) {
      els.rewrite.value = chain.steps[first].text;
      typeset(els.rewritePreview, els.rewrite.value);
    }
  }
  const rated = required - unratedIndexes().length;
  const complete = isComplete();
  els.progress.textContent = complete
    ? `All ${required} needed steps rated. Enter submits.`
    : `${rated} of ${required} steps rated`;
  els.submit.disabled = !complete || busy || leaseLost;
  const openVerdicts = prelabeledUnrated().length;
  els.acceptAll.hidden = !hasPrelabels();
  els.acceptAll.disabled = openVerdicts === 0 || leaseLost;
  root.dataset.complete = complete ? "true" : "false";
}

function scrollCurrentIntoView() {
  const row = rows[state.current];
  if (row) row.li.scrollIntoView({ block: "nearest" });
}

function setView(view) {
  root.dataset.state = view;
  root.setAttribute("aria-busy", view === "loading" ? "true" : "false");
  els.loading.hidden = view !== "loading";
  els.empty.hidden = view !== "empty";
  els.chain.hidden = view !== "ready";
}

// --- actions -----------------------------------------------------------------------------

function moveTo(index) {
  if (!chain) return;
  const clamped = Math.max(0, Math.min(chain.steps.length - 1, index));
  justRated = null;
  if (clamped === state.current) {
    refresh();
    return;
  }
  accrueTime();
  state.current = clamped;
  refresh();
  scrollCurrentIntoView();
  save();
}

function nextUnratedAfter(index) {
  const open = unratedIndexes();
  return open.find((i) => i > index) ?? open[0];
}

function applyChanges(changes) {
  for (const [stepId, rating] of changes) {
    if (rating === null) delete state.ratings[stepId];
    else state.ratings[stepId] = rating;
  }
}

function rate(rating) {
  if (!chain || leaseLost) return;
  if (!isAsked(state.current)) {
    showMessage(els.message, "Grading stops at the first incorrect step; change that −1 to go on.");
    return;
  }
  const step = chain.steps[state.current];
  const previous = state.ratings[step.id];
  state.history.push({ changes: [[step.id, previous ?? null]], current: state.current });
  applyChanges([[step.id, rating]]);
  const next = nextUnratedAfter(state.current);
  accrueTime();
  justRated = rating === 1 ? null : state.current;
  if (next !== undefined) state.current = next;
  refresh();
  scrollCurrentIntoView();
  save();
}

function rateRemainingCorrect() {
  if (!chain || leaseLost) return;
  const open = unratedIndexes();
  if (open.length === 0) return;
  const changes = open.map((i) => [chain.steps[i].id, null]);
  state.history.push({ changes, current: state.current });
  applyChanges(open.map((i) => [chain.steps[i].id, 1]));
  accrueTime();
  justRated = null;
  state.current = open[open.length - 1];
  refresh();
  scrollCurrentIntoView();
  save();
}

function hasPrelabels() {
  if (!chain || !chain.prelabel_source) return false;
  return chain.steps.some((s) => s.prelabel !== null && s.prelabel !== undefined);
}

// The steps still asked for and not rated that carry a machine verdict.
function prelabeledUnrated() {
  if (!hasPrelabels()) return [];
  return unratedIndexes().filter((i) => {
    const verdict = chain.steps[i].prelabel;
    return verdict !== null && verdict !== undefined;
  });
}

// v: every verdict shown on a step not rated yet becomes its rating, step by step, so
// in first_error mode a −1 verdict ends grading there as a typed −1 would. Ratings
// already given (overrides) stay. One undo takes it all back.
function acceptPrelabels() {
  if (!chain || leaseLost) return;
  if (!hasPrelabels()) {
    showMessage(els.message, "This chain shows no machine verdicts.");
    return;
  }
  const changes = [];
  for (let i = 0; i < chain.steps.length && isAsked(i); i += 1) {
    const step = chain.steps[i];
    if (state.ratings[step.id] !== undefined) continue;
    if (step.prelabel === null || step.prelabel === undefined) continue;
    changes.push([step.id, null]);
    applyChanges([[step.id, step.prelabel]]);
  }
  if (changes.length === 0) {
    showMessage(els.message, "Every step with a machine verdict is rated already.");
    return;
  }
  state.history.push({ changes, current: state.current });
  accrueTime();
  justRated = null;
  const open = unratedIndexes();
  state.current = open.length ? open[0] : requiredCount() - 1;
  refresh();
  scrollCurrentIntoView();
  save();
}

function undo() {
  if (!chain || leaseLost) return;
  const entry = state.history.pop();
  if (!entry) {
    showMessage(els.message, "Nothing to undo.");
    return;
  }
  applyChanges(entry.changes);
  accrueTime();
  justRated = null;
  state.current = entry.current;
  refresh();
  scrollCurrentIntoView();
  save();
}

// The step c comments on: the one just rated −1 or 0 (the cursor has moved past it),
// else the current one. Marked on the page (is-comment-target), so c never surprises.
function commentTarget() {
  return justRated !== null && justRated < rows.length ? justRated : state.current;
}

function openComment(index = commentTarget()) {
  if (!chain) return;
  const row = rows[index];
  row.commentBox.value = state.comments[chain.steps[index].id] || "";
  row.commentBox.hidden = false;
  row.comment.hidden = true;
  row.commentBox.focus();
}

function closeComment(index) {
  const row = rows[index];
  if (!row || row.commentBox.hidden) return;
  const text = row.commentBox.value.trim();
  const stepId = chain.steps[index].id;
  if (text) state.comments[stepId] = text;
  else delete state.comments[stepId];
  row.commentBox.hidden = true;
  if (document.activeElement === row.commentBox) row.commentBox.blur();
  refresh();
  save();
}

// The corrected step, or "" when there is none to send: no -1, nothing written, or the
// step's own text left as it was.
function rewriteToSend() {
  const first = firstErrorIndex();
  const text = (state.rewrite || "").trim();
  return first >= 0 && text !== chain.steps[first].text.trim() ? text : "";
}

function openRewrite() {
  if (els.rewriteWrap.hidden) {
    showMessage(els.message, "The corrected step follows a −1 rating.");
    return;
  }
  els.rewrite.focus();
  // Still the step as it was: selected, so typing replaces it and arrows edit it.
  if (!state.rewrite) els.rewrite.select();
}

els.rewrite.addEventListener("input", () => {
  if (!state) return;
  state.rewrite = els.rewrite.value;
  typeset(els.rewritePreview, els.rewrite.value);
  save();
});
// A click in the box is not a click on the step row around it.
els.rewriteWrap.addEventListener("click", (event) => event.stopPropagation());
els.rewrite.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    event.preventDefault();
    event.stopPropagation();
    els.rewrite.blur();
  } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    event.stopPropagation();
    els.rewrite.blur();
    submit();
  }
});

function showRawState() {
  els.raw.setAttribute("aria-pressed", showRaw ? "true" : "false");
  els.raw.classList.toggle("is-on", showRaw);
}

function toggleRaw() {
  showRaw = !showRaw;
  remember(RAW_KEY, showRaw ? "true" : "false");
  showRawState();
  rerenderTexts();
}

// --- talking to the server ---------------------------------------------------------------

function stopRenewing() {
  if (renewTimer !== null) clearInterval(renewTimer);
  renewTimer = null;
}

function startRenewing() {
  stopRenewing();
  // Half the lease: one missed renewal (a dropped request) still leaves time for the next.
  const every = Math.max(5, config.leaseSeconds / 2) * 1000;
  renewTimer = setInterval(renew, every);
}

async function renew() {
  renewPrefetched();
  if (!lease || leaseLost) return;
  const id = lease.id;
  try {
    const data = await api(`${config.api.assignment}${id}/renew/`, { method: "POST" });
    if (lease && lease.id === id) lease.expires_at = data.expires_at;
  } catch (error) {
    if (error.status === 409 || error.status === 404) markLeaseLost(error);
    // Network errors: quiet; the next tick tries again, and the ratings are stored.
  }
}

// The prefetched lease is renewed with the current one. If it was lost meanwhile it is
// dropped without a word: nothing was typed on it, and the next submit leases anew.
async function renewPrefetched() {
  if (!prefetched) return;
  const held = prefetched;
  try {
    const data = await api(`${config.api.assignment}${held.data.assignment.id}/renew/`, {
      method: "POST",
    });
    held.data.assignment.expires_at = data.expires_at;
  } catch (error) {
    if ((error.status === 409 || error.status === 404) && prefetched === held) {
      prefetched = null;
      delete root.dataset.prefetched;
    }
  }
}

// Leases the chain after the current one and builds its view off-screen. Quiet: when it
// fails, the next submit asks for a chain the ordinary way (submit-and-next).
function prefetch() {
  if (!canPrefetch || prefetched || prefetching || !lease) return prefetching;
  const current = lease.id;
  prefetching = (async () => {
    try {
      const data = await api(config.api.prefetch, { method: "POST" });
      // null (204): nothing left beyond the chain on screen.
      const id = data && data.assignment.id;
      if (data !== null && lease && id !== current && id !== lease.id) {
        prefetched = { data, view: buildView(data) };
        root.dataset.prefetched = String(id); // for people's tools and the tests
      }
    } catch (error) {
      if (error.status === 404 || error.status === 405) canPrefetch = false;
    } finally {
      prefetching = null;
    }
  })();
  return prefetching;
}

// Shows the prefetched chain if there is one; returns whether it did.
function showPrefetched() {
  const next = prefetched;
  prefetched = null;
  delete root.dataset.prefetched;
  if (!next) return false;
  showLease(next.data, next.view);
  return true;
}

function markLeaseLost(error) {
  leaseLost = true;
  stopRenewing();
  root.dataset.lease = "lost";
  const detail = error && error.body && error.body.detail ? ` (${error.body.detail})` : "";
  showMessage(
    els.message,
    `Your lease on this chain was lost${detail}. Your ratings stay on screen; ` +
      "press n for the next chain.",
    "error",
  );
  refresh();
}

async function refreshStats() {
  try {
    const stats = await api(config.api.stats);
    $("stat-today").textContent = String(stats.annotated_today);
    $("stat-total").textContent = String(stats.annotated_total);
    // The empty page sums up the day: chains and steps, and gold accuracy when shown.
    const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
    $("ws-empty-summary").textContent =
      `Today: ${plural(stats.annotated_today, "chain")}, ` +
      `${plural(stats.steps_today || 0, "step")} rated; ${stats.annotated_total} in total.`;
    $("ws-empty-summary").hidden = false;
    // Gold and screening come from the gold chains feature; shown only when present.
    const gold = stats.gold || null;
    const hasGold = Boolean(gold && gold.chains > 0 && gold.step_accuracy !== null);
    $("stat-gold-wrap").hidden = !hasGold;
    if (hasGold) {
      $("stat-gold").textContent = `${Math.round(gold.step_accuracy * 100)} %`;
      $("ws-empty-summary").textContent +=
        ` Step accuracy on gold chains: ${Math.round(gold.step_accuracy * 100)} %.`;
      $("stat-gold-wrap").title =
        `Step accuracy over ${gold.chains} gold chain${gold.chains === 1 ? "" : "s"}` +
        (gold.first_error_match === null || gold.first_error_match === undefined
          ? ""
          : `; first error found as in the key on ` +
            `${Math.round(gold.first_error_match * 100)} %`);
    }
    showScreening(stats.screening || null);
  } catch {
    /* counts are a nicety; the work goes on without them */
  }
}

// Screening (a lead's test before real work): says where the annotator stands. A
// failed or waiting screening is why the queue is empty, so the empty page says it too.
function showScreening(screening) {
  const box = $("ws-screening");
  const show = Boolean(screening && screening.status !== "passed" && screening.message);
  box.hidden = !show;
  box.className = `ws-screening ${screening ? screening.status : ""}`;
  if (!show) {
    $("ws-empty-screening").hidden = true;
    return;
  }
  box.textContent = screening.message;
  $("ws-empty-screening").textContent = screening.message;
  $("ws-empty-screening").hidden = false;
}

function finishMeasure() {
  // User Timing marks: the submit-to-next-chain latency shows in the browser's
  // performance tools (and the benchmark reads it).
  // It ends in the animation frame that paints the new chain.
  if (!performance.getEntriesByName("steplab:submit", "mark").length) return;
  requestAnimationFrame(() => {
    performance.mark("steplab:rendered");
    performance.measure("steplab:submit-to-next", "steplab:submit", "steplab:rendered");
    performance.clearMarks("steplab:submit");
  });
}

async function loadNext() {
  stopRenewing();
  leaseLost = false;
  delete root.dataset.lease;
  let data;
  try {
    data = await api(config.api.next, { method: "POST" });
  } catch (error) {
    setView(chain ? "ready" : "loading");
    const why = error.status === 503 ? "The queue is busy" : "Could not reach the server";
    showMessage(els.message, `${why}; trying again in a few seconds.`, "warn", { sticky: true });
    setTimeout(loadNext, 3000);
    return;
  }
  showLease(data);
}

// Puts a lease from next, submit-and-next or prefetch on screen, with its view when it
// was built ahead; null is the empty queue.
function showLease(data, view = null) {
  leaseLost = false;
  delete root.dataset.lease;
  if (data === null) {
    delete root.dataset.assignment;
    lease = null;
    chain = null;
    state = null;
    rows = [];
    setView("empty");
    refreshStats();
    finishMeasure();
    return;
  }
  if (prefetched && prefetched.data.assignment.id === data.assignment.id) {
    // The server handed back the lease prefetched earlier: use the view built for it.
    view = view || prefetched.view;
    prefetched = null;
    delete root.dataset.prefetched;
  }
  lease = data.assignment;
  chain = data.chain;
  justRated = null;
  state = load(lease.id) || newState(lease.id);
  state.current = Math.min(state.current || 0, chain.steps.length - 1);
  const restored = Object.keys(state.ratings).length > 0 || state.rewrite;
  clockSince = performance.now();
  focusSince = clockSince;
  mountView(view && view.assignmentId === lease.id ? view : buildView(data));
  setView("ready");
  root.dataset.assignment = String(lease.id);
  scrollCurrentIntoView();
  finishMeasure();
  if (restored) showMessage(els.message, "Your unsaved ratings on this chain were restored.");
  save();
  startRenewing();
  // After the browser has painted this chain, lease and build the next one.
  setTimeout(prefetch, 0);
}

async function submit() {
  if (!chain || busy) return;
  if (leaseLost) {
    showMessage(els.message, "This lease is lost; press n for the next chain.", "error");
    return;
  }
  if (!isComplete()) {
    const open = unratedIndexes();
    showMessage(els.message, `${open.length} step${open.length === 1 ? "" : "s"} still to rate.`);
    moveTo(open[0]);
    return;
  }
  performance.clearMarks("steplab:submit");
  performance.mark("steplab:submit");
  accrueTime();
  const required = requiredCount();
  const payload = {
    ratings: chain.steps.slice(0, required).map((step) => ({
      step: step.id,
      rating: state.ratings[step.id],
      comment: state.comments[step.id] || "",
      duration_ms: Math.round(state.stepMs[step.id] || 0),
    })),
    rewrite: rewriteToSend(),
    duration_ms: Math.round(state.elapsedMs),
    request_id: state.requestId,
  };
  busy = true;
  refresh();
  const id = lease.id;
  // A prefetch still in flight lands first, so the answer below is never a third lease.
  if (prefetching) await prefetching;
  // With the next chain prefetched and built, only the submit goes to the server;
  // otherwise submit and lease the next chain in one round trip (submit-and-next).
  const swap = prefetched !== null;
  const action = swap ? "submit" : "submit-and-next";
  let result;
  try {
    result = await api(`${config.api.assignment}${id}/${action}/`, {
      method: "POST",
      body: payload,
    });
  } catch (error) {
    busy = false;
    performance.clearMarks("steplab:submit");
    if (error.status === 409 && error.body && error.body.code === "lease_closed") {
      // Submitted already (another tab, or an answer that got lost): nothing to keep.
      forget(id);
      await loadNext();
      return;
    }
    if (error.status === 409 || error.status === 404) {
      markLeaseLost(error);
      return;
    }
    if (error.status === 400) {
      showMessage(els.message, `The server refused the ratings: ${errorText(error)}`, "error");
    } else {
      showMessage(
        els.message,
        "Could not reach the server. Your ratings are kept in this browser; " +
          "press Enter to try again.",
        "error",
      );
    }
    refresh();
    return;
  }
  busy = false;
  forget(id);
  showMessage(els.message, "");
  stopRenewing();
  if (swap && showPrefetched()) {
    /* the prepared chain is on screen */
  } else if (swap || result.next_status === "busy") await loadNext();
  else showLease(result.next);
  refreshStats();
}

function openReason(action) {
  if (!chain || busy) return;
  reasonAction = action;
  const skip = action === "skip";
  els.reasonTitle.textContent = skip ? "Skip this chain" : "Flag a broken chain";
  els.reasonHelp.textContent = skip
    ? "You will not see this chain again. Type a reason, or pick one with ↓ ↑."
    : "The chain leaves the queue until a lead looks at it. Type what is broken, or pick " +
      "with ↓ ↑.";
  const presets = skip ? SKIP_PRESETS : FLAG_PRESETS;
  els.reasonPresets.replaceChildren(
    ...presets.map((text) => {
      const button = el("button", { text, cls: "button ws-preset" });
      button.type = "button";
      button.addEventListener("click", () => {
        els.reasonInput.value = text;
        els.reasonInput.focus();
      });
      return button;
    }),
  );
  els.reasonInput.value = "";
  els.reason.showModal();
  els.reasonInput.focus();
}

els.reasonInput.addEventListener("keydown", (event) => {
  // The arrows cycle through the common reasons while the box is empty or holds one;
  // every printable key, digits included, stays text ("3 steps are merged").
  if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
  const presets = reasonAction === "skip" ? SKIP_PRESETS : FLAG_PRESETS;
  const at = presets.indexOf(els.reasonInput.value);
  if (els.reasonInput.value !== "" && at < 0) return;
  event.preventDefault();
  const step = event.key === "ArrowDown" ? 1 : -1;
  const next = at < 0 ? (step > 0 ? 0 : presets.length - 1) : at + step;
  els.reasonInput.value = presets[(next + presets.length) % presets.length];
});
$("reason-cancel").addEventListener("click", () => els.reason.close());
els.reasonForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const reason = els.reasonInput.value.trim();
  if (!reason) {
    els.reasonInput.focus();
    return;
  }
  els.reason.close();
  giveBack(reasonAction, reason);
});

async function giveBack(action, reason) {
  if (!lease || busy) return;
  busy = true;
  const id = lease.id;
  try {
    await api(`${config.api.assignment}${id}/${action}/`, {
      method: "POST",
      body: { reason },
    });
  } catch (error) {
    busy = false;
    if (error.status === 409 || error.status === 404) markLeaseLost(error);
    else showMessage(els.message, `Could not ${action} this chain; try again.`, "error");
    return;
  }
  busy = false;
  forget(id);
  showMessage(els.message, action === "skip" ? "Skipped." : "Flagged; thank you.");
  if (prefetching) await prefetching;
  if (!showPrefetched()) await loadNext();
  refreshStats();
}

// --- keyboard ----------------------------------------------------------------------------

function anyDialogOpen() {
  return els.help.open || els.guidelines.open || els.reason.open;
}

function toggleDialog(dialog) {
  if (dialog.open) dialog.close();
  else dialog.showModal();
}

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  const typing =
    target instanceof HTMLTextAreaElement ||
    target instanceof HTMLInputElement ||
    (target instanceof HTMLElement && target.isContentEditable);
  if (typing || anyDialogOpen()) {
    if (event.key === "?" && els.help.open) {
      event.preventDefault();
      els.help.close();
    }
    return;
  }
  const key = event.key;
  let handled = true;
  if (key === "?") toggleDialog(els.help);
  else if (key === "g") toggleDialog(els.guidelines);
  else if (key === "r") toggleRaw();
  else if (root.dataset.state === "empty" && key === "n") loadNext();
  else if (!chain) handled = false;
  else if (key === "j" || key === "ArrowDown") moveTo(state.current + 1);
  else if (key === "k" || key === "ArrowUp") moveTo(state.current - 1);
  else if (key in RATING_KEYS) rate(RATING_KEYS[key]);
  else if (key === "a") rateRemainingCorrect();
  else if (key === "v") acceptPrelabels();
  else if (key === "u") undo();
  else if (key === "c") openComment();
  else if (key === "w") openRewrite();
  else if (key === "Enter") submit();
  else if (key === "s") openReason("skip");
  else if (key === "f") openReason("flag");
  else if (key === "n" && leaseLost) {
    forget(lease.id);
    showMessage(els.message, "");
    loadNext();
  } else handled = false;
  if (handled) event.preventDefault();
});

// The mouse works too. A clicked button gives the focus back, or the next Enter would
// press it again instead of submitting.
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("button") : null;
  if (button && !button.closest("dialog")) button.blur();
});
els.submit.addEventListener("click", submit);
$("btn-skip").addEventListener("click", () => openReason("skip"));
els.acceptAll.addEventListener("click", acceptPrelabels);
$("btn-flag").addEventListener("click", () => openReason("flag"));
$("btn-help").addEventListener("click", () => toggleDialog(els.help));
$("btn-guidelines").addEventListener("click", () => toggleDialog(els.guidelines));
$("btn-check-again").addEventListener("click", () => loadNext());
els.raw.addEventListener("click", toggleRaw);
showRawState();
window.addEventListener("pagehide", save);

purgeOldDrafts();
loadNext();
refreshStats();
