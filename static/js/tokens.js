// The API tokens page: the caller's tokens (GET /api/v1/auth/tokens/), making a named
// read-only or full one (POST the same: its key is in that answer only, shown once here)
// and revoking one (DELETE /api/v1/auth/tokens/{id}/). Everything from the server goes
// into the page with textContent only.

import { $, el, api, formatWhen, showMessage, errorText } from "./steplab.js";
const config = JSON.parse(document.getElementById("tokens-config").textContent);

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

function row(token) {
  const tr = el("tr");
  tr.dataset.token = String(token.id);
  const state = el("td", { text: STATES[token.state] || token.state, cls: token.state === "active" ? "token-state-active" : "token-state-ended" });
  const revoke = el("button", { text: "Revoke", cls: "button button-danger" });
  revoke.type = "button";
  revoke.setAttribute("aria-label", `Revoke ${token.name}`);
  revoke.addEventListener("click", () => revokeToken(token, revoke));
  const actions = el("td", { cls: "token-actions" });
  actions.append(revoke);
  tr.append(
    el("td", { text: token.name, cls: "token-name" }),
    el("td", { text: SCOPES[token.scope] || token.scope }),
    el("td", { text: `${token.prefix}…`, cls: "token-prefix" }),
    el("td", { text: formatWhen(token.created_at) }),
    el("td", { text: token.last_used_at ? formatWhen(token.last_used_at) : "never" }),
    el("td", { text: formatWhen(token.expires_at) }),
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
    showMessage(message, `Your tokens could not be loaded: ${errorText(error, { fields: false })}.`, "error");
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
    showMessage(message, `Revoked "${token.name}".`, "ok");
  } catch (error) {
    showMessage(message, `"${token.name}" was not revoked: ${errorText(error, { fields: false })}.`, "error");
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
    showMessage(message, "", "ok");
  } catch (error) {
    const fieldErrors = error.body && error.body.name;
    if (fieldErrors) {
      nameError.textContent = [].concat(fieldErrors).join(" ");
      nameError.hidden = false;
    } else {
      showMessage(message, `No token was made: ${errorText(error, { fields: false })}.`, "error");
    }
  } finally {
    button.disabled = false;
  }
  await reload();
});

$("btn-token-copy").addEventListener("click", async () => {
  try {
    await navigator.clipboard.writeText($("token-made-key").textContent);
    showMessage(message, "Token copied.", "ok");
  } catch {
    showMessage(message, "Copying failed: select the token and copy it yourself.", "error");
  }
});

reload();
