// The ML staff page: start and follow training runs, read and activate model versions,
// start scoring. Everything goes through the REST API (api); every value shown is
// set with textContent, never as markup.

import {
  el,
  api,
  formatWhen,
  errorText,
  formatFixed,
  formatCount,
  formatCounted,
  showMessage,
  NONE,
} from "./steplab.js";
const root = document.getElementById("models-page");
const projectId = root.dataset.projectId;
const canManage = root.dataset.canManage === "true";
// Machine-label runs are started, cancelled and retried by ML staff and leads.
const canRunMachines = root.dataset.canRunMachines === "true";
const BUSY = new Set(["queued", "running"]);
let timer = null;

const when = formatWhen;

function fillRows(table, rows, columns, emptyText) {
  const tbody = table.querySelector("tbody");
  tbody.replaceChildren();
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", { text: emptyText, cls: "muted" });
    td.colSpan = columns;
    tr.append(td);
    tbody.append(tr);
    return;
  }
  rows.forEach((cells) => {
    const tr = el("tr");
    cells.forEach((cell) => {
      const td = el("td");
      if (cell instanceof Node) td.append(cell);
      else td.textContent = cell === null || cell === undefined ? "" : String(cell);
      tr.append(td);
    });
    tbody.append(tr);
  });
}

// ``confirmText``: asked first (window.confirm); nothing happens unless it is accepted.
function actionButton(label, onClick, confirmText = "") {
  const button = el("button", { text: label, cls: "button small-button" });
  button.type = "button";
  button.addEventListener("click", async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    button.disabled = true;
    try {
      await onClick();
    } catch (error) {
      window.alert(errorText(error));
    } finally {
      button.disabled = false;
      refresh();
    }
  });
  return button;
}

// A run's phase as the worker last reported it (at most a second or two old): what it
// does, how far through, how fast and how long it should still take; the phases before
// it with their durations. Words for the phase names the server sends.
const PHASES = {
  snapshot: "Freezing the labels", loading: "Loading", encoding: "Encoding steps",
  training: "Training", evaluating: "Evaluating", comparing: "Comparing with the active version",
  publishing: "Publishing", scoring: "Scoring", simulating: "Simulating", writing: "Writing",
};

function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function phaseText(phase) {
  const parts = [PHASES[phase.name] || phase.name];
  if (phase.detail) parts.push(phase.detail);
  if (phase.total) parts.push(`${formatCount(phase.done)}/${formatCount(phase.total)} ${phase.unit}`);
  else if (phase.done) parts.push(`${formatCount(phase.done)} ${phase.unit}`);
  return parts.join(" · ");
}

function pastText(past) {
  return (past || []).map((p) => `${PHASES[p.name] || p.name} ${duration(p.seconds)}`)
    .join(" · ");
}

// ``fallback``: the run's share done when it has reported no phase (a run from before
// phases were reported).
function phaseCell(run, fallback) {
  const cell = el("div", { cls: "run-phase" });
  const phase = run.phase;
  if (run.status === "queued") {
    cell.append(el("span", { text: run.cancel_requested ? "cancelling…" : "waiting for a worker", cls: "muted" }));
    return cell;
  }
  if (!phase) {
    if (fallback === null || !BUSY.has(run.status)) return cell;
    const bar = el("progress");
    bar.max = 1;
    bar.value = fallback;
    bar.setAttribute("aria-label", `Run ${run.id} progress`);
    cell.append(bar, ` ${Math.round(fallback * 100)}%`);
    return cell;
  }
  if (BUSY.has(run.status)) {
    const bar = el("progress");
    bar.setAttribute("aria-label", `Run ${run.id}: ${PHASES[phase.name] || phase.name}`);
    if (phase.total) {
      bar.max = phase.total;
      bar.value = Math.min(phase.done, phase.total);
    }
    const line = el("div", { text: phaseText(phase), cls: "phase-now" });
    cell.append(bar, line);
    const pace = [];
    if (phase.rate) pace.push(`${phase.rate >= 10 ? Math.round(phase.rate) : phase.rate.toFixed(1)} ${phase.unit}/s`);
    if (phase.eta_seconds !== null && phase.eta_seconds !== undefined) {
      pace.push(`about ${duration(phase.eta_seconds)} left`);
    }
    if (run.cancel_requested) pace.push("cancelling…");
    if (pace.length) cell.append(el("div", { text: pace.join(" · "), cls: "muted phase-pace" }));
  }
  if (run.status === "failed" || run.status === "cancelled") {
    // Where it stopped: what a lost worker was doing when it went silent.
    cell.append(el("div", { text: `stopped while: ${phaseText(phase)}`, cls: "phase-now" }));
  }
  const past = pastText(phase.past);
  if (past) cell.append(el("div", { text: past, cls: "muted phase-past" }));
  return cell;
}

