// The ML page's evaluation sets: the sets a lead held out (a lead marks and unmarks them
// here), and each model version's figures on each set, per subset, against the strongest
// baseline that reads no step, with 95% intervals, when they were measured and with which
// labels. A version with no figures on a set reads "scoring…" while an evaluation run is
// queued or running, else why it was not measured. Everything goes through the REST API
// (api); every value shown is set with textContent, never as markup.

import { el, api, formatWhen, errorText, showMessage, NONE } from "./steplab.js";
const root = document.getElementById("models-page");
const section = document.getElementById("evaluation-sets");
const projectId = root.dataset.projectId;
const canLead = section.dataset.canLead === "true";
const canManage = root.dataset.canManage === "true";
// How often the figures are read again: often while a run fills them, else now and then.
const POLL_PENDING_MS = 3000;
const POLL_MS = 15000;
const when = formatWhen;
const BASELINES = {
  position_prior: "step position",
  outcome_rule: "outcome rule",
  text_blind: "text-blind head",
};

function fixed(value, digits, signed) {
  if (typeof value !== "number" || !Number.isFinite(value)) return NONE;
  return (signed && value >= 0 ? "+" : "") + value.toFixed(digits);
}

// "0.512 [0.401, 0.611]": a figure with its 95% interval.
function withInterval(entry, signed = false) {
  if (!entry || typeof entry.mean !== "number") return NONE;
  const bounds = typeof entry.low === "number" && Number.isFinite(entry.low)
    ? ` [${fixed(entry.low, 3, signed)}, ${fixed(entry.high, 3, signed)}]` : "";
  return fixed(entry.mean, 3, signed) + bounds;
}

function fill(table, rows, emptyText) {
  const tbody = table.querySelector("tbody");
  const columns = table.querySelectorAll("thead th").length;
  tbody.replaceChildren();
  if (!rows.length) {
    const td = el("td", { text: emptyText, cls: "muted" });
    td.colSpan = columns;
    const tr = el("tr");
    tr.append(td);
    tbody.append(tr);
    return;
  }
  // A row's `wide` cell takes the columns its `cells` leave.
  rows.forEach(({ cells, className, wide }) => {
    const tr = el("tr", { cls: className });
    cells.forEach((cell) => {
      const td = el("td");
      if (cell instanceof Node) td.append(cell);
      else td.textContent = cell === null || cell === undefined ? "" : String(cell);
      tr.append(td);
    });
    if (wide) {
      const td = el("td");
      td.colSpan = columns - cells.length;
      td.append(wide);
      tr.append(td);
    }
    tbody.append(tr);
  });
}

function renderSets(sets) {
  fill(document.getElementById("evaluation-sets-table"), sets.map((set) => {
    let action = "";
    if (canLead) {
      action = el("button", { text: "Unmark", cls: "button" });
      action.type = "button";
      action.addEventListener("click", async () => {
        if (!window.confirm(`Return the ${set.chains} chains of ${set.name} to the queue ` +
          "and to training? The figures measured on it are dropped.")) return;
        await api(`/api/v1/evaluation-sets/${set.id}/`, { method: "DELETE" });
        refresh();
      });
    }
    return { cells: [set.name, set.filename || "chains a lead named", set.chains, set.labeled_chains,
      when(set.created_at), action] };
  }), "No evaluation sets: every labeled chain is trained on.");
}

