// Shared helpers for the pages. The pages call the REST API with the session cookie;
// DRF's SessionAuthentication then requires the CSRF token on every unsafe request,
// which Django keeps in the "csrftoken" cookie.
"use strict";

(function () {
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

  window.Steplab = Object.freeze({ api, csrfToken });
})();
