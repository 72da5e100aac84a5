// The data manager's chain list: filters and search go to the chains API
// (GET projects/{id}/chains/) and pages follow its keyset cursor (next_after). Text from
// imports goes in with textContent only.
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("chains-config").textContent);
  const { api, renderMath } = window.Steplab;
  const $ = (id) => document.getElementById(id);
  const root = $("chains");
  const STATUS = { in_progress: "in progress" };
  let nextAfter = null;

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function fixed(value) {
    return value === null || value === undefined ? "—" : value.toFixed(2);
  }

  function query(after) {
    const params = new URLSearchParams();
    const set = (name, id) => {
      const value = $(id).value.trim();
      if (value !== "") params.set(name, value);
    };
    set("q", "ch-q");
    set("status", "ch-status");
    set("annotator", "ch-annotator");
    set("max_agreement", "ch-agreement");
    set("min_score", "ch-min-score");
    set("max_score", "ch-max-score");
    set("min_uncertainty", "ch-min-unc");
    set("max_uncertainty", "ch-max-unc");
    if (after !== null) params.set("after", String(after));
    return params;
  }

  function row(chain) {
    const tr = el("tr");
    tr.dataset.chain = chain.id;
    const link = el("a", `#${chain.id}`);
    link.href = `${config.chainPage}${chain.id}/`;
    const first = el("td");
    first.append(link);
    // data-label names a figure where a narrow screen stacks the row (chains.css).
    const figure = (label, text) => {
      const cell = el("td", text);
      cell.dataset.label = label;
      return cell;
    };
    // The problem as text, its $...$ typeset by KaTeX (trust off) afterwards.
    const problem = el("td", null, "ch-problem math");
    renderMath(problem, chain.problem);
    tr.append(
      first,
      problem,
      el("td", STATUS[chain.status] || chain.status),
      el("td", `${chain.finished_count} / ${chain.needed}`),
      figure("Agreement", chain.agreement === null ? "—" : `${Math.round(chain.agreement * 100)} %`),
      figure("PRM score", fixed(chain.prm_score)),
      figure("Uncertainty", fixed(chain.prm_uncertainty)),
    );
    return tr;
  }

  async function load(after) {
    root.dataset.state = "loading";
    const message = $("ch-message");
    try {
      const page = await api(`${config.api.chains}?${query(after)}`);
      const body = $("ch-rows");
      body.replaceChildren(...page.results.map(row));
      $("ch-empty").hidden = page.results.length > 0;
      nextAfter = page.next_after;
      $("ch-next").hidden = nextAfter === null;
      $("ch-first").hidden = after === null;
      message.hidden = true;
      root.dataset.state = "ready";
    } catch (error) {
      const detail = error.body ? JSON.stringify(error.body) : String(error);
      message.textContent = `Could not load the chains: ${detail}`;
      message.className = "ch-message error";
      message.hidden = false;
      root.dataset.state = "error";
    }
  }

  $("ch-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    load(null);
  });
  for (const id of ["ch-status", "ch-annotator", "ch-agreement"]) {
    $(id).addEventListener("change", () => load(null));
  }
  $("ch-next").addEventListener("click", () => load(nextAfter));
  $("ch-first").addEventListener("click", () => load(null));
  load(null);
})();