// One row per subset and one for their mean: the version's F1, the strongest baseline's
// (the one that reads no step and scores best there) and the paired difference.
function resultRows(result, latest) {
  const report = result.report || {};
  const scores = report.scores || {};
  const model = scores.model || {};
  const strongest = report.strongest || {};
  const versus = report.versus_strongest || {};
  const figures = (report.subsets || []).map((s) => [`subset_f1:${s.name}`, s.name, s.chains]);
  figures.push(["mean_subset_f1", "mean over subsets", report.chains]);
  const head = el("div");
  head.append(el("strong", { text: result.evaluation_set_name }));
  const labels = result.snapshot_label ? ` with the labels of ${result.snapshot_label}` : "";
  head.append(el("div", {
    text: `measured ${when(result.created_at)}${labels}`,
    cls: "muted evaluation-when",
  }));
  if (result.labels_changed_since) {
    const again = isPending(latest) ? "measuring again…" : "not yet measured again";
    head.append(el("div", {
      text: `labels changed since: ${again}`, cls: "evaluation-outdated",
    }));
  }
  const notes = [];
  if (result.unlabeled_chains) notes.push(`${result.unlabeled_chains} chains without labels`);
  const cut = result.truncation && result.truncation.truncated_chains;
  if (cut) notes.push(`${cut} chains cut to fit max_length`);
  if (model.auroc) notes.push(`AUROC ${withInterval(model.auroc)}`);
  if (model.prmscore) notes.push(`PRMScore ${withInterval(model.prmscore)}`);
  if (notes.length) head.append(el("div", { text: notes.join(" · "), cls: "muted evaluation-notes" }));
  const verdict = result.loses === null
    ? el("span", { text: "not measured against a baseline", cls: "muted" })
    : el("span", { text: result.loses ? "loses to the strongest baseline" : "does not lose", cls: result.loses ? "rules-not-beaten" : "rules-beaten" });
  if (!result.chains) {
    return [{ cells: [`v${result.version}`, head, NONE, 0, NONE, NONE, NONE, NONE, verdict] }];
  }
  return figures.map(([key, name, chains], index) => {
    const rival = strongest[key];
    const rivalScores = rival ? (scores[rival] || {})[key] : null;
    return {
      className: key === "mean_subset_f1" ? "evaluation-mean" : "",
      cells: [index === 0 ? `v${result.version}` : "", index === 0 ? head : "", name, chains,
        withInterval(model[key]), rival ? (BASELINES[rival] || rival) : NONE,
        withInterval(rivalScores), withInterval(versus[key], true),
        key === "mean_subset_f1" ? verdict : ""],
    };
  });
}

function isPending(run) {
  return Boolean(run) && (run.status === "queued" || run.status === "running");
}

// A version with no figures on a set: being scored, or why not (the newest run's word).
function gapRow(version, set, latest) {
  const head = el("div");
  head.append(el("strong", { text: set.name }));
  if (isPending(latest)) {
    return { cells: [`v${version.version}`, head], className: "evaluation-gap",
      wide: el("span", { text: "scoring…", cls: "evaluation-pending" }) };
  }
  const skip = latest && (latest.skipped || []).find((s) => s.model_version === version.id);
  let why = "no figures yet";
  if (skip) why = `not measured: ${skip.reason}`;
  else if (latest && latest.status === "failed") why = "not measured: the last evaluation run failed";
  else if (latest && latest.status === "cancelled") why = "not measured: the last evaluation run was cancelled";
  return { cells: [`v${version.version}`, head], className: "evaluation-gap",
    wide: el("span", { text: why, cls: "muted" }) };
}

// Every version on every set, newest version first: its figures, or the gap.
function renderResults(sets, results, versions, latest) {
  const measured = new Map(results.map((r) => [`${r.model_version}:${r.evaluation_set}`, r]));
  const ordered = [...versions].sort((a, b) => b.version - a.version);
  const bySet = [...sets].sort((a, b) => a.id - b.id);
  const rows = ordered.flatMap((version) => bySet.flatMap((set) => {
    const result = measured.get(`${version.id}:${set.id}`);
    return result ? resultRows(result, latest) : [gapRow(version, set, latest)];
  }));
  const empty = sets.length
    ? "No model version yet: each is measured on every set once it is made."
    : "No evaluation set yet: every version is measured on each one marked.";
  fill(document.getElementById("evaluation-results-table"), rows, empty);
  // Figures on labels changed since want a run as much as missing ones do.
  const outdated = results.filter((result) => result.labels_changed_since).length;
  return rows.filter((row) => row.className === "evaluation-gap").length + outdated;
}

