// The review page: chains where annotators disagree (worst first), every current label
// side by side per step, and an adjudication form; every revision with who and when.
//
// Each step shows majority vote's label and Dawid-Skene's (with its posterior probability)
// side by side, the project's method marked "used"; "take consensus" takes that one's.
//
// Everything goes through the review API (api): disagreements/, chains/{id}/
// labels/ and chains/{id}/adjudicate/. Text from imports and from people (problems, steps,
// comments, notes, usernames) is put in the page with textContent only; KaTeX (trust off)
// turns $...$ into math afterwards, and a formula it cannot parse stays as source text.

import {
  $,
  el,
  api,
  renderMath,
  machineFirstError,
  machineText,
  machineTitle,
  MACHINE_SHORT,
  formatWhen,
  RATING_KEYS,
  showMessage,
  NONE,
} from "./steplab.js";
const config = JSON.parse(document.getElementById("review-config").textContent);
const SYMBOL = { 1: "+1", 0: "0", "-1": "−1" };

const root = $("review");
const els = {
  message: $("rv-message"),
  list: $("rv-list"),
  count: $("rv-count"),
  empty: $("rv-empty"),
  more: $("rv-more"),
  chain: $("rv-chain"),
  chainId: $("rv-chain-id"),
  problem: $("rv-problem"),
  finalWrap: $("rv-final-wrap"),
  final: $("rv-final"),
  referenceWrap: $("rv-reference-wrap"),
  reference: $("rv-reference"),
  machine: $("rv-machine"),
  form: $("rv-form"),
  grid: $("rv-grid"),
  note: $("rv-note"),
  submit: $("rv-submit"),
  progress: $("rv-progress"),
  history: $("rv-history"),
};

let items = []; // disagreement rows, worst first
let nextPage = null; // URL of the next page of disagreements
let selected = -1; // index into items
let labels = null; // the chain's labels as the API sent them
let choices = {}; // step id -> the lead's ruling
let current = 0; // the step the keyboard acts on
let rows = []; // one {tr, buttons} per step
let busy = false;
// A save that would leave disputed steps without a ruling asks once first: set after the
// first Save (or Enter), cleared by any new ruling or another chain.
let partialAsked = false;

const when = formatWhen;

// --- the list of disputed chains ----------------------------------------------------------

// The first page of the list, with the filters chosen above it.
function listUrl() {
  const params = new URLSearchParams();
  if ($("rv-annotator").value) params.set("annotator", $("rv-annotator").value);
  if ($("rv-agreement").value !== "1") params.set("max_agreement", $("rv-agreement").value);
  if ($("rv-resolved").checked) params.set("include_resolved", "true");
  const query = params.toString();
  return query ? `${config.api.disagreements}?${query}` : config.api.disagreements;
}

let listRequest = 0; // the newest list load; an older answer arriving late is dropped
let listCount = 0; // the chains the list's filters match, as the API counted them

// Whether this load's answer was applied (false: a newer load superseded it).
async function loadList(url = listUrl(), append = false) {
  const ticket = ++listRequest;
  const page = await api(url);
  if (ticket !== listRequest) return false;
  items = append ? items.concat(page.results) : page.results;
  nextPage = page.next;
  listCount = page.count;
  els.count.textContent = `(${listCount})`;
  renderList();
  return true;
}

function renderList() {
  els.empty.hidden = items.length > 0;
  els.more.hidden = !nextPage;
  els.list.replaceChildren(
    ...items.map((item, index) => {
      const li = el("li");
      const button = el("button", { cls: "rv-item" });
      button.type = "button";
      button.dataset.chain = String(item.chain);
      button.classList.toggle("is-current", index === selected);
      const problem = el("span", { cls: "rv-problem math" });
      renderMath(problem, item.problem);
      button.append(
        problem,
        el("span", { text: `chain ${item.chain} · ${item.disagreeing_steps} disputed step` +
            `${item.disagreeing_steps === 1 ? "" : "s"} of ${item.step_count} · ` +
            `${item.annotators} annotators${listStatus(item)}`, cls: "rv-meta" }),
      );
      button.addEventListener("click", () => select(index));
      li.append(button);
      return li;
    }),
  );
}

async function select(index) {
  if (index < 0 || index >= items.length) return;
  selected = index;
  renderList();
  const chainId = items[index].chain;
  history.replaceState(null, "", `#chain=${chainId}`);
  await loadChain(chainId);
}

