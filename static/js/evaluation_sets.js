// The ML page's evaluation sets: the sets a lead held out (a lead marks and unmarks them
// here), and each model version's figures on each set, per subset, against the strongest
// baseline that reads no step, with 95% intervals. Everything goes through the REST API
// (api); every value shown is set with textContent, never as markup.

import { el, api, formatWhen, errorText, showMessage, NONE } from "./steplab.js";
const root = document.getElementById("models-page");
const section = document.getElementById("evaluation-sets");
const projectId = root.dataset.projectId;
const canLead = section.dataset.canLead === "true";
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
  rows.forEach(({ cells, className }) => {
    const tr = el("tr", { cls: className });
    cells.forEach((cell) => {
      const td = el("td");
      if (cell instanceof Node) td.append(cell);
      else td.textContent = cell === null || cell === undefined ? "" : String(cell);
      tr.append(td);
    });
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
function resultRows(result) {
  const report = result.report || {};
  const scores = report.scores || {};
  const model = scores.model || {};
  const strongest = report.strongest || {};
  const versus = report.versus_strongest || {};
  const figures = (report.subsets || []).map((s) => [`subset_f1:${s.name}`, s.name, s.chains]);
  figures.push(["mean_subset_f1", "mean over subsets", report.chains]);
  const head = el("div");
  head.append(el("strong", { text: result.evaluation_set_name }));
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

function renderResults(results) {
  fill(document.getElementById("evaluation-results-table"), results.flatMap(resultRows),
    "No version has been measured on an evaluation set yet: the next training run will be.");
}

async function refresh() {
  try {
    const [sets, results] = await Promise.all([
      api(`/api/v1/projects/${projectId}/evaluation-sets/`),
      api(`/api/v1/projects/${projectId}/evaluation-results/`),
    ]);
    renderSets(sets);
    renderResults(results);
  } catch (error) {
    console.error(error);
  }
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
window.setInterval(refresh, 15000);
