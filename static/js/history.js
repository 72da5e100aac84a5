// An annotator's history: the chains they submitted, newest first, and one reopened
// read-only with their ratings, comments and rewrite.
//
// Everything comes from the history API (projects/{id}/history/ and .../history/{id}/).
// Texts are data: put in the page with textContent, then typeset by the same helper as the
// workspace (window.Steplab.renderMath: KaTeX with trust off, \boxed{} outside $...$
// included). The reopened chain is addressed by the URL's hash (#annotation-<id>), so the
// browser's back button returns to the list and a reopened chain can be linked.
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("history-config").textContent);
  const { api, formatWhen, renderMath } = window.Steplab;
  const RATINGS = {
    1: { symbol: "+1", name: "correct" },
    0: { symbol: "0", name: "ambiguous" },
    "-1": { symbol: "−1", name: "incorrect" },
  };
  const HASH = /^#annotation-(\d+)$/;

  const $ = (id) => document.getElementById(id);
  const root = $("history");
  const els = {
    message: $("hist-message"),
    listView: $("hist-list-view"),
    loading: $("hist-loading"),
    empty: $("hist-empty"),
    list: $("hist-list"),
    more: $("hist-more"),
    chainView: $("hist-chain-view"),
    when: $("hist-chain-when"),
    summary: $("hist-chain-summary"),
    problem: $("hist-problem"),
    referenceWrap: $("hist-reference-wrap"),
    reference: $("hist-reference"),
    steps: $("hist-steps"),
    finalWrap: $("hist-final-wrap"),
    final: $("hist-final"),
  };

  let nextCursor = null; // the cursor of the next (older) page, null at the end
  let listLoaded = false;
  let shownId = null; // the annotation on screen in the chain view
  let openedFromList = false; // the chain on screen was opened from the list on this page

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function plural(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  function showError(text) {
    els.message.textContent = text;
    els.message.hidden = false;
  }

  function listUrl() {
    const params = new URLSearchParams();
    if (config.annotator) params.set("annotator", String(config.annotator));
    if (nextCursor !== null) params.set("cursor", nextCursor);
    const query = params.toString();
    return query ? `${config.api.history}?${query}` : config.api.history;
  }

  // "+3 / 0 / −1": the annotator's labels on the chain, each count in its colour.
  function labelsSummary(entry) {
    const span = el("span", "hist-labels");
    span.title = "correct / ambiguous / incorrect";
    span.append(
      el("span", "ok", `+${entry.correct}`),
      " / ",
      el("span", "warn", `${entry.ambiguous}`),
      " / ",
      el("span", "bad", `−${entry.incorrect}`),
    );
    return span;
  }

  function entryRow(entry) {
    const li = el("li");
    li.dataset.annotation = String(entry.annotation);
    const link = el("a", "hist-entry");
    link.href = `#annotation-${entry.annotation}`;
    const problem = el("span", "hist-problem");
    renderMath(problem, entry.problem || "(no problem text)");
    const meta = el("span", "hist-meta");
    const when = el("time", "", formatWhen(entry.submitted_at));
    when.dateTime = entry.submitted_at;
    meta.append(
      when,
      el("span", "", `${entry.steps_rated} of ${plural(entry.step_count, "step")} rated`),
      labelsSummary(entry),
      el(
        "span",
        "",
        entry.first_error === null ? "no error" : `first error: step ${entry.first_error}`,
      ),
    );
    if (entry.comments) meta.append(el("span", "", plural(entry.comments, "comment")));
    if (entry.rewritten) meta.append(el("span", "", "rewrite"));
    link.append(problem, meta);
    li.append(link);
    return li;
  }

  async function loadPage() {
    els.more.disabled = true;
    let page;
    try {
      page = await api(listUrl());
    } catch (error) {
      els.loading.hidden = true;
      els.more.disabled = false;
      showError("Could not load the history; reload the page to try again.");
      return;
    }
    listLoaded = true;
    els.loading.hidden = true;
    els.list.append(...page.results.map(entryRow));
    nextCursor = page.next_cursor;
    els.list.hidden = els.list.children.length === 0;
    els.empty.hidden = els.list.children.length > 0;
    els.more.hidden = nextCursor === null;
    els.more.disabled = false;
    root.dataset.entries = String(els.list.children.length);
  }

  function stepRow(step, chain) {
    const li = el("li", "ws-step");
    li.dataset.index = String(step.index);
    li.dataset.rating = step.rating === null ? "" : String(step.rating);
    li.classList.toggle("is-unrated", step.rating === null);
    const number = el("span", "ws-step-no", String(step.index + 1));
    const rate = el("span", "ws-rate");
    if (step.rating === null) {
      const none = el("span", "ws-rate-btn", "–");
      none.title = "not rated";
      rate.append(none);
    } else {
      const shown = RATINGS[step.rating];
      const badge = el("span", `ws-rate-btn rate-${shown.name} is-on`, shown.symbol);
      badge.title = shown.name;
      badge.setAttribute("aria-label", `${shown.name}, step ${step.index + 1}`);
      rate.append(badge);
    }
    const body = el("div", "ws-step-body");
    const text = el("div", "ws-text math");
    renderMath(text, step.text);
    body.append(text);
    if (step.comment) body.append(el("p", "ws-comment", step.comment));
    li.append(number, rate, body);
    // The rewrite corrects the first step rated −1: shown under it, as the workspace did.
    if (chain.rewrite && chain.first_error === step.index + 1) {
      const box = el("div", "hist-rewrite");
      box.append(el("span", "ws-label", `Corrected step ${step.index + 1}`));
      const rewritten = el("div", "ws-text math");
      renderMath(rewritten, chain.rewrite);
      box.append(rewritten);
      li.append(box);
    }
    return li;
  }

  function showChain(chain) {
    els.when.textContent = formatWhen(chain.submitted_at);
    const rated = chain.steps.filter((step) => step.rating !== null);
    const count = (value) => rated.filter((step) => step.rating === value).length;
    els.summary.textContent =
      `${rated.length} of ${plural(chain.steps.length, "step")} rated: ` +
      `+${count(1)} / ${count(0)} / −${count(-1)}` +
      (chain.first_error === null ? "; no error." : `; first error at step ${chain.first_error}.`);
    renderMath(els.problem, chain.problem);
    els.referenceWrap.hidden = !chain.reference_answer;
    if (chain.reference_answer) renderMath(els.reference, chain.reference_answer);
    const final = chain.final_answer && chain.final_answer.trim();
    els.finalWrap.hidden = !final;
    if (final) renderMath(els.final, chain.final_answer);
    els.steps.replaceChildren(...chain.steps.map((step) => stepRow(step, chain)));
    root.dataset.annotation = String(chain.annotation);
  }

  function setView(view) {
    root.dataset.state = view;
    root.setAttribute("aria-busy", "false");
    els.listView.hidden = view !== "list";
    els.chainView.hidden = view !== "chain";
  }

  // The hash decides the view: #annotation-<id> reopens that chain, anything else lists.
  async function route() {
    els.message.hidden = true;
    const match = HASH.exec(window.location.hash);
    if (!match) {
      shownId = null;
      delete root.dataset.annotation;
      setView("list");
      if (!listLoaded) await loadPage();
      return;
    }
    const id = match[1];
    openedFromList = root.dataset.state === "list";
    if (shownId === id) {
      setView("chain");
      return;
    }
    root.dataset.state = "loading";
    let chain;
    try {
      chain = await api(`${config.api.chain}${id}/`);
    } catch (error) {
      setView("list");
      if (!listLoaded) await loadPage();
      showError(
        error.status === 404
          ? "That chain is not in this history."
          : "Could not load the chain; try again.",
      );
      return;
    }
    shownId = id;
    showChain(chain);
    setView("chain");
    window.scrollTo(0, 0);
  }

  $("hist-back").addEventListener("click", (event) => {
    event.preventDefault();
    // Back the way the browser would when the list is where the chain was opened from;
    // a chain opened from a link goes to the list.
    if (openedFromList) window.history.back();
    else window.location.hash = "";
  });
  els.more.addEventListener("click", loadPage);
  window.addEventListener("hashchange", route);
  route();
})();