// --- one chain ---------------------------------------------------------------------------

let chainRequest = 0; // the newest chain load; an older answer arriving late is dropped

async function loadChain(chainId) {
  const ticket = ++chainRequest;
  let loaded;
  try {
    loaded = await api(`${config.api.chain}${chainId}/labels/`);
  } catch {
    if (ticket === chainRequest) showMessage(els.message, `Could not load chain ${chainId}.`, "error");
    return;
  }
  if (ticket !== chainRequest) return;
  labels = loaded;
  // Start from the chain's current adjudication, if there is one.
  const adjudication = labels.columns.find((column) => column.source === "adjudication");
  choices = {};
  partialAsked = false;
  if (adjudication) {
    for (const step of labels.steps) {
      const rating = adjudication.ratings[String(step.index)];
      if (rating !== undefined) choices[step.step] = rating;
    }
  }
  els.note.value = "";
  current = Math.max(
    0,
    labels.steps.findIndex((step) => isDisputed(step)),
  );
  renderChain();
  els.chain.hidden = false;
  root.dataset.state = "ready";
  root.dataset.chain = String(labels.chain);
}

// Resolved only once a ruling covers every disputed step; a partial one says how far.
function listStatus(item) {
  if (item.adjudicated) return " · resolved";
  if (item.ruled_steps) return ` · ${item.ruled_steps} of ${item.disagreeing_steps} disputes ruled`;
  return "";
}

// The disputed steps still without a ruling, in step order.
function disputesLeft() {
  return rows.filter((row) => isDisputed(row.step) && choices[row.step.step] === undefined);
}

function isDisputed(step) {
  const human = step.ratings.filter(
    (rating, i) => rating !== null && labels.columns[i].source === "human",
  );
  return new Set(human).size > 1;
}

function renderChain() {
  els.chainId.textContent = String(labels.chain);
  renderMath(els.problem, labels.problem);
  els.finalWrap.hidden = !labels.final_answer;
  if (labels.final_answer) renderMath(els.final, labels.final_answer);
  els.referenceWrap.hidden = !labels.reference_answer;
  if (labels.reference_answer) renderMath(els.reference, labels.reference_answer);
  renderMachineSummary();

  els.grid.tHead.replaceChildren(gridHead());
  rows = labels.steps.map((step, index) => gridRow(step, index));
  els.grid.tBodies[0].replaceChildren(...rows.map((row) => row.tr));
  renderHistory();
  refresh();
}

// The grid's columns: the step, the ruling beside it, then each vote (compact: a
// voter's name is cut to fit and said in full in its title and on a phone) and both
// consensus methods. Comments sit under the step they are about.
function gridHead() {
  const head = el("tr");
  head.append(el("th", { text: "#" }), el("th", { text: "Step", cls: "rv-step-head" }), el("th", { text: "Ruling" }));
  for (const column of labels.columns) {
    const th = el("th", { cls: "rv-voter-col" });
    th.append(el("span", { text: column.by, cls: "rv-voter" }));
    th.title = `${column.by}: ${column.source}, ${when(column.created_at)}`;
    // Dawid-Skene's estimate of how often this voter gives the true label.
    const reliability = labels.reliability[column.by];
    if (reliability !== undefined) {
      const share = el("span", { text: `${Math.round(reliability * 100)} %`, cls: "rv-reliability" });
      share.title = `Dawid–Skene's estimate of how often ${column.by} gives the true label`;
      th.append(share);
    }
    head.append(th);
  }
  // Both methods side by side; the project's (the one snapshots use) is marked.
  for (const [method, name] of [
    ["majority", "Majority"],
    ["dawid_skene", "Dawid–Skene"],
  ]) {
    const th = el("th", { text: name, cls: "rv-method" });
    th.dataset.method = method;
    if (labels.consensus_method === method) {
      th.classList.add("is-used");
      th.append(el("span", { text: "used", cls: "rv-used" }));
      th.title = "The project's consensus method: snapshots and training use it";
    }
    head.append(th);
  }
  // The machine sources last, in one column, tinted and tagged: shown to help the
  // ruling, never counted.
  if (labels.machine.length) {
    const th = el("th", { cls: "rv-machine-col" });
    th.append(el("span", { text: "Machines", cls: "rv-machine-name" }), el("span", { text: "not votes", cls: "rv-machine-tag" }));
    th.title = labels.machine.map((column) => `${column.name}: ${column.runs.join(", ")}`).join("; ");
    head.append(th);
  }
  return head;
}

