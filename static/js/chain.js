// One chain in the data manager: its steps with every current rating and the PRM's step
// scores, every revision with who and when, every lease with its skip or flag reason, and
// the lead's actions (unflag, requeue for one more label, mark gold), all through the API.
// Text from imports and people goes in with textContent only; KaTeX renders math after.

import {
  $,
  el,
  api,
  renderMath,
  machineFirstError,
  machineText,
  machineTitle,
  MACHINE_SHORT,
  routingBadge,
  formatWhen,
  errorText,
  showMessage,
  NONE,
} from "./steplab.js";
const config = JSON.parse(document.getElementById("chain-config").textContent);
const root = $("chain");
const SYMBOL = { 1: "+1", 0: "0", "-1": "−1" };

const message = $("cp-message");

function when(value) {
  return value ? formatWhen(value) : "";
}

// One row a step: its text, every current vote (a voter's name cut to fit, in full in
// its title and on a phone), the consensus, both methods and the PRM's score. Each
// figure carries its column's name (data-label) for the phone, where a step is a block.
function steps(chain, labels) {
  const table = $("cp-steps");
  const head = el("tr");
  head.append(el("th", { text: "#" }), el("th", { text: "Step", cls: "cp-step-head" }));
  for (const column of labels.columns) {
    const th = el("th", { cls: "cp-voter-col" });
    th.append(el("span", { text: column.by, cls: "cp-voter" }));
    th.title = `${column.by} (${column.source})`;
    head.append(th);
  }
  const used = labels.consensus_method === "dawid_skene" ? "Dawid–Skene" : "Majority";
  head.append(
    el("th", { text: "Consensus" }),
    el("th", { text: used === "Majority" ? "Majority (used)" : "Majority" }),
    el("th", { text: used === "Dawid–Skene" ? "Dawid–Skene (used)" : "Dawid–Skene" }),
  );
  // Machine sources after the people's figures, marked as machines: never votes.
  for (const column of labels.machine) {
    const th = el("th", { cls: "cp-machine-col" });
    th.append(el("span", { text: MACHINE_SHORT[column.source] || column.source, cls: "cp-machine-name" }), el("span", { text: "machine", cls: "cp-machine-tag" }));
    th.title = `${column.name} (machine, not a vote): ${column.runs.join(", ")}`;
    th.dataset.source = column.source;
    head.append(th);
  }
  head.append(el("th", { text: "PRM P(correct)" }));
  table.tHead.replaceChildren(head);
  const byIndex = new Map(labels.steps.map((step) => [step.index, step]));
  const figure = (label, text, className) => {
    const cell = el("td", { text, cls: `cp-figure ${className || ""}`.trim() });
    cell.dataset.label = label;
    return cell;
  };
  table.tBodies[0].replaceChildren(
    ...chain.steps.map((step) => {
      const tr = el("tr");
      const labeled = byIndex.get(step.index);
      const text = el("td", { cls: "math cp-step" });
      renderMath(text, step.text);
      tr.append(el("td", { text: String(step.index + 1), cls: "cp-no" }), text);
      labels.columns.forEach((column, i) => {
        const rating = labeled ? labeled.ratings[i] : null;
        const vote = figure(
          column.by,
          rating === null || rating === undefined ? "·" : SYMBOL[rating],
          "cp-vote",
        );
        vote.dataset.rating = rating === null || rating === undefined ? "" : String(rating);
        tr.append(vote);
      });
      const consensus = labeled && labeled.consensus !== null ? SYMBOL[labeled.consensus] : "·";
      tr.append(
        figure("Consensus", labeled && labeled.tied ? `${consensus} (tie)` : consensus),
        figure("Majority", majorityText(labeled), "cp-majority"),
        figure("Dawid–Skene", dawidSkeneText(labeled), "cp-dawid-skene"),
      );
      for (const column of labels.machine) {
        const verdict = column.steps[step.index] || null;
        const cell = figure(MACHINE_SHORT[column.source] || column.source, machineText(verdict), "cp-machine");
        cell.dataset.source = column.source;
        cell.dataset.rating = verdict && verdict.rating !== null ? String(verdict.rating) : "";
        cell.title = machineTitle(column, verdict);
        tr.append(cell);
      }
      const score = chain.step_scores ? chain.step_scores[step.index] : null;
      tr.append(figure("PRM", score === null || score === undefined ? NONE : score.toFixed(2)));
      return tr;
    }),
  );
}

// Both methods side by side, ties shown as ties (never as a label to take).
function majorityText(labeled) {
  const majority = labeled ? labeled.majority : null;
  if (!majority || majority.label === null) return "·";
  if (majority.tied) return "tie";
  return `${SYMBOL[majority.label]} (${Math.round(majority.support * 100)} %)`;
}

