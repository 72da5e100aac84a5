// The lead's snapshots page: the dataset snapshots with their options and counts, the
// training runs' own listed apart, the form that takes a new one, and the diff between two
// versions.
//
// Everything goes through the snapshot API (api): snapshots/ (?kind=dataset
// and ?kind=training, and POST) and snapshots/diff/; each row links its export (export/
// ?snapshot=N&kind=...&format=...&split=..., named by the server) whole, train and held-out.
// The two kinds number apart: a dataset reads v1, v2 ..., a training run's own t1, t2 ...
// (the API's `label`), and every link and picker names the kind with the number. Text from imports and from people
// (problems, usernames) is put in the page with textContent only.

import { $, el, api, renderMath, formatWhen, showMessage, errorText, NONE } from "./steplab.js";
const config = JSON.parse(document.getElementById("snapshots-config").textContent);
const SYMBOL = { 1: "+1", 0: "0", "-1": "−1" };
const CHANGE_NAMES = {
  added: "added",
  removed: "removed",
  labels_changed: "labels changed",
  split_changed: "split changed",
};
const TIE_NAMES = { drop: "ties dropped", lowest: "ties at lowest", mark: "ties marked" };

const root = $("snapshots");

// Each cell names its column (data-label): on a phone the rows stack as cards and the
// stylesheet writes the name before the value.
function nameCells(table, tr) {
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent);
  [...tr.children].forEach((cell, index) => (cell.dataset.label = names[index] || ""));
  return tr;
}

const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;

// --- the two lists ---------------------------------------------------------------------

function optionsText(options) {
  const parts = [
    options.finished_only ? "finished only" : "all labeled chains",
    options.include_imported ? "people's and imported labels" : "people's labels only",
    `≥ ${options.min_support} vote${options.min_support === 1 ? "" : "s"}`,
    TIE_NAMES[options.ties] || `ties: ${options.ties}`,
    `held-out\u00a0${Math.round(options.heldout_fraction * 100)}\u00a0%`,
    `seed ${options.seed}`,
  ];
  if (options.machine_sources && options.machine_sources.length) {
    parts.splice(2, 0, `machine: ${options.machine_sources.join(", ")}`);
  }
  return parts.join(" · ");
}

function sourcesText(counts) {
  if (!counts.sources) return NONE;
  return `${counts.sources.human ?? 0} / ${counts.sources.import ?? 0}`;
}

function snapshotRow(snapshot, withRun) {
  const tr = el("tr");
  tr.dataset.version = String(snapshot.version);
  tr.dataset.kind = snapshot.kind;
  const counts = snapshot.counts || {};
  const version = el("td");
  version.append(el("strong", { text: snapshot.label }));
  tr.append(version);
  if (withRun) tr.append(el("td", { text: snapshot.taken_for || NONE }));
  tr.append(el("td", { text: formatWhen(snapshot.created_at), cls: "sn-when" }));
  tr.append(el("td", { text: snapshot.created_by || NONE }));
  tr.append(el("td", { text: optionsText(snapshot.options), cls: "sn-options" }));
  tr.append(el("td", { text: String(counts.chains ?? NONE), cls: "sn-num" }));
  // Chains resting on people's votes and on imported ones (a chain may count in both);
  // a snapshot taken before the sources were a choice has no such counts.
  const sources = el("td", { text: sourcesText(counts), cls: "sn-num sn-sources" });
  if (counts.imported_left_out) {
    sources.title = `${plural(counts.imported_left_out, "chain")} labeled by an import only, left out`;
  }
  tr.append(sources);
  tr.append(el("td", { text: String(counts.steps_labeled ?? NONE), cls: "sn-num" }));
  tr.append(el("td", { text: `${counts.train_chains ?? NONE} / ${counts.heldout_chains ?? NONE}`, cls: "sn-num" }));
  const hash = el("td");
  const code = el("code", { text: snapshot.content_hash.slice(0, 12) });
  code.title = snapshot.content_hash;
  hash.append(code);
  tr.append(hash);
  tr.append(downloadCell(snapshot));
  return tr;
}

// --- downloads: every snapshot, whole or one split, in the format chosen above ---------

const SPLITS = [["", "all"], ["train", "train"], ["heldout", "held-out"]];