// The status a person reads: a run whose worker died says so.
function statusCell(run) {
  const lost = run.status === "failed" && /^Worker lost/.test(run.error || "");
  const text = lost ? "failed: worker lost" : run.status;
  const cell = el("span", { text, cls: `status-${run.status}` });
  if (run.retry_of) cell.append(el("div", { text: `retry of #${run.retry_of}`, cls: "muted" }));
  return cell;
}

const CANCEL_NOTES = {
  "training-runs": "What it has trained so far is discarded; the active version stays.",
  "scoring-runs": "The queue keeps the order it has.",
  "simulation-runs": "It stores nothing; 'auto' keeps the evidence it has.",
  "machine-label-runs": "What it stored so far stays.",
};
const MESSAGES = {
  "training-runs": "train-message", "scoring-runs": "score-message",
  "simulation-runs": "simulate-message", "machine-label-runs": "machine-label-message",
};

// Cancel while it is queued or running; Retry (a new run, same settings) once it
// failed or was cancelled. ``kind``: "training-runs", "scoring-runs"...; ``allowed``:
// whether the reader may act on runs of that kind.
function runAction(run, kind, what, allowed = canManage) {
  if (!allowed) return "";
  if (BUSY.has(run.status) && !run.cancel_requested) {
    return actionButton(
      "Cancel",
      () => api(`/api/v1/${kind}/${run.id}/cancel/`, { method: "POST" }),
      `Cancel ${what} #${run.id}? ${CANCEL_NOTES[kind]}`,
    );
  }
  if (run.status === "failed" || run.status === "cancelled") {
    return actionButton("Retry", async () => {
      const retry = await api(`/api/v1/${kind}/${run.id}/retry/`, { method: "POST" });
      const message = document.getElementById(MESSAGES[kind]);
      if (message) track(message, kind, retry, what);
    });
  }
  return "";
}

function renderRuns(runs) {
  fillRows(document.getElementById("runs-table"), runs.map((run) => {
    const note = run.error || run.activation_note || "";
    return [`#${run.id} (${run.trigger})`, statusCell(run), phaseCell(run, run.progress),
      lossCell(run), when(run.started_at), note, runAction(run, "training-runs", "training run")];
  }), 7, "No training runs yet.");
  drawLoss(runs);
  return runs.some((run) => BUSY.has(run.status));
}

// A start's message follows its run: it says what the run is doing now, not what it
// was when the request answered. Each message reads its own run (``/<kind>/<id>/``)
// until the run ends, so it never depends on the run lists (capped, and rendered by
// code that may fail) nor on which of two overlapping list reads answered last.
const FOLLOW_MS = 2000;

function trackedText(run, what) {
  const name = `${what[0].toUpperCase()}${what.slice(1)} #${run.id}`;
  if (run.status === "running" && run.phase) return `${name}: ${phaseText(run.phase)}.`;
  if (run.status === "failed") return `${name} failed: ${run.error}`;
  return `${name} ${run.status}.`;
}

function showTracked(message, run, what) {
  showMessage(message, trackedText(run, what), run.status === "failed" ? "error" : "info");
}

function track(message, kind, created, what) {
  const generation = (message.dataset.follows = String(created.id));
  // A simulation started here refreshes the evidence when it ends, however fast.
  if (kind === "simulation-runs") simulating.add(created.id);
  showTracked(message, created, what);
  refresh();
  const follow = async () => {
    if (message.dataset.follows !== generation) return;  // a newer start took the message
    try {
      const run = await api(`/api/v1/${kind}/${created.id}/`);
      if (message.dataset.follows !== generation) return;
      showTracked(message, run, what);
      if (!BUSY.has(run.status)) return;
    } catch (error) {
      console.error(error);
    }
    window.setTimeout(follow, FOLLOW_MS);
  };
  if (BUSY.has(created.status)) window.setTimeout(follow, FOLLOW_MS);
}

// The loss curve shown under the runs: the run chosen in the table, else the newest run
// that trains or has trained (its loss history, thinned by the server to a few hundred
// points), redrawn at every poll, so a running run's curve grows as it learns.
let chosenRun = null;
let lossChart = null;

