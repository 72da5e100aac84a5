// The data manager's chain list: filters and search go to the chains API
// (GET projects/{id}/chains/), sorted by the column a header names (`sort`), pages follow
// its keyset cursor (next_cursor). Chains ticked on any page, or every chain the filters
// match, take one bulk action: counted first (chains/bulk/preview/), done on confirmation
// with that count (chains/bulk/), a job the page follows. Text from imports goes in with
// textContent only.

import {
  $,
  el,
  api,
  renderMath,
  machineFirstError,
  MACHINE_SHORT,
  routingBadge,
  errorText,
  formatFixed,
  formatCount,
  showMessage,
  NONE,
} from "./steplab.js";
const config = JSON.parse(document.getElementById("chains-config").textContent);
const root = $("chains");
const STATUS = { in_progress: "in progress" };
const ticked = new Set();
let sort = "id";
let nextCursor = null;
let preview = null; // {body, changed} of the bulk action counted last

const message = $("ch-message");

// The filters as the list's query parameters and as the bulk action's `filters`.
function filters() {
  const out = {};
  const set = (name, id, number) => {
    const value = $(id).value.trim();
    if (value !== "") out[name] = number ? Number(value) : value;
  };
  set("q", "ch-q");
  set("annotator", "ch-annotator", true);
  set("max_agreement", "ch-agreement", true);
  set("min_score", "ch-min-score", true);
  set("max_score", "ch-max-score", true);
  set("min_uncertainty", "ch-min-unc", true);
  set("max_uncertainty", "ch-max-unc", true);
  const status = $("ch-status").value;
  if (status) out.status = [status];
  if ($("ch-machines").value === "disagree") out.machines_disagree = true;
  if ($("ch-machines").value === "vs_people") out.machines_vs_people = true;
  const routing = $("ch-routing").value;
  if (routing) out.routing = [routing];
  const held = $("ch-evaluation").value;
  if (held) out.in_evaluation_set = held === "true";
  return out;
}

function query(cursor) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(filters())) params.set(name, String(value));
  params.set("sort", sort);
  if (cursor !== null) params.set("cursor", cursor);
  return params;
}

function row(chain) {
  const tr = el("tr");
  tr.dataset.chain = chain.id;
  const tick = el("input");
  tick.type = "checkbox";
  tick.checked = ticked.has(chain.id);
  tick.setAttribute("aria-label", `Tick chain ${chain.id}`);
  tick.addEventListener("change", () => {
    if (tick.checked) ticked.add(chain.id);
    else ticked.delete(chain.id);
    selectionChanged();
  });
  const tickCell = el("td", { cls: "ch-tick" });
  tickCell.append(tick);
  const link = el("a", { text: `#${chain.id}` });
  link.href = `${config.chainPage}${chain.id}/`;
  const first = el("td");
  first.append(link);
  // data-label names a figure where a narrow screen stacks the row (chains.css).
  const figure = (label, text) => {
    const cell = el("td", { text });
    cell.dataset.label = label;
    return cell;
  };
  // The problem as text, its $...$ typeset by KaTeX (trust off) afterwards.
  const problem = el("td", { cls: "ch-problem math" });
  renderMath(problem, chain.problem);
  const status = el("td", { text: STATUS[chain.status] || chain.status });
  const routed = routingBadge(chain.routing);
  if (routed) status.append(" ", routed);
  // The evaluation set it is held out in (never leased, never trained on); a long name
  // is cut with an ellipsis and read whole on hover.
  const held = figure("Evaluation set", chain.evaluation_set === null ? NONE : "");
  held.classList.add("ch-set");
  if (chain.evaluation_set !== null) {
    held.append(el("span", { text: chain.evaluation_set, title: chain.evaluation_set }));
  }
  tr.append(
    tickCell,
    first,
    problem,
    status,
    el("td", { text: `${chain.finished_count} / ${chain.needed}` }),
    figure("Agreement", chain.agreement === null ? NONE : `${Math.round(chain.agreement * 100)} %`),
    figure("PRM score", formatFixed(chain.prm_score)),
    figure("Uncertainty", formatFixed(chain.prm_uncertainty)),
    machineCell(chain.machine_first_errors),
    held,
  );
  return tr;
}

// Each machine source's first error, one line a source; marked where they differ.
function machineCell(firstErrors) {
  const cell = el("td", { cls: "ch-machine" });
  cell.dataset.label = "Machines";
  const sources = Object.entries(firstErrors);
  if (!sources.length) cell.textContent = NONE;
  for (const [source, index] of sources) {
    const line = el("span", { text: `${MACHINE_SHORT[source] || source} ${machineFirstError(index)}` });
    line.dataset.source = source;
    cell.append(line);
  }
  cell.classList.toggle("is-split", new Set(sources.map(([, index]) => index)).size > 1);
  return cell;
}

function shownIds() {
  return [...$("ch-rows").querySelectorAll("tr[data-chain]")].map((tr) => Number(tr.dataset.chain));
}

function selectionChanged() {
  const count = ticked.size;
  $("ch-selected").textContent =
    count === 0 ? "No chain ticked" : `${formatCount(count)} chain${count === 1 ? "" : "s"} ticked`;
  const shown = shownIds();
  const page = $("ch-tick-page");
  page.checked = shown.length > 0 && shown.every((id) => ticked.has(id));
  page.indeterminate = !page.checked && shown.some((id) => ticked.has(id));
  closeConfirm();
}

