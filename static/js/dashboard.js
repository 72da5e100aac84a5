// The lead dashboard: draws the numbers of GET /api/v1/projects/{id}/dashboard/ with
// Chart.js (installed from the npm registry, served under /static/vendor/chartjs/).
// Usernames are data: they reach the page through textContent and Chart.js's canvas
// text only, never as markup.

import {
  $,
  el,
  api,
  formatWhen,
  showMessage,
  formatPercent,
  formatFixed,
  NONE,
} from "./steplab.js";
const config = JSON.parse(document.getElementById("dashboard-config").textContent);
const root = $("dashboard");
const COLORS = {
  correct: "#1f8a4c",
  ambiguous: "#b7791f",
  incorrect: "#c0392b",
  accent: "#2f5bd3",
  muted: "#5f6b7a",
};
// One color per annotator, reused in order.
const PALETTE = [
  "#2f5bd3", "#1f8a4c", "#b7791f", "#8e44ad", "#c0392b", "#16a085", "#d35400", "#2c3e50",
];

function seconds(ms) {
  return ms === null || ms === undefined ? null : Math.round(ms / 100) / 10;
}

// "figures" lines: [["label", "value"], ...] as "label <strong>value</strong>" pairs.
function figures(target, pairs) {
  target.replaceChildren(
    ...pairs.flatMap(([label, value], i) => [
      document.createTextNode(`${i ? " · " : ""}${label} `),
      el("strong", { text: String(value) }),
    ]),
  );
}

// Stacked bars of whole counts: no 0.5 annotations on the axis.
const STACKED_COUNTS = {
  scales: {
    x: { stacked: true },
    y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } },
  },
};

const charts = {};
function chart(id, type, data, options = {}) {
  if (charts[id]) charts[id].destroy();
  if (type === "line" && data.labels.length === 1) {
    // One day has no line to draw: centre its point and give every series a marker.
    options = { ...options, scales: { ...options.scales, x: { offset: true } } };
    data.datasets.forEach((dataset) => (dataset.pointRadius = 3));
  }
  charts[id] = new window.Chart($(id), {
    type,
    data,
    options: {
      animation: false, // drawn at once: the numbers matter, not the motion
      maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
      ...options,
    },
  });
  return charts[id];
}