function lossCell(run) {
  if (!run.loss_history || !run.loss_history.length) return formatFixed(run.last_loss, 4);
  const link = el("button", { text: formatFixed(run.last_loss, 4), cls: "link-button" });
  link.type = "button";
  link.title = `Show run #${run.id}'s loss curve`;
  link.addEventListener("click", () => {
    chosenRun = run.id;
    refresh();
  });
  return link;
}

function drawLoss(runs) {
  const withLoss = runs.filter((run) => run.loss_history && run.loss_history.length);
  const shown = withLoss.find((run) => run.id === chosenRun)
    || withLoss.find((run) => BUSY.has(run.status)) || withLoss[0];
  const box = document.getElementById("loss-curve");
  if (!shown || !window.Chart) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  document.getElementById("loss-title").textContent =
    `Training loss · run #${shown.id} (${shown.status})`;
  const points = shown.loss_history;
  const data = {
    labels: points.map((_, i) => i + 1),
    datasets: [{
      label: `run #${shown.id}`,
      data: points,
      borderColor: "#2b59c3",
      backgroundColor: "#2b59c3",
      borderWidth: 2,
      // One point has no line to draw: mark every point then.
      pointRadius: points.length === 1 ? 4 : 0,
    }],
  };
  if (lossChart) lossChart.destroy();
  lossChart = new window.Chart(document.getElementById("loss-chart"), {
    type: "line",
    data,
    options: {
      animation: false,
      maintainAspectRatio: false,
      plugins: { legend: { display: false } },
      scales: {
        x: { title: { display: true, text: "training progress (reports)" }, offset: points.length === 1 },
        y: { title: { display: true, text: "loss" } },
      },
    },
  });
}

// Says plainly whether the version's held-out F1 and AUROC beat every rule that reads no
// step (fitted on the same training chains, scored on the same held-out ones); the
// server words it (``verdict_against_rules``).
function againstRules(verdict, zeroShot) {
  if (zeroShot && (!verdict || verdict.beaten === null)) {
    return el("span", { text: "zero-shot: no labeled held-out chains to compare it on", cls: "muted" });
  }
  if (!verdict || verdict.beaten === null) return NONE;
  return el("span", { text: verdict.text, cls: verdict.beaten ? "rules-beaten" : "rules-not-beaten" });
}

// The verdict against the rules, and a warning when windows cut some chains' text
// (the run kept their head and tail; a longer max_length or backbone would read it all).
function verdictCell(version) {
  const metrics = version.metrics;
  const cell = el("div");
  cell.append(againstRules(version.against_rules, version.zero_shot));
  const cut = metrics.truncated_chains;
  if (typeof cut === "number" && cut > 0) {
    const chains = cut === 1 ? "1 chain" : `${cut} chains`;
    const note = el("div", { text: `${chains} cut to fit max_length`, cls: "muted truncated" });
    // What the overlapping windows still could not hold (ml/data.py ``truncation``).
    note.title = `${metrics.truncated_problems || 0} problems and ` +
      `${metrics.truncated_steps || 0} steps keep only their head and tail; ` +
      `${metrics.truncated_context_steps || 0} steps are scored without some of the ` +
      "steps before them.";
    cell.append(note);
  }
  return cell;
}

function renderVersions(versions) {
  fillRows(document.getElementById("versions-table"), versions.map((v) => {
    const action = canManage && !v.is_active
      ? actionButton(
        "Activate",
        () => api(`/api/v1/model-versions/${v.id}/activate/`, { method: "POST" }),
        `Make v${v.version} the active version? The next scoring runs and the queue's ` +
          "priorities will follow it instead of the current one.",
      )
      : "";
    // A zero-shot version (an open PRM's own step scores) says so; one made before the
    // project had a label has no snapshot.
    const name = el("span", { text: `v${v.version}` });
    if (v.zero_shot) name.append(el("span", { text: "zero-shot", cls: "zero-shot-tag" }));
    const snapshot = v.snapshot_label === null ? NONE : v.snapshot_label;
    return [name, snapshot, formatFixed(v.metrics.processbench_f1, 3),
      formatFixed(v.metrics.step_auroc, 3), formatFixed(v.metrics.first_error_accuracy, 3),
      verdictCell(v), when(v.created_at), v.is_active ? "active" : "", action];
  }), 9, "No model versions yet.");
  plot([...versions].reverse());
}

