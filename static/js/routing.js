// The Routing card (issue 23): GET /api/v1/projects/{id}/routing/ drawn as figures, and
// for leads "Route now" (POST .../routing/run/, which answers before the pass runs: the
// card reads the figures again a few times after). Source names are data: textContent.

import { $, el, api, formatPercent, errorText, showMessage, NONE } from "./steplab.js";
const config = JSON.parse(document.getElementById("routing-config").textContent);
const card = $("db-routing");
// After "Route now": read again after these many milliseconds (the pass is a task).
const REREAD_MS = [1500, 4000, 10000];

function row(cells, heads) {
  const tr = el("tr");
  cells.forEach((text, i) => {
    const td = el("td", { text });
    td.dataset.label = heads[i];
    tr.append(td);
  });
  return tr;
}

function heads(table) {
  return [...table.tHead.rows[0].cells].map((th) => th.textContent);
}

const message = $("db-routing-message");

function render(data) {
  card.hidden = data.sources.length === 0;
  const spot = data.chains.spot_check;
  const waiting = data.spot_checks_waiting;
  const chains = $("db-routing-chains");
  const counts = [
    ["Machine-agreed", data.chains.agreed],
    ["Spot checks waiting", waiting],
    ["Spot checks checked", spot - waiting],
    ["Machines disagree", data.chains.disagreed],
    ["Second looks", data.chains.second_look],
  ];
  chains.tBodies[0].replaceChildren(
    ...counts.map(([name, count]) => row([name, String(count)], heads(chains))),
  );
  const errors = data.spot_check_errors;
  $("db-routing-errors").textContent =
    errors.total === 0
      ? "No spot check has people's consensus yet: no error rate to show."
      : `Spot checks wrong: ${formatPercent(errors.rate, 1)} [${formatPercent(errors.low, 1)}, ` +
        `${formatPercent(errors.high, 1)}], n = ${errors.total} (${errors.hits} wrong).`;
  const sources = $("db-routing-sources");
  sources.tBodies[0].replaceChildren(
    ...data.sources.map((source) =>
      row(
        [
          source.name,
          source.kappa === null ? NONE : source.kappa.toFixed(2),
          String(source.chains_compared),
          source.usable ? "yes" : "no",
          source.reason || NONE,
        ],
        heads(sources),
      ),
    ),
  );
  const accepting = data.accept
    ? `accepted without a person, ${formatPercent(data.spot_check, 1)} of them spot-checked`
    : "not accepted (off in Settings): agreement only tells";
  const second = data.second_look > 0 ? `from PRM confidence ${data.second_look}` : "off";
  $("db-routing-about").textContent =
    `Sources need κ ≥ ${data.min_kappa.toFixed(2)}. Machine-agreed chains are ${accepting}. ` +
    `Second looks: ${second}.`;
  card.dataset.state = "ready";
}

let loadRequest = 0; // the newest read; an older answer arriving late is dropped

async function load() {
  const ticket = ++loadRequest;
  try {
    const data = await api(config.api.routing);
    if (ticket === loadRequest) render(data);
  } catch {
    if (ticket !== loadRequest) return;
    card.hidden = false;
    card.dataset.state = "error";
    showMessage(message, "Could not load routing's figures; reload to try again.", "error");
  }
}

async function routeNow(event) {
  const button = event.currentTarget;
  button.disabled = true;
  try {
    const answer = await api(config.api.run, { method: "POST" });
    showMessage(message, `${answer.detail} The figures update when it has run.`);
    for (const wait of REREAD_MS) setTimeout(load, wait);
  } catch (error) {
    showMessage(message, `Routing was not queued: ${errorText(error)}`, "error");
  } finally {
    button.disabled = false;
  }
}

const button = $("btn-route");
if (button) button.addEventListener("click", routeNow);
load();
