// The API tokens page: the caller's tokens (GET /api/v1/auth/tokens/), making a named
// read-only or full one (POST the same: its key is in that answer only, shown once here)
// and revoking one (DELETE /api/v1/auth/tokens/{id}/). Everything from the server goes
// into the page with textContent only.
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("tokens-config").textContent);
  const { api, formatWhen } = window.Steplab;

  const $ = (id) => document.getElementById(id);
  const root = $("tokens");
  const message = $("tokens-message");
  const form = $("token-new");
  const nameInput = $("f-token-name");
  const nameError = $("e-token-name");
  const scopeInput = $("f-token-scope");
  const button = $("btn-token-new");
  const made = $("token-made");
  const table = $("tokens-table");
  const body = table.querySelector("tbody");
  const STATES = { active: "Works", expired: "Expired", password_changed: "Ended: password changed" };
  const SCOPES = { read: "Read only", full: "Full access" };

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function showMessage(text, kind) {
    message.textContent = text;
    message.className = `form-message ${kind}`;
    message.hidden = !text;
  }

  function reasons(error) {
    const data = error.body;
    if (!data || typeof data !== "object") return error.message;
    if (data.detail) return String(data.detail);
    return Object.values(data).flat().join(" ") || error.message;
  }

  function row(token) {
    const tr = el("tr");
    tr.dataset.token = String(token.id);
    const state = el("td", STATES[token.state] || token.state,
      token.state === "active" ? "token-state-active" : "token-state-ended");
    const revoke = el("button", "Revoke", "button button-danger");
    revoke.type = "button";
    revoke.setAttribute("aria-label", `Revoke ${token.name}`);
    revoke.addEventListener("click", () => revokeToken(token, revoke));
    const actions = el("td", null, "token-actions");
    actions.append(revoke);
    tr.append(
      el("td", token.name, "token-name"),
      el("td", SCOPES[token.scope] || token.scope),
      el("td", `${token.prefix}…`, "token-prefix"),
      el("td", formatWhen(token.created_at)),
      el("td", token.last_used_at ? formatWhen(token.last_used_at) : "never"),
      el("td", formatWhen(token.expires_at)),
      state,
      actions,
    );
    return tr;
  }

  async function load() {
    const tokens = await api(config.api.tokens);
    $("tokens-count").textContent = `(${tokens.length})`;
    $("tokens-empty").hidden = tokens.length > 0;
    table.hidden = tokens.length === 0;
    body.replaceChildren(...tokens.map(row));
  }

  async function reload() {
    try {
      await load();
      root.dataset.state = "ready";
    } catch (error) {
      showMessage(`Your tokens could not be loaded: ${reasons(error)}.`, "error");
      root.dataset.state = "error";
    }
  }

  async function revokeToken(token, control) {
    if (!window.confirm(`Revoke the token "${token.name}"? Scripts using it stop working.`)) {
      return;
    }
    control.disabled = true;
    try {
      await api(`${config.api.token}${token.id}/`, { method: "DELETE" });
      showMessage(`Revoked "${token.name}".`, "ok");
    } catch (error) {
      showMessage(`"${token.name}" was not revoked: ${reasons(error)}.`, "error");
    }
    await reload();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    nameError.hidden = true;
    button.disabled = true;
    try {
      const token = await api(config.api.tokens, {
        method: "POST",
        body: { name: nameInput.value, scope: scopeInput.value },
      });
      $("token-made-name").textContent = token.name;
      $("token-made-key").textContent = token.key;
      made.hidden = false;
      form.reset();
      showMessage("", "ok");
    } catch (error) {
      const fieldErrors = error.body && error.body.name;
      if (fieldErrors) {
        nameError.textContent = [].concat(fieldErrors).join(" ");
        nameError.hidden = false;
      } else {
        showMessage(`No token was made: ${reasons(error)}.`, "error");
      }
    } finally {
      button.disabled = false;
    }
    await reload();
  });

  $("btn-token-copy").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText($("token-made-key").textContent);
      showMessage("Token copied.", "ok");
    } catch (error) {
      showMessage("Copying failed: select the token and copy it yourself.", "error");
    }
  });

  reload();
})();