function plot(versions) {
  const svg = document.getElementById("versions-plot");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const width = 600, height = 200, pad = 30;
  const axis = document.createElementNS(ns, "path");
  axis.setAttribute("d", `M${pad} ${pad / 2} V${height - pad} H${width - pad / 2}`);
  axis.setAttribute("stroke", "#999");
  axis.setAttribute("fill", "none");
  svg.append(axis);
  [0, 0.5, 1].forEach((tick) => {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", 2);
    label.setAttribute("y", height - pad - tick * (height - 1.5 * pad) + 4);
    label.setAttribute("font-size", "10");
    label.textContent = tick.toFixed(1);
    svg.append(label);
  });
  if (!versions.length) return;
  const x = (i) => pad + (versions.length === 1 ? 0.5 : i / (versions.length - 1)) * (width - 2 * pad);
  const y = (value) => height - pad - value * (height - 1.5 * pad);
  [["processbench_f1", "line-f1"], ["step_auroc", "line-auroc"]].forEach(([key, cls]) => {
    const points = versions
      .map((v, i) => [i, v.metrics[key]])
      .filter(([, value]) => typeof value === "number" && Number.isFinite(value))
      .map(([i, value]) => [x(i), y(value)]);
    if (!points.length) return;
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", points.map(([px, py]) => `${px},${py}`).join(" "));
    line.setAttribute("class", cls);
    svg.append(line);
    // A marker on every version, so one version (no line yet) still shows its point.
    points.forEach(([px, py]) => {
      const dot = document.createElementNS(ns, "circle");
      dot.setAttribute("cx", px);
      dot.setAttribute("cy", py);
      dot.setAttribute("r", 3.5);
      dot.setAttribute("class", `${cls} point`);
      svg.append(dot);
    });
  });
  versions.forEach((v, i) => {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", x(i) - 6);
    label.setAttribute("y", height - pad + 14);
    label.setAttribute("font-size", "10");
    label.textContent = `v${v.version}`;
    svg.append(label);
  });
}

function renderScoring(runs) {
  fillRows(document.getElementById("scoring-table"), runs.map((run) => {
    const status = statusCell(run);
    if (run.error) status.append(el("div", { text: run.error, cls: "muted" }));
    const progress = phaseCell(run, null);
    if (!(BUSY.has(run.status) && run.phase) && (run.chains_total || run.status === "succeeded")) {
      progress.prepend(el("div", { text: `${formatCount(run.chains_scored)}/${formatCount(run.chains_total)} chains` }));
    }
    const cut = run.truncation && run.truncation.truncated_chains;
    if (cut) progress.append(el("div", { text: `${formatCount(cut)} cut to fit max_length`, cls: "muted truncated" }));
    return [`#${run.id}`, `v${run.model_version_number}`, strategyCell(run), status,
      progress, run.priorities_updated, when(run.finished_at),
      runAction(run, "scoring-runs", "scoring run")];
  }), 8, "No scoring runs yet.");
  return runs.some((run) => BUSY.has(run.status));
}

// The strategy asked for, the one applied when they differ (the cold-start rule: random
// picks while the version does not beat the rules), and why: the run's note ('auto''s
// choice, the cold-start rule, a zero-shot version steering with nothing to compare).
function strategyCell(run) {
  const differs = run.applied_strategy && run.applied_strategy !== run.strategy;
  if (!differs && !run.strategy_note) return run.strategy;
  const cell = el("div");
  cell.append(el("span", { text: differs ? `${run.strategy} → ${run.applied_strategy}` : run.strategy }));
  cell.append(el("div", { text: run.strategy_note, cls: "muted strategy-note" }));
  return cell;
}

// Simulation runs: a run that ends while the page is open refreshes the evidence table
// and the strategy 'auto' applies (both read from the loop settings), so what the page
// says follows what the run stored.
const simulating = new Set();

function renderSimulations(runs) {
  fillRows(document.getElementById("simulation-table"), runs.map((run) => {
    const status = statusCell(run);
    if (run.error) status.append(el("div", { text: run.error, cls: "muted" }));
    const chosen = run.evidence && run.evidence.chosen
      ? el("div", { text: run.evidence.chosen }) : "";
    if (chosen) chosen.append(el("div", { text: run.evidence.why, cls: "muted strategy-note" }));
    return [`#${run.id}`, `${run.size}: ${run.seeds} seeds, ${run.rounds} rounds`, status,
      phaseCell(run, null), chosen, when(run.finished_at),
      runAction(run, "simulation-runs", "simulation run")];
  }), 7, "No simulation runs yet.");
  const ended = runs.filter((run) => simulating.has(run.id) && !BUSY.has(run.status));
  runs.forEach((run) => (BUSY.has(run.status) ? simulating.add(run.id) : simulating.delete(run.id)));
  if (ended.some((run) => run.status === "succeeded")) refreshEvidence();
  return runs.some((run) => BUSY.has(run.status));
}

