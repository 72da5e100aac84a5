// Shared helpers for the pages. The pages call the REST API with the session cookie;
// DRF's SessionAuthentication then requires the CSRF token on every unsafe request,
// which Django keeps in the "csrftoken" cookie.
"use strict";

(function () {
  // The rating keys of the workspace and the review page: 1/+ correct, 2/0 ambiguous,
  // 3/- incorrect.
  const RATING_KEYS = Object.freeze({ "1": 1, "+": 1, "2": 0, "0": 0, "3": -1, "-": -1 });
  const KATEX_OPTIONS = {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
      { left: "$", right: "$", display: false },
    ],
    throwOnError: false,
    trust: false,
    strict: "ignore",
  };

  // Put ``text`` in ``element`` as text, then let KaTeX (trust off) turn $...$ into math;
  // a formula it cannot parse stays as source. ``raw``: leave the source as it is. KaTeX's
  // auto-render is loaded (deferred) by the pages that show math, after this file.
  function renderMath(element, text, raw = false) {
    element.textContent = text;
    if (!raw && typeof window.renderMathInElement === "function") {
      window.renderMathInElement(element, KATEX_OPTIONS);
    }
  }

  // One date format on every page, as the server's templates write it ("Y-m-d H:i"):
  // 2026-11-25 08:33, in the browser's time zone. Unparseable input comes back as it is.
  function formatWhen(iso) {
    if (!iso) return "—";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    const two = (n) => String(n).padStart(2, "0");
    return `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} ` +
      `${two(date.getHours())}:${two(date.getMinutes())}`;
  }

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  // api("/api/v1/projects/", {method: "POST", body: {...}}) -> parsed JSON (or null on 204).
  // Rejects with an Error carrying .status and .body for any non-2xx answer.
  async function api(path, options = {}) {
    const method = (options.method || "GET").toUpperCase();
    const headers = { Accept: "application/json" };
    let body;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    if (!["GET", "HEAD", "OPTIONS"].includes(method)) {
      headers["X-CSRFToken"] = csrfToken();
    }
    const response = await fetch(path, { method, headers, body, credentials: "same-origin" });
    const text = await response.text();
    const data = text ? JSON.parse(text) : null;
    if (!response.ok) {
      const error = new Error(`${method} ${path}: ${response.status}`);
      error.status = response.status;
      error.body = data;
      throw error;
    }
    return data;
  }

  window.Steplab = Object.freeze({ api, csrfToken, formatWhen, renderMath, RATING_KEYS });
})();