function render(data) {
  const days = data.days;
  const progress = data.progress;

  if (progress.chains_flagged) {
    $("db-flagged").textContent =
      `${progress.chains_flagged} chain${progress.chains_flagged === 1 ? " is" : "s are"} ` +
      "flagged as broken and out of the queue.";
    $("db-flagged").hidden = false;
    loadFlags();
  }

  chart(
    "chart-progress",
    "line",
    {
      labels: days,
      datasets: [
        {
          label: "Annotations submitted (cumulative)",
          data: data.annotations_cumulative,
          borderColor: COLORS.accent,
          backgroundColor: "rgba(47, 91, 211, 0.12)",
          fill: true,
          tension: 0.2,
        },
        {
          label: "Annotations needed",
          data: days.map(() => progress.annotations_needed),
          borderColor: COLORS.muted,
          borderDash: [6, 4],
          pointRadius: 0,
        },
      ],
    },
    { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
  );

  chart(
    "chart-throughput",
    "bar",
    {
      labels: days,
      datasets: data.throughput.map((row, i) => ({
        label: row.username,
        data: row.per_day,
        backgroundColor: PALETTE[i % PALETTE.length],
      })),
    },
    STACKED_COUNTS,
  );

  const totals = data.labels.totals;
  const perDay = data.labels.per_day;
  const rated = totals["1"] + totals["0"] + totals["-1"];
  const share = (n) => (rated ? ` (${Math.round((n / rated) * 100)} %)` : "");
  figures($("db-label-totals"), [
    ["+1", `${totals["1"]}${share(totals["1"])}`],
    ["0", `${totals["0"]}${share(totals["0"])}`],
    ["−1", `${totals["-1"]}${share(totals["-1"])}`],
  ]);
  chart(
    "chart-labels",
    "bar",
    {
      labels: days,
      datasets: [
        { label: "+1 correct", data: perDay["1"], backgroundColor: COLORS.correct },
        { label: "0 ambiguous", data: perDay["0"], backgroundColor: COLORS.ambiguous },
        { label: "−1 incorrect", data: perDay["-1"], backgroundColor: COLORS.incorrect },
      ],
    },
    STACKED_COUNTS,
  );

  const agreement = data.agreement;
  figures($("db-agreement-figures"), [
    ["alpha", formatFixed(agreement.alpha)],
    ["on", `${agreement.steps} steps`],
    ["first-error agreement", formatPercent(agreement.first_error_agreement)],
  ]);
  chart(
    "chart-agreement",
    "line",
    {
      labels: days,
      datasets: [
        {
          label: "Krippendorff's alpha (cumulative)",
          data: agreement.per_day,
          borderColor: COLORS.accent,
          spanGaps: true,
          tension: 0.2,
        },
      ],
    },
    { scales: { y: { suggestedMin: 0, suggestedMax: 1 } } },
  );

  const time = data.time_per_chain;
  figures($("db-time-figures"), [
    ["median", time.median_ms === null ? NONE : `${seconds(time.median_ms)} s`],
    ["p90", time.p90_ms === null ? NONE : `${seconds(time.p90_ms)} s`],
    ["over", `${time.chains} chains`],
  ]);
  chart(
    "chart-time",
    "line",
    {
      labels: days,
      datasets: [
        {
          label: "median (s)",
          data: time.per_day.map((d) => seconds(d.median_ms)),
          borderColor: COLORS.accent,
          spanGaps: true,
        },
        {
          label: "p90 (s)",
          data: time.per_day.map((d) => seconds(d.p90_ms)),
          borderColor: COLORS.ambiguous,
          spanGaps: true,
        },
      ],
    },
    { scales: { y: { beginAtZero: true } } },
  );

  renderAnnotators(data);
  renderPrelabels(data.prelabels || null);
  if (data.gold) {
    $("db-gold-chart").hidden = false;
    chart(
      "chart-gold",
      "line",
      {
        labels: days,
        datasets: [
          {
            label: "Step accuracy on gold chains (cumulative)",
            data: data.gold.per_day,
            borderColor: COLORS.correct,
            spanGaps: true,
          },
        ],
      },
      { scales: { y: { suggestedMin: 0, suggestedMax: 1 } } },
    );
  }
}

// Verification: the two arms side by side, each figure with its 95 % interval.
function renderPrelabels(effect) {
  $("db-prelabels").hidden = effect === null;
  if (effect === null) return;
  const share = (p) =>
    p.rate === null
      ? NONE
      : `${formatPercent(p.rate)} [${formatPercent(p.low)}, ${formatPercent(p.high)}] of ${p.total} steps`;
  const secs = (m) => {
    if (m.mean === null) return NONE;
    const range = m.low === null ? "" : ` [${m.low.toFixed(1)}, ${m.high.toFixed(1)}]`;
    return `${m.mean.toFixed(1)} s${range} over ${m.n} chains`;
  };
  const heads = ["", "With pre-labels", "Held out"];
  const rows = [
    ["Chains", String(effect.shown.chains), String(effect.held_out.chains)],
    ["Agree with the machine", share(effect.shown.agreement), share(effect.held_out.agreement)],
    ["Seconds per chain", secs(effect.shown.seconds), secs(effect.held_out.seconds)],
    [
      "Gold step accuracy",
      share(effect.shown.gold_accuracy),
      share(effect.held_out.gold_accuracy),
    ],
  ].map((cells) => {
    const tr = el("tr");
    cells.forEach((text, i) => {
      const td = el("td", { text });
      if (i) td.dataset.label = heads[i];
      tr.append(td);
    });
    return tr;
  });
  $("db-prelabels-table").tBodies[0].replaceChildren(...rows);
  const sources = { judge: "Judge", monte_carlo: "Monte-Carlo", prm: "PRM", import: "Import" };
  $("db-prelabels-about").textContent =
    `Source now: ${sources[effect.source] || effect.source}; ${formatPercent(effect.holdout)} of chains held out per annotator. ` +
    "With pre-labels, agreeing is the acceptance rate (verdicts confirmed).";
}

function renderAnnotators(data) {
  const alphaBy = new Map(data.agreement.annotators.map((row) => [row.annotator, row]));
  const gold = (data.gold && data.gold.annotators) || [];
  const goldBy = new Map(
    gold.map((row) => [row.annotator ?? row.annotator_id ?? row.username, row]),
  );
  const goldFor = (row) => goldBy.get(row.annotator) || goldBy.get(row.username);
  const today = data.days.length ? data.days.length - 1 : -1;
  const rows = data.throughput.map((row) => {
    const agreement = alphaBy.get(row.annotator) || {};
    const score = goldFor(row) || {};
    const tr = el("tr");
    tr.dataset.annotator = String(row.annotator);
    tr.append(
      el("td", { text: row.username }),
      el("td", { text: String(row.total) }),
      el("td", { text: String(today >= 0 ? row.per_day[today] : 0) }),
      el("td", { text: formatFixed(agreement.alpha) }),
      el("td", { text: formatPercent(agreement.first_error_agreement) }),
      el("td", { text: formatPercent(score.step_accuracy) }),
      el("td", { text: formatPercent(score.first_error_match) }),
    );
    return tr;
  });
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", { text: "No annotations yet.", cls: "muted" });
    td.colSpan = 7;
    tr.append(td);
    rows.push(tr);
  }
  $("db-annotators").tBodies[0].replaceChildren(...rows);
  $("db-gold-none").hidden = gold.length > 0;
}