function exportUrl(version, kind, split) {
  const format = $("sn-format").value;
  const params = new URLSearchParams({ format, snapshot: version });
  if (kind !== "dataset") params.set("kind", kind);
  if (split) params.set("split", split);
  if (format === "openrlhf" && $("sn-soft-labels").value !== "votes") {
    params.set("soft_labels", $("sn-soft-labels").value);
  }
  // Parquet holds TRL's columns only: no provenance there.
  if ($("sn-provenance").checked && format !== "parquet") params.set("provenance", "true");
  return `${config.api.export}?${params}`;
}

function downloadCell(snapshot) {
  const cell = el("td", { cls: "sn-download" });
  // One box for the links: on a phone the cell is a grid of its name and its value.
  const links = el("span", { cls: "sn-download-links" });
  cell.append(links);
  SPLITS.forEach(([split, name]) => {
    const link = el("a", { text: name, cls: "sn-download-link" });
    link.dataset.split = split || "all";
    link.dataset.version = String(snapshot.version);
    link.dataset.kind = snapshot.kind;
    link.href = exportUrl(snapshot.version, snapshot.kind, split);
    link.setAttribute("download", "");
    link.title = `${snapshot.label}, ${split ? `${name} split` : "every chain"}, as ${$("sn-format").value}`;
    link.addEventListener("click", downloadChecked);
    links.append(link);
  });
  return cell;
}

// A download asks first (check=true: no file): an export that cannot start (a format the
// snapshot has no labels for, a snapshot deleted since) shows its error here instead of
// the browser saving the error as the file. Once checked, the same click goes through.
async function downloadChecked(event) {
  const link = event.currentTarget;
  if (link.dataset.checked === link.href) {
    delete link.dataset.checked;
    return;
  }
  event.preventDefault();
  try {
    await api(`${link.href}&check=true`);
  } catch (error) {
    showMessage($("sn-message"), `No download: ${errorText(error)}`, "error");
    return;
  }
  link.dataset.checked = link.href;
  link.click();
}

// A new format re-points every row's links; the line beside it says what the file holds.
function formatChosen() {
  const option = $("sn-format").selectedOptions[0];
  $("sn-format-holds").textContent = option ? option.title : "";
  $("sn-soft-labels-label").hidden = $("sn-format").value !== "openrlhf";
  $("sn-provenance").disabled = $("sn-format").value === "parquet";
  for (const link of document.querySelectorAll(".sn-download-link")) {
    const split = link.dataset.split === "all" ? "" : link.dataset.split;
    link.href = exportUrl(link.dataset.version, link.dataset.kind, split);
  }
}

// One list (kind "dataset" or "training"): the first page, "More" appends the next.
function makeList(kind, ids) {
  // ticket: the newest reload; a "More" asked for before it answers late and is dropped
  const state = { next: null, rows: [], ticket: 0 };
  async function load(url, append) {
    const ticket = append ? state.ticket : ++state.ticket;
    const page = await api(url);
    if (ticket !== state.ticket) return;
    const body = $(ids.table).querySelector("tbody");
    if (!append) {
      body.replaceChildren();
      state.rows = [];
    }
    for (const snapshot of page.results) {
      body.append(nameCells($(ids.table), snapshotRow(snapshot, kind === "training")));
      state.rows.push(snapshot);
    }
    state.next = page.next;
    $(ids.more).hidden = !page.next;
    $(ids.empty).hidden = page.count > 0;
    $(ids.table).hidden = page.count === 0;
    $(ids.count).textContent = page.count ? `(${page.count})` : "";
  }
  $(ids.more).addEventListener("click", () => {
    if (state.next) load(state.next, true).then(fillVersionChoices).catch(loadFailed);
  });
  return {
    state,
    reload: () => load(`${config.api.snapshots}?kind=${kind}`, false),
  };
}

const datasets = makeList("dataset", {
  table: "sn-datasets",
  more: "sn-datasets-more",
  empty: "sn-datasets-empty",
  count: "sn-datasets-count",
});
const training = makeList("training", {
  table: "sn-training",
  more: "sn-training-more",
  empty: "sn-training-empty",
  count: "sn-training-count",
});

function loadFailed(error) {
  showMessage($("sn-message"), `Could not load the snapshots: ${errorText(error)}`, "error");
}