// Each machine source's first error, and whether it is the people's consensus's.
function renderMachineSummary() {
  els.machine.hidden = !labels.machine.length;
  els.machine.replaceChildren(
    el("span", { text: "Machines (not votes): ", cls: "muted" }),
    ...labels.machine.map((column) => {
      const agrees = column.agrees_with_consensus;
      const badge = el("span", { text: `${column.name}: ${machineFirstError(column.first_error)}` +
          (agrees === null ? "" : agrees ? " ✓ consensus" : " ≠ consensus"), cls: `badge rv-machine-badge${agrees === false ? " is-split" : ""}` });
      badge.dataset.source = column.source;
      badge.title = "The first step this source calls wrong";
      return badge;
    }),
  );
}

// One line a machine source: its short name and its verdict on the step (details in
// the line's title).
function machineCells(step, index) {
  if (!labels.machine.length) return [];
  const cell = el("td", { cls: "rv-machine" });
  cell.dataset.label = "Machines";
  for (const column of labels.machine) {
    const verdict = column.steps[index] || null;
    const line = el("span", { text: `${MACHINE_SHORT[column.source] || column.source} ${machineText(verdict)}` });
    line.dataset.source = column.source;
    line.dataset.rating = verdict && verdict.rating !== null ? String(verdict.rating) : "";
    line.title = machineTitle(column, verdict);
    cell.append(line);
  }
  return [cell];
}

function gridRow(step, index) {
  const tr = el("tr");
  tr.dataset.index = String(index);
  tr.classList.toggle("is-disputed", isDisputed(step));
  const stepCell = el("td", { cls: "rv-step" });
  const text = el("div", { cls: "rv-text math" });
  renderMath(text, step.text);
  stepCell.append(text);
  const comments = el("ul", { cls: "rv-comments" });
  const votes = step.ratings.map((rating, i) => {
    const column = labels.columns[i];
    const td = el("td", { text: rating === null ? "·" : SYMBOL[rating], cls: "rv-rating rv-vote" });
    td.dataset.rating = rating === null ? "" : String(rating);
    td.dataset.label = column.by; // named on a phone, where the header is not shown
    const comment = column.comments[String(step.index)];
    if (comment) {
      td.classList.add("has-comment");
      td.title = `${column.by}: ${comment}`;
      const li = el("li", { cls: "rv-comment" });
      li.append(el("strong", { text: column.by }), document.createTextNode(`: ${comment}`));
      comments.append(li);
    }
    return td;
  });
  if (comments.children.length) stepCell.append(comments);
  const choiceCell = el("td", { cls: "rv-rule" });
  const group = el("span", { cls: "rv-choice" });
  const buttons = {};
  for (const rating of [1, 0, -1]) {
    const button = el("button", { text: SYMBOL[rating] });
    button.type = "button";
    button.dataset.rating = String(rating);
    button.setAttribute("aria-label", `Rule step ${index + 1} ${SYMBOL[rating]}`);
    button.addEventListener("click", () => {
      current = index;
      rule(rating);
    });
    buttons[rating] = button;
    group.append(button);
  }
  choiceCell.append(group);
  tr.append(el("td", { text: String(index + 1), cls: "rv-no" }), stepCell, choiceCell, ...votes);
  tr.append(majorityCell(step), learnedCell(step), ...machineCells(step, index));
  tr.addEventListener("click", (event) => {
    if (!(event.target instanceof Element && event.target.closest("button"))) moveTo(index);
  });
  return { tr, buttons, step };
}

// A tie is shown as one, never as a consensus: the lead rules on it. The tied ratings
// are those of the counted votes (an adjudication column does not count).
function majorityCell(step) {
  const counts = new Map();
  step.ratings.forEach(
    (r, i) =>
      r !== null &&
      labels.columns[i].source !== "adjudication" &&
      counts.set(r, (counts.get(r) || 0) + 1),
  );
  const top = Math.max(0, ...counts.values());
  const tiedRatings = [...counts]
    .filter(([, n]) => n === top)
    .map(([r]) => r)
    .sort((a, b) => b - a);
  const majority = step.majority;
  const cell = el("td", { text: majority.tied
      ? `tie (${tiedRatings.map((r) => SYMBOL[r]).join(" / ")})`
      : majority.label === null
        ? NONE
        : `${SYMBOL[majority.label]} (${Math.round((majority.support || 0) * 100)} %)`, cls: majority.tied ? "rv-rating rv-majority rv-tie" : "rv-rating rv-majority" });
  cell.dataset.rating = majority.tied || majority.label === null ? "" : String(majority.label);
  cell.dataset.label = "Majority";
  return cell;
}