// What the newest evaluation run does or did, and (ML staff) a way to ask for one.
function renderRefill(latest, gaps) {
  const line = document.getElementById("evaluation-refill");
  const button = document.getElementById("evaluation-refill-start");
  let text = "";
  if (latest && latest.status === "queued") {
    text = `Scoring the versions without current figures: an evaluation run is queued (since ${when(latest.created_at)}).`;
  } else if (latest && latest.status === "running") {
    const phase = latest.phase;
    const counted = phase && phase.total ? ` ${phase.done} of ${phase.total} ${phase.unit}` : "";
    const detail = phase && phase.detail ? ` (${phase.detail})` : "";
    text = `Scoring the versions without current figures: ${phase ? phase.name : "starting"}${counted}${detail}.`;
  } else if (latest && latest.status === "failed" && gaps) {
    text = `The last evaluation run failed (${when(latest.finished_at)}): ${latest.error}`;
  } else if (latest && latest.status === "cancelled" && gaps) {
    text = `The last evaluation run was cancelled (${when(latest.finished_at)}), ${latest.filled} figure(s) written.`;
  } else if (latest && gaps) {
    text = `The last evaluation run ended ${when(latest.finished_at)}, ${latest.filled} figure(s) written.`;
  }
  line.textContent = text;
  line.hidden = !text;
  if (button) button.hidden = !(canManage && gaps && !isPending(latest));
  const cancel = document.getElementById("evaluation-refill-cancel");
  cancelling = isPending(latest) && !latest.cancel_requested ? latest : null;
  if (cancel) cancel.hidden = !(canManage && cancelling);
}

// The pending run ML staff may cancel (renderRefill's latest), or null.
let cancelling = null;

let timer = null;

// The newest refresh: one that answers after a newer one began draws nothing and sets no
// timer (an older answer would put back what an action just changed, and each overlap
// would leave one more polling loop behind).
let refreshRequest = 0;

async function refresh() {
  const ticket = ++refreshRequest;
  window.clearTimeout(timer);
  let pending = false;
  try {
    const [sets, results, versions, runs] = await Promise.all([
      api(`/api/v1/projects/${projectId}/evaluation-sets/`),
      api(`/api/v1/projects/${projectId}/evaluation-results/`),
      api(`/api/v1/projects/${projectId}/model-versions/`),
      api(`/api/v1/projects/${projectId}/evaluation-runs/`),
    ]);
    if (ticket !== refreshRequest) return;
    const latest = runs[0] || null;
    pending = isPending(latest);
    renderSets(sets);
    renderRefill(latest, renderResults(sets, results, versions, latest));
  } catch (error) {
    if (ticket !== refreshRequest) return;
    console.error(error);
  }
  timer = window.setTimeout(refresh, pending ? POLL_PENDING_MS : POLL_MS);
}

const refill = document.getElementById("evaluation-refill-start");
if (refill) {
  refill.addEventListener("click", async () => {
    const message = document.getElementById("evaluation-refill-message");
    refill.disabled = true;
    try {
      await api(`/api/v1/projects/${projectId}/evaluation-runs/`, { method: "POST", body: {} });
      showMessage(message, "");
      refresh();
    } catch (error) {
      showMessage(message, errorText(error), "error");
    } finally {
      refill.disabled = false;
    }
  });
}

const cancelButton = document.getElementById("evaluation-refill-cancel");
if (cancelButton) {
  cancelButton.addEventListener("click", async () => {
    const run = cancelling;
    const message = document.getElementById("evaluation-refill-message");
    if (!run || !window.confirm(`Cancel evaluation run #${run.id}? The figures it wrote stay; the rest stay missing until the next run.`)) return;
    cancelButton.disabled = true;
    try {
      await api(`/api/v1/evaluation-runs/${run.id}/cancel/`, { method: "POST" });
      showMessage(message, "");
      refresh();
    } catch (error) {
      showMessage(message, errorText(error), "error");
    } finally {
      cancelButton.disabled = false;
    }
  });
}

const form = document.getElementById("evaluation-set-form");
if (form) {
  const message = document.getElementById("evaluation-set-message");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { import_batch: Number(form.elements.import_batch.value) };
    if (form.elements.name.value) body.name = form.elements.name.value;
    showMessage(message, "Marking…");
    try {
      const marked = await api(`/api/v1/projects/${projectId}/evaluation-sets/`,
        { method: "POST", body });
      showMessage(message, `${marked.name}: ${marked.chains} chains held out.`, "ok");
      const select = form.elements.import_batch;
      select.selectedOptions[0].remove();
      if (!select.options.length) {
        const none = el("option", { text: "No import left to hold out" });
        none.value = "";
        none.disabled = true;
        select.append(none);
        select.value = "";
      }
      refresh();
    } catch (error) {
      showMessage(message, errorText(error), "error");
    }
  });
}

refresh();