function dawidSkeneText(labeled) {
  const learned = labeled ? labeled.dawid_skene : null;
  if (!learned) return "·";
  if (learned.tied) return "tie";
  return `${SYMBOL[learned.label]} (p ${learned.probability.toFixed(2)})`;
}

function history(labels) {
  $("cp-history").replaceChildren(
    ...labels.history.map((revision) => {
      const ratings = Object.entries(revision.ratings)
        .map(([index, rating]) => `${Number(index) + 1}:${SYMBOL[rating]}`)
        .join(" ");
      const state = revision.current ? "current" : "superseded";
      const text = `${revision.by} (${revision.source}) · ${when(revision.created_at)} · ${state} · ${ratings}`;
      const li = el("li", { text });
      if (revision.note) li.append(el("div", { text: `Note: ${revision.note}`, cls: "muted" }));
      return li;
    }),
  );
  if (!labels.history.length) $("cp-history").append(el("li", { text: "No labels yet.", cls: "muted" }));
}

function leases(chain) {
  $("cp-leases").replaceChildren(
    ...chain.leases.map((lease) => {
      const li = el("li", { text: `${lease.annotator} · ${lease.status} · ${when(lease.created_at)}` });
      if (lease.reason) li.append(el("div", { text: `Reason: ${lease.reason}`, cls: "muted" }));
      return li;
    }),
  );
  if (!chain.leases.length) $("cp-leases").append(el("li", { text: "Never leased.", cls: "muted" }));
}

function show(chain, labels) {
  $("cp-status").textContent = chain.status.replace("_", " ");
  const routed = routingBadge(chain.routing);
  $("cp-routing").replaceChildren(...(routed ? [routed] : []));
  if (routed) routed.title = "Where routing sent it (Settings, Routing)";
  renderMath($("cp-problem"), chain.problem);
  renderMath($("cp-final"), chain.final_answer);
  $("cp-counts").textContent =
    `${chain.finished_count} of ${chain.needed} human passes` + (chain.is_gold ? " · gold" : "");
  const flag = $("cp-flag");
  if (chain.is_flagged) {
    flag.textContent = `Flagged by ${chain.flagged_by || "someone"} ${when(chain.flagged_at)}: ${chain.flag_reason}`;
  } else if (chain.flag_cleared_by) {
    flag.textContent = `Flag cleared by ${chain.flag_cleared_by} ${when(chain.flag_cleared_at)} (was: ${chain.flag_reason})`;
  }
  flag.hidden = !chain.is_flagged && !chain.flag_cleared_by;
  $("cp-machine").hidden = !labels.machine.length;
  $("cp-machine").textContent = labels.machine.length
    ? "Machine first error (never a vote): " +
      labels.machine
        .map((column) => {
          const agrees =
            column.agrees_with_consensus === null ? "" : column.agrees_with_consensus ? ", as people" : ", unlike people";
          return `${column.name} ${machineFirstError(column.first_error)}${agrees}`;
        })
        .join(" · ")
    : "";
  $("cp-unflag").hidden = !chain.is_flagged;
  // Gold needs an answer key (annotation.quality.gold): a current adjudication or
  // imported labels. Without one the button would only fail, so it is not offered.
  const keyed = labels.history.some(
    (revision) => revision.current && (revision.source === "adjudication" || revision.source === "import"),
  );
  $("cp-gold").hidden = chain.is_gold || !keyed;
  $("cp-gold-note").hidden = chain.is_gold || keyed;
  $("cp-requeue").hidden = chain.is_gold;
  steps(chain, labels);
  history(labels);
  leases(chain);
}

async function load() {
  const [chain, labels] = await Promise.all([api(config.api.chain), api(config.api.labels)]);
  show(chain, labels);
  root.dataset.state = "ready";
}

async function act(button, call, done) {
  button.disabled = true;
  try {
    await call();
    await load();
    showMessage(message, done, "ok");
  } catch (error) {
    showMessage(message, `Not done: ${errorText(error)}`, "error");
  } finally {
    button.disabled = false;
  }
}

$("cp-unflag").addEventListener("click", (event) =>
  act(event.target, () => api(config.api.unflag, { method: "POST" }), "Unflagged: back in the queue."),
);
$("cp-requeue").addEventListener("click", (event) =>
  act(
    event.target,
    () => api(config.api.requeue, { method: "POST", body: { more: 1 } }),
    "Requeued: the chain asks for one more label.",
  ),
);
$("cp-gold").addEventListener("click", (event) =>
  act(
    event.target,
    () => api(config.api.goldMark, { method: "POST", body: { chain_ids: [config.chainId] } }),
    "Marked gold.",
  ),
);
load().catch((error) => {
  showMessage(message, `Could not load the chain: ${errorText(error)}`, "error");
  root.dataset.state = "error";
});