// Dawid-Skene: the most probable rating and its posterior probability.
function learnedCell(step) {
  const learned = step.dawid_skene;
  const cell = el("td", { text: learned === null
      ? NONE
      : learned.tied
        ? `tie (${Math.round(learned.probability * 100)} % each)`
        : `${SYMBOL[learned.label]} (p ${learned.probability.toFixed(2)})`, cls: learned && learned.tied ? "rv-rating rv-ds rv-tie" : "rv-rating rv-ds" });
  cell.dataset.rating = learned === null || learned.tied ? "" : String(learned.label);
  cell.dataset.label = "Dawid–Skene";
  if (learned && !learned.tied) {
    cell.title = `Posterior probability ${Math.round(learned.probability * 1000) / 10} %`;
  }
  return cell;
}

function renderHistory() {
  els.history.replaceChildren(
    ...labels.history.map((revision) => {
      const li = el("li");
      li.dataset.annotation = String(revision.annotation);
      const head = el("div");
      head.append(
        el("strong", { text: revision.by }),
        document.createTextNode(` · ${revision.source} · ${when(revision.created_at)}`),
        document.createTextNode(
          `${revision.supersedes ? ` · replaces #${revision.supersedes}` : ""}` +
            `${revision.current ? " · current" : " · superseded"}`,
        ),
      );
      const ratings = labels.steps
        .map((step) => {
          const rating = revision.ratings[String(step.index)];
          return rating === undefined ? "·" : SYMBOL[rating];
        })
        .join("  ");
      li.append(head, el("div", { text: `#${revision.annotation}: ${ratings}`, cls: "rv-revision-ratings" }));
      if (revision.note) li.append(el("div", { text: `Note: ${revision.note}`, cls: "rv-comment" }));
      if (revision.rewrite) li.append(el("div", { text: `Rewrite: ${revision.rewrite}`, cls: "rv-comment" }));
      return li;
    }),
  );
}

function refresh() {
  rows.forEach((row, index) => {
    const choice = choices[row.step.step];
    row.tr.classList.toggle("is-current", index === current);
    row.tr.dataset.ruling = choice === undefined ? "" : String(choice);
    for (const [value, button] of Object.entries(row.buttons)) {
      const on = choice !== undefined && Number(value) === choice;
      button.classList.toggle("is-on", on);
      button.setAttribute("aria-pressed", on ? "true" : "false");
    }
  });
  const ruled = Object.keys(choices).length;
  const disputed = rows.filter((row) => isDisputed(row.step)).length;
  const open = disputesLeft().length;
  els.progress.textContent =
    `${ruled} of ${rows.length} steps ruled` +
    (disputed ? ` · ${disputed - open} of ${disputed} disputed` : "");
  els.submit.disabled = busy || ruled === 0;
}

function moveTo(index) {
  if (!rows.length) return;
  current = Math.max(0, Math.min(rows.length - 1, index));
  refresh();
  rows[current].tr.scrollIntoView({ block: "nearest" });
}

function rule(rating) {
  if (!rows.length) return;
  choices[rows[current].step.step] = rating;
  partialAsked = false;
  moveTo(current + 1);
}

function takeConsensus() {
  for (const row of rows) {
    // Tied steps have no consensus to take: they wait for the lead's ruling.
    if (choices[row.step.step] === undefined && row.step.consensus !== null && !row.step.tied) {
      choices[row.step.step] = row.step.consensus;
    }
  }
  partialAsked = false;
  refresh();
}