// A picker's value: the kind and the version ("dataset:3"), as the two kinds number apart.
const choiceOf = (s) => `${s.kind}:${s.version}`;
// A choice as people read it (the API's label): v3, or t3 for a training run's own.
const labelOf = (choice) => {
  const [kind, version] = choice.split(":");
  return `${kind === "training" ? "t" : "v"}${version}`;
};

// The version pickers of the diff: every version loaded, newest first, the training
// runs' marked; A defaults to the second newest dataset, B to the newest.
function fillVersionChoices() {
  const all = [
    ...datasets.state.rows.map((s) => [choiceOf(s), s.label, s.created_at]),
    ...training.state.rows.map((s) => [choiceOf(s), `${s.label} (${s.taken_for})`, s.created_at]),
  ].sort((x, y) => (x[2] < y[2] ? 1 : x[2] > y[2] ? -1 : 0));
  for (const [id, fallback] of [["sn-diff-a", 1], ["sn-diff-b", 0]]) {
    const select = $(id);
    const chosen = select.value;
    select.replaceChildren(...all.map(([choice, label]) => {
      const option = el("option", { text: label });
      option.value = choice;
      return option;
    }));
    const byDefault = datasets.state.rows[fallback] || datasets.state.rows[0];
    if (chosen && all.some(([choice]) => choice === chosen)) select.value = chosen;
    else if (byDefault) select.value = choiceOf(byDefault);
  }
  $("sn-compare").disabled = all.length === 0;
}

async function loadLists() {
  await Promise.all([datasets.reload(), training.reload()]);
  fillVersionChoices();
}

// --- taking a snapshot -------------------------------------------------------------------

let busy = false;
async function takeSnapshot(event) {
  event.preventDefault();
  if (busy) return;
  const form = $("sn-form");
  if (!form.reportValidity()) return;
  const body = {
    finished_only: $("sn-finished-only").checked,
    include_imported: $("sn-include-imported").checked,
    min_support: Number($("sn-min-support").value),
    ties: $("sn-ties").value,
    heldout_fraction: Number($("sn-heldout").value),
    seed: Number($("sn-seed").value),
    ambiguous: $("sn-ambiguous").value,
    machine_sources: [...document.querySelectorAll("#sn-machine input:checked")].map((box) => box.value),
  };
  busy = true;
  $("sn-take").disabled = true;
  showMessage($("sn-message"), "Taking the snapshot…", "info", { sticky: true });
  try {
    const snapshot = await api(config.api.snapshots, { method: "POST", body });
    await loadLists();
    const counts = snapshot.counts;
    showMessage(
      $("sn-message"),
      `Snapshot ${snapshot.label} taken: ${plural(counts.chains, "chain")}, ` +
        `${plural(counts.steps_labeled, "labeled step")}` +
        (counts.sources && counts.sources.import
          ? ` (${counts.sources.import} with imported labels)` : "") +
        (counts.machine
          ? Object.entries(counts.machine)
              .map(([source, n]) => `, ${plural(n, "chain")} labeled by ${source}`)
              .join("")
          : "") +
        (counts.unfinished_left_out
          ? `, ${plural(counts.unfinished_left_out, "unfinished chain")} left out` : "") +
        (counts.imported_left_out
          ? `, ${plural(counts.imported_left_out, "chain")} labeled by an import only left out` : "") +
        (counts.tied_steps
          ? `, ${plural(counts.tied_steps, "tied step")} (${TIE_NAMES[snapshot.options.ties]})` : "") +
        (counts.steps_below_support
          ? `, ${plural(counts.steps_below_support, "step")} below the minimum votes` : "") +
        "." +
        (snapshot.same_as
          ? ` It is identical to ${snapshot.same_as} (the same content hash): nothing ` +
            "changed since, so either holds the same data."
          : ""),
      "ok",
      { sticky: true },
    );
    root.dataset.taken = String(snapshot.version);
  } catch (error) {
    showMessage($("sn-message"), `Could not take a snapshot: ${errorText(error)}`, "error");
  } finally {
    busy = false;
    $("sn-take").disabled = false;
  }
}

// --- the diff ----------------------------------------------------------------------------

const diff = { a: null, b: null, change: "", next: null, ticket: 0 };