function showSort() {
  $("ch-sort").value = sort;
  const key = sort.replace(/^-/, "");
  for (const th of root.querySelectorAll("th[data-sort]")) {
    if (th.dataset.sort === key) th.setAttribute("aria-sort", sort.startsWith("-") ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  }
}

let listRequest = 0; // the newest list load; an older answer arriving late is dropped

async function load(cursor) {
  const ticket = ++listRequest;
  root.dataset.state = "loading";
  try {
    const page = await api(`${config.api.chains}?${query(cursor)}`);
    if (ticket !== listRequest) return;
    $("ch-rows").replaceChildren(...page.results.map(row));
    $("ch-empty").hidden = page.results.length > 0;
    nextCursor = page.next_cursor;
    $("ch-next").hidden = nextCursor === null;
    $("ch-first").hidden = cursor === null;
    showSort();
    selectionChanged();
    // A load that works clears an error; it leaves what a bulk action said.
    if (message.classList.contains("error")) showMessage(message, "");
    root.dataset.state = "ready";
  } catch (error) {
    if (ticket !== listRequest) return;
    showMessage(message, `Could not load the chains: ${errorText(error)}`, "error");
    root.dataset.state = "error";
  }
}

// --- bulk actions ------------------------------------------------------------------

function bulkBody() {
  const action = $("ch-bulk-action").value;
  const body = { action };
  if ($("ch-bulk-scope").value === "filter") body.filters = filters();
  else body.chain_ids = [...ticked].sort((a, b) => a - b);
  if (action === "requeue") body.more = Number($("ch-bulk-more").value || "1");
  if (action === "reviewer") {
    const reviewer = $("ch-bulk-reviewer").value;
    body.reviewer = reviewer === "" ? null : Number(reviewer);
  }
  if (action === "evaluation_add" || action === "evaluation_remove") {
    const set = $("ch-bulk-set").value;
    if (set !== "") body.evaluation_set = Number(set);
  }
  return body;
}

function actionChanged() {
  const action = $("ch-bulk-action").value;
  $("ch-bulk-more-label").hidden = action !== "requeue";
  $("ch-bulk-reviewer-label").hidden = action !== "reviewer";
  $("ch-bulk-set-label").hidden = action !== "evaluation_add" && action !== "evaluation_remove";
  closeConfirm();
}

function closeConfirm() {
  preview = null;
  $("ch-bulk-confirm").hidden = true;
}

async function count(event) {
  event.preventDefault();
  const body = bulkBody();
  if (body.chain_ids && body.chain_ids.length === 0) {
    showMessage(message, "Tick chains first, or choose every chain these filters match.",
      "error");
    return;
  }
  try {
    const counted = await api(config.api.bulkPreview, { method: "POST", body });
    const action = $("ch-bulk-action").selectedOptions[0].textContent;
    $("ch-bulk-count").textContent =
      `${action}: changes ${formatCount(counted.changed)} of ` +
      `${formatCount(counted.matched)} chain${counted.matched === 1 ? "" : "s"}.`;
    $("ch-bulk-reasons").replaceChildren(
      ...counted.unchanged.map((r) => el("li", { text: `${formatCount(r.count)} left as they are: ${r.reason}` })),
    );
    preview = { body, changed: counted.changed };
    $("ch-bulk-go").disabled = counted.changed === 0;
    $("ch-bulk-confirm").hidden = false;
    $("ch-bulk-go").focus();
    showMessage(message, "");
  } catch (error) {
    showMessage(message, `Could not count: ${errorText(error)}`, "error");
  }
}

async function follow(job) {
  for (;;) {
    if (job.status === "done") {
      const chains = `chain${job.changed === 1 ? "" : "s"}`;
      showMessage(message, `Done: ${formatCount(job.changed)} ${chains} changed.`, "ok");
      return true;
    }
    if (job.status === "failed") {
      showMessage(message, `Failed, nothing changed: ${job.detail}`, "error");
      return false;
    }
    const read = `${formatCount(job.done)} of ${formatCount(job.expected)}`;
    showMessage(message, `Working: ${read} chains read…`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    job = await api(job.url);
  }
}

async function go() {
  if (!preview) return;
  const body = { ...preview.body, expected: preview.changed };
  closeConfirm();
  try {
    const job = await api(config.api.bulk, { method: "POST", body });
    if (await follow(job)) {
      ticked.clear();
      load(null);
    }
  } catch (error) {
    showMessage(message, `Not done: ${errorText(error)}`, "error");
  }
}

// --- wiring --------------------------------------------------------------------------

$("ch-filters").addEventListener("submit", (event) => {
  event.preventDefault();
  load(null);
});
for (const id of ["ch-status", "ch-annotator", "ch-agreement", "ch-machines", "ch-routing", "ch-evaluation"]) {
  $(id).addEventListener("change", () => load(null));
}
$("ch-sort").addEventListener("change", () => {
  sort = $("ch-sort").value;
  load(null);
});
for (const th of root.querySelectorAll("th[data-sort]")) {
  th.querySelector("button").addEventListener("click", () => {
    const key = th.dataset.sort;
    sort = sort === key ? `-${key}` : key;
    load(null);
  });
}
$("ch-tick-page").addEventListener("change", (event) => {
  for (const id of shownIds()) {
    if (event.target.checked) ticked.add(id);
    else ticked.delete(id);
  }
  for (const box of $("ch-rows").querySelectorAll("td.ch-tick input")) box.checked = event.target.checked;
  selectionChanged();
});
$("ch-bulk").addEventListener("submit", count);
for (const id of ["ch-bulk-scope", "ch-bulk-more", "ch-bulk-reviewer", "ch-bulk-set"]) {
  $(id).addEventListener("change", closeConfirm);
}
$("ch-bulk-action").addEventListener("change", actionChanged);
$("ch-bulk-go").addEventListener("click", go);
$("ch-bulk-cancel").addEventListener("click", closeConfirm);
$("ch-next").addEventListener("click", () => load(nextCursor));
$("ch-first").addEventListener("click", () => load(null));
actionChanged();
load(null);