async function save() {
  if (!labels || busy) return;
  const ratings = rows
    .filter((row) => choices[row.step.step] !== undefined)
    .map((row) => ({ step: row.step.step, rating: choices[row.step.step] }));
  if (!ratings.length) {
    showMessage(els.message, "Rule at least one step first (1, 2, 3 or the buttons).");
    return;
  }
  const left = disputesLeft();
  if (left.length && !partialAsked) {
    // A tie "Take consensus" cannot settle, or a step skipped: say which, once.
    partialAsked = true;
    const steps = left.map((row) => rows.indexOf(row) + 1).join(", ");
    showMessage(
      els.message,
      `Disputed step${left.length === 1 ? "" : "s"} ${steps} ha${left.length === 1 ? "s" : "ve"} ` +
        "no ruling: the chain stays in the review list until every disputed step has one. " +
        "Save again to keep this partial ruling.",
      "warn",
    );
    moveTo(rows.indexOf(left[0]));
    return;
  }
  const resolves = left.length === 0;
  busy = true;
  refresh();
  try {
    const made = await api(`${config.api.chain}${labels.chain}/adjudicate/`, {
      method: "POST",
      body: { ratings, note: els.note.value.trim() },
    });
    showMessage(
      els.message,
      `Adjudication saved as revision #${made.annotation}.` +
        (resolves ? "" : " The chain stays in the list: some disputed steps have no ruling."),
      resolves ? "ok" : "warn",
    );
    busy = false;
    let next = -1;
    if (selected >= 0 && !resolves) {
      // Partial: the chain stays listed, with how far its ruling got.
      items[selected].ruled_steps = ratings.filter((r) =>
        rows.some((row) => row.step.step === r.step && isDisputed(row.step)),
      ).length;
      next = selected;
    } else if (selected >= 0 && !$("rv-resolved").checked) {
      // Resolved: the chain leaves the list and the count falls; the next one moves up.
      items.splice(selected, 1);
      listCount = Math.max(0, listCount - 1);
      els.count.textContent = `(${listCount})`;
      next = selected < items.length ? selected : -1;
      selected = -1;
    } else if (selected >= 0) {
      items[selected].adjudicated = true;
      next = items.findIndex((item, i) => i > selected && !item.adjudicated);
    }
    renderList();
    // On to the next disagreement not ruled yet; the last one stays open.
    if (next >= 0) await select(next);
    else await loadChain(labels.chain);
  } catch (error) {
    busy = false;
    const detail =
      error.body && (error.body.detail || JSON.stringify(error.body).slice(0, 300));
    showMessage(els.message, `Could not save the adjudication${detail ? `: ${detail}` : "."}`, "error");
    refresh();
  }
}

// --- keyboard and mouse --------------------------------------------------------------------

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target === els.note) {
    if (event.key === "Escape") {
      event.preventDefault();
      els.note.blur();
    }
    return;
  }
  if (
    target instanceof HTMLInputElement ||
    target instanceof HTMLTextAreaElement ||
    target instanceof HTMLSelectElement
  ) {
    return;
  }
  const key = event.key;
  let handled = true;
  if (key === "n") select(Math.min(items.length - 1, selected + 1));
  else if (key === "p") select(Math.max(0, selected - 1));
  else if (!labels) handled = false;
  else if (key === "j" || key === "ArrowDown") moveTo(current + 1);
  else if (key === "k" || key === "ArrowUp") moveTo(current - 1);
  else if (key in RATING_KEYS) rule(RATING_KEYS[key]);
  else if (key === "a") takeConsensus();
  else if (key === "c") els.note.focus();
  else if (key === "Enter") save();
  else handled = false;
  if (handled) event.preventDefault();
});

// A clicked button gives the focus back, so the next Enter saves instead of clicking it.
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("button") : null;
  if (button && button.type === "button") button.blur();
});
els.form.addEventListener("submit", (event) => {
  event.preventDefault();
  save();
});
$("rv-take-consensus").addEventListener("click", takeConsensus);
els.more.addEventListener("click", () => nextPage && loadList(nextPage, true));
for (const id of ["rv-annotator", "rv-agreement", "rv-resolved"]) {
  $(id).addEventListener("change", async () => {
    selected = -1;
    if ((await loadList()) && items.length) await select(0);
  });
}

async function start() {
  try {
    await loadList();
  } catch {
    root.dataset.state = "error";
    showMessage(els.message, "Could not load the disagreements; reload to try again.", "error");
    return;
  }
  const linked = /chain=(\d+)/.exec(window.location.hash);
  const at = linked ? items.findIndex((item) => String(item.chain) === linked[1]) : -1;
  if (at >= 0) await select(at);
  else if (linked) await loadChain(Number(linked[1]));
  else if (items.length) await select(0);
  else root.dataset.state = "empty";
}

start();