function labelsCell(labels, changed) {
  const cell = el("td", { cls: "sn-labels" });
  if (labels === null) {
    cell.textContent = NONE;
    return cell;
  }
  const marks = el("span", { cls: "sn-label-row" });
  cell.append(marks);
  labels.forEach((label, index) => {
    const mark = el("span", { text: label === null ? "·" : SYMBOL[label], cls: "sn-label" });
    mark.dataset.rating = label === null ? "" : String(label);
    mark.title = `step ${index + 1}: ${label === null ? "no label" : SYMBOL[label]}`;
    if (changed.has(index)) mark.classList.add("is-changed");
    marks.append(mark);
  });
  return cell;
}

function diffRow(row) {
  const tr = el("tr");
  tr.dataset.chain = String(row.chain_id);
  tr.dataset.change = row.change;
  tr.append(el("td", { text: `#${row.chain_id}` }));
  tr.append(el("td", { text: CHANGE_NAMES[row.change] || row.change, cls: `sn-change sn-change-${row.change}` }));
  const split = row.split_a && row.split_b && row.split_a !== row.split_b
    ? `${row.split_a} → ${row.split_b}`
    : row.split_b || row.split_a;
  tr.append(el("td", { text: split }));
  const changed = new Set(row.changed_steps);
  tr.append(labelsCell(row.labels_a, changed));
  tr.append(labelsCell(row.labels_b, changed));
  // The problem as text, its $...$ typeset by KaTeX (trust off) afterwards.
  const problem = el("td", { cls: "sn-problem math" });
  renderMath(problem, row.problem);
  tr.append(problem);
  return tr;
}

function countsLine(counts) {
  const line = $("sn-diff-counts");
  line.replaceChildren();
  const parts = [
    ["added", "added"],
    ["removed", "removed"],
    ["labels_changed", "with labels changed"],
    ["split_changed", "moved to the other split"],
    ["unchanged", "unchanged"],
  ];
  line.append(document.createTextNode(`Chains from ${labelOf(diff.a)} to ${labelOf(diff.b)}: `));
  parts.forEach(([key, words], index) => {
    const figure = el("strong", { text: String(counts[key]) });
    figure.dataset.count = key;
    const after = index < parts.length - 1 ? " · " : "";
    line.append(figure, document.createTextNode(` ${words}${after}`));
  });
}

async function loadDiff(append) {
  const ticket = ++diff.ticket;
  const [aKind, a] = diff.a.split(":");
  const [bKind, b] = diff.b.split(":");
  const params = new URLSearchParams({ a, b, a_kind: aKind, b_kind: bKind });
  if (diff.change) params.set("change", diff.change);
  if (append && diff.next !== null) params.set("after", String(diff.next));
  root.dataset.diff = "loading";
  try {
    const answer = await api(`${config.api.diff}?${params}`);
    if (ticket !== diff.ticket) return;
    const body = $("sn-diff-table").querySelector("tbody");
    if (!append) body.replaceChildren();
    if (answer.counts) countsLine(answer.counts);
    answer.changes.forEach((row) => body.append(nameCells($("sn-diff-table"), diffRow(row))));
    diff.next = answer.next_after;
    $("sn-diff-more").hidden = answer.next_after === null;
    const none = body.children.length === 0;
    $("sn-diff-none").hidden = !none;
    $("sn-diff-table").hidden = none;
    $("sn-diff").hidden = false;
    root.dataset.diff = "ready";
  } catch (error) {
    if (ticket !== diff.ticket) return;
    root.dataset.diff = "error";
    showMessage($("sn-message"), `Could not compare: ${errorText(error)}`, "error");
  }
}

function compare(event) {
  event.preventDefault();
  diff.a = $("sn-diff-a").value;
  diff.b = $("sn-diff-b").value;
  diff.change = $("sn-diff-change").value;
  diff.next = null;
  if (!diff.a || !diff.b) return;
  loadDiff(false);
}

$("sn-form").addEventListener("submit", takeSnapshot);
$("sn-format").addEventListener("change", formatChosen);
$("sn-soft-labels").addEventListener("change", formatChosen);
$("sn-provenance").addEventListener("change", formatChosen);
formatChosen();
$("sn-diff-form").addEventListener("submit", compare);
$("sn-diff-more").addEventListener("click", () => loadDiff(true));

loadLists()
  .then(() => (root.dataset.state = "ready"))
  .catch((error) => {
    root.dataset.state = "error";
    loadFailed(error);
  });