// Machine-label runs: what each generated, and what it wrote (chains imported, labels,
// judge answers that could not be parsed).
function machineParams(run) {
  const p = run.params || {};
  const parts = [`n=${p.n}`, `T=${p.temperature}`, `top-p=${p.top_p}`,
    `≤${p.max_new_tokens} tokens`, `seed ${p.seed}`];
  if (p.mode) parts.push(p.mode);
  return parts.join(", ");
}

function machineResult(run) {
  const r = run.result || {};
  const parts = [];
  if (run.kind === "sample") {
    if (r.chains_created !== undefined) parts.push(`${formatCounted(r.chains_created, "chain")} imported`);
    if (r.chains_duplicate) parts.push(formatCounted(r.chains_duplicate, "duplicate"));
    if (r.graded) parts.push(`${formatCount(r.correct || 0)}/${formatCount(r.graded)} answers right`);
    if (r.empty) parts.push(`${formatCount(r.empty)} empty`);
  } else {
    if (r.labels !== undefined) parts.push(formatCounted(r.labels, "step label"));
    if (r.samples !== undefined) parts.push(formatCounted(r.samples, "judge sample"));
    if (r.unparsed) parts.push(`${formatCount(r.unparsed)} unparsed`);
  }
  return parts.join(", ");
}

function renderMachineLabels(runs) {
  const table = document.getElementById("machine-label-table");
  if (!table) return false;
  fillRows(table, runs.map((run) => {
    const status = statusCell(run);
    if (run.error) status.append(el("div", { text: run.error, cls: "muted" }));
    const name = el("div", { text: `#${run.id} ${run.kind}` });
    name.append(el("div", { text: `${formatCount(run.items_done)}/` +
      formatCounted(run.items_total, run.kind === "sample" ? "problem" : "chain"), cls: "muted" }));
    const model = el("div", { text: run.model_name });
    model.append(el("div", { text: machineParams(run), cls: "muted" }));
    return [name, model, status, phaseCell(run, null),
      `${formatCounted(run.completions, "completion")}, ${formatCounted(run.tokens, "token")}`,
      machineResult(run), when(run.finished_at),
      runAction(run, "machine-label-runs", `${run.kind} run`, canRunMachines)];
  }), 8, "No machine-label runs yet.");
  return runs.some((run) => BUSY.has(run.status));
}

// The start form: the items by a filter, or by the ids typed (problems for a sampling
// run, chains otherwise); the mode is a rollout run's alone.
const machineForm = document.getElementById("machine-label-form");
if (machineForm) {
  const message = document.getElementById("machine-label-message");
  machineForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = formValues(machineForm, ["n", "temperature", "top_p", "max_new_tokens",
      "seed"]);
    const ids = body.ids;
    delete body.ids;
    if (body.kind !== "rollout") delete body.mode;
    if (body.filter === "ids") {
      delete body.filter;
      const key = body.kind === "sample" ? "problems" : "chains";
      body[key] = String(ids || "").split(/[\s,]+/).filter(Boolean).map(Number);
    }
    showMessage(message, "Starting…");
    try {
      const created = await api(`/api/v1/projects/${projectId}/machine-label-runs/`,
        { method: "POST", body });
      track(message, "machine-label-runs", created, `${created.kind} run`);
    } catch (error) {
      showMessage(message, errorText(error), "error");
    }
  });
}

const GAPS = ["processbench_f1", "step_auroc", "first_error_accuracy"];

async function refreshEvidence() {
  const loop = await api(`/api/v1/projects/${projectId}/training-settings/`);
  const evidence = loop.strategy_evidence || {};
  const box = document.getElementById("evidence");
  box.replaceChildren();
  if (evidence.lines && evidence.lines.length) {
    const table = el("table", { cls: "table table-stack evidence" });
    table.id = "evidence-table";
    table.append(el("caption", { text: `Strategies against random on this project's ${evidence.chains} ` +
      `labeled chains (snapshot ${evidence.snapshot_label || `v${evidence.snapshot}`}, ${evidence.seeds} seeds, ` +
      `${evidence.rounds} rounds of ${evidence.batch}): paired difference at the last round, ` +
      "95% interval", cls: "muted" }));
    const head = el("thead");
    const row = el("tr");
    ["Strategy", "ΔF1", "ΔAUROC", "ΔFirst-error acc.", "Labeled steps"]
      .forEach((name) => row.append(el("th", { text: name })));
    head.append(row);
    table.append(head, el("tbody"));
    box.append(table);
    fillRows(table, evidence.lines.map((line) => [line.strategy,
      ...GAPS.map((gap) => (line[gap] ? line[gap].text : "")), line.labeled_steps]), 5, "");
  }
  const now = document.getElementById("applied-now");
  const why = document.getElementById("applied-why");
  if (now && why) {
    now.textContent = loop.applied_strategy.strategy;
    why.textContent = loop.applied_strategy.why;
  }
}