// The flagged chains (GET projects/{id}/flags/, newest first): who flagged each and why,
// and a button that puts the chain back in the queue (POST chains/{id}/unflag/).
async function loadFlags() {
  let page;
  try {
    page = await api(config.api.flags);
  } catch {
    return; // the count above still says how many there are
  }
  const items = page.results.map((flag) => {
    const item = el("li");
    const who = flag.flagged_by || "someone no longer here";
    const when = flag.flagged_at ? formatWhen(flag.flagged_at) : "";
    item.append(
      el("strong", { text: `Chain ${flag.chain}` }),
      document.createTextNode(": "),
      el("q", { text: flag.flag_reason || "no reason given" }),
      el("span", { text: ` flagged by ${who}${when ? `, ${when}` : ""} `, cls: "muted" }),
    );
    const button = el("button", { text: "Put back in the queue", cls: "button" });
    button.type = "button";
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await api(`${config.api.chain}${flag.chain}/unflag/`, { method: "POST", body: {} });
        item.remove();
        showMessage($("db-message"), `Chain ${flag.chain} is back in the queue.`, "ok");
      } catch {
        button.disabled = false;
        showMessage($("db-message"), `Could not clear the flag of chain ${flag.chain}.`, "error");
      }
    });
    item.append(button);
    return item;
  });
  $("db-flag-list").replaceChildren(...items);
  $("db-flag-list").hidden = items.length === 0;
}

// Each machine source against people's consensus and gold (issue 23).
function renderMachines(sources) {
  $("db-machines").hidden = sources.length === 0;
  const heads = ["Source", "Against", "Chains", "Steps", "Cohen's κ", "First error", "Confusion"];
  const kappa = (a) => {
    if (a.kappa === null) return NONE;
    const range = a.kappa_low === null ? "" : ` [${formatFixed(a.kappa_low)}, ${formatFixed(a.kappa_high)}]`;
    return `${formatFixed(a.kappa)}${range}`;
  };
  const share = (p) =>
    p.rate === null
      ? NONE
      : `${formatPercent(p.rate)} [${formatPercent(p.low)}, ${formatPercent(p.high)}] of ${p.total}`;
  const rows = sources.flatMap((source) =>
    source.against.map((a, index) => {
      const cells = [
        index === 0 ? `${source.name} (${source.chains_labeled} chains)` : "",
        a.reference === "gold" ? "Gold" : "People",
        String(a.chains),
        String(a.steps),
        kappa(a),
        share(a.first_error),
        a.confusion.map((row) => row.join(" ")).join(" | "),
      ];
      const tr = el("tr");
      cells.forEach((text, i) => {
        const td = el("td", { text });
        td.dataset.label = heads[i];
        tr.append(td);
      });
      return tr;
    }),
  );
  $("db-machines-table").tBodies[0].replaceChildren(...rows);
}

async function loadMachines() {
  try {
    renderMachines(await api(config.api.machine_quality));
  } catch {
    showMessage($("db-message"), "Could not load the machine sources' quality; reload to try again.", "error");
  }
}

async function load() {
  loadMachines();
  try {
    render(await api(config.api.dashboard));
    root.dataset.state = "ready";
  } catch {
    root.dataset.state = "error";
    showMessage($("db-message"), "Could not load the dashboard's numbers; reload to try again.", "error");
  }
}

async function createSnapshot() {
  const button = $("btn-snapshot");
  button.disabled = true;
  try {
    const snapshot = await api(config.api.snapshots, { method: "POST", body: {} });
    const line = $("db-snapshot");
    line.replaceChildren(
      document.createTextNode("Newest snapshot: "),
      el("strong", { text: snapshot.label }),
      document.createTextNode(`, ${snapshot.counts.chains ?? "?"} chains, `),
      el("code", { text: snapshot.content_hash.slice(0, 12) }),
    );
    for (const link of document.querySelectorAll(".db-export")) {
      link.classList.remove("is-disabled");
      link.removeAttribute("aria-disabled");
      // The buttons name the snapshot they export (a training run's later one never
      // takes its place).
      const url = new URL(link.getAttribute("href"), window.location.href);
      url.searchParams.set("snapshot", String(snapshot.version));
      link.setAttribute("href", url.pathname + url.search);
    }
    showMessage($("db-message"), `Snapshot ${snapshot.label} created; the export buttons use it.`, "ok");
  } catch (error) {
    const detail = error.body && (error.body.detail || Object.values(error.body).flat()[0]);
    showMessage($("db-message"), `Could not create a snapshot${detail ? `: ${detail}` : "."}`, "error");
  } finally {
    button.disabled = false;
  }
}

$("btn-snapshot").addEventListener("click", createSnapshot);
load();