// The newest refresh: one that answers after a newer one began draws nothing and sets no
// timer (an older answer would put back what an action just changed, and each overlap
// would leave one more polling loop behind).
let refreshRequest = 0;

async function refresh() {
  const ticket = ++refreshRequest;
  window.clearTimeout(timer);
  let busy = false;
  try {
    const [runs, versions, scoring, simulations, machineRuns] = await Promise.all([
      api(`/api/v1/projects/${projectId}/training-runs/`),
      api(`/api/v1/projects/${projectId}/model-versions/`),
      api(`/api/v1/projects/${projectId}/scoring-runs/`),
      api(`/api/v1/projects/${projectId}/simulation-runs/`),
      api(`/api/v1/projects/${projectId}/machine-label-runs/`),
    ]);
    if (ticket !== refreshRequest) return;
    busy = renderRuns(runs) | renderScoring(scoring) | renderSimulations(simulations)
      | renderMachineLabels(machineRuns);
    renderVersions(versions);
  } catch (error) {
    if (ticket !== refreshRequest) return;
    console.error(error);
  }
  // Poll quickly while something runs, slowly otherwise (an automatic run may start).
  timer = window.setTimeout(refresh, busy ? 2000 : 15000);
}

function formValues(form, numeric) {
  const data = {};
  new FormData(form).forEach((value, key) => {
    if (value === "") return;
    data[key] = numeric.includes(key) ? Number(value) : value;
  });
  return data;
}

// A start answers at once with the queued run; its message then follows the run.
function bindForm(id, messageId, numeric, kind, what) {
  const form = document.getElementById(id);
  if (!form) return;
  const message = document.getElementById(messageId);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showMessage(message, "Starting…");
    try {
      const created = await api(`/api/v1/projects/${projectId}/${kind}/`,
        { method: "POST", body: formValues(form, numeric) });
      track(message, kind, created, what);
    } catch (error) {
      showMessage(message, errorText(error), "error");
    }
  });
}

bindForm("train-form", "train-message",
  ["epochs", "head_epochs", "learning_rate", "batch_size"], "training-runs", "training run");
bindForm("zero-shot-form", "zero-shot-message", ["max_length"], "training-runs",
  "zero-shot run");
bindForm("score-form", "score-message", ["random_fraction"], "scoring-runs", "scoring run");
bindForm("simulate-form", "simulate-message", ["seeds", "rounds"], "simulation-runs",
  "simulation run");
// Loop settings: one PATCH with the loop fields and the automatic runs' config (sent
// whole: a blank field falls back to the default).
const settingsForm = document.getElementById("settings-form");
if (settingsForm) {
  const LOOP = ["acquisition_strategy", "random_fraction", "retrain_every_n_finished"];
  const NUMERIC = ["random_fraction", "retrain_every_n_finished", "epochs", "head_epochs",
    "learning_rate", "batch_size"];
  const message = document.getElementById("settings-message");
  settingsForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = formValues(settingsForm, NUMERIC);
    delete values.promotion_needs_evaluation_sets;
    delete values.judge_template;
    const body = {
      default_config: {},
      promotion_needs_evaluation_sets: settingsForm.elements.promotion_needs_evaluation_sets.checked,
      // Sent as typed, blank too: blank is ProcessBench's template.
      judge_template: settingsForm.elements.judge_template.value,
    };
    Object.entries(values).forEach(([key, value]) => {
      if (LOOP.includes(key)) body[key] = value;
      else body.default_config[key] = value;
    });
    showMessage(message, "Saving…");
    try {
      await api(`/api/v1/projects/${projectId}/training-settings/`, { method: "PATCH", body });
      showMessage(message, "Saved.", "ok");
    } catch (error) {
      showMessage(message, errorText(error), "error");
    }
  });
}

refresh();
