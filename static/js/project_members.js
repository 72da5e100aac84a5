// The members page: the list (GET /api/v1/projects/{id}/members/, every page of it),
// adding a user by username with a role (POST the same), changing a role
// (PATCH .../members/{user_id}/) and removing a member (DELETE the same). The services'
// rules (a project keeps one lead) come back as 400s whose messages the page shows.
// Usernames are put in the page with textContent only.

import { $, el, api, formatWhen, showMessage, errorText } from "./steplab.js";
const config = JSON.parse(document.getElementById("members-config").textContent);

const root = $("project-members");
const message = $("members-message");
const tbody = document.querySelector("#members tbody");
const count = $("members-count");
const addForm = $("member-add");
const username = $("f-username");
const role = $("f-role");
const addButton = $("btn-add");

let members = []; // as the API lists them: leads first, then by username
const refusals = {}; // user id -> why the last change to that member was refused
let listRequest = 0; // the newest list load; an older answer arriving late is dropped

function roleName(value) {
  return config.roles[value] || value;
}

async function load() {
  const ticket = ++listRequest;
  const listed = [];
  let url = config.api.members;
  while (url) {
    const page = await api(url);
    listed.push(...page.results);
    url = page.next;
  }
  if (ticket !== listRequest) return;
  members = listed;
  render();
}

// After a change: the list again, as the server has it now. Never throws: the change
// itself went through, whatever the reload does.
async function reload() {
  try {
    await load();
  } catch (error) {
    showMessage(message, `The list could not be reloaded: ${error.message}. Reload the page.`, "error");
  }
}

function render() {
  count.textContent = `(${members.length})`;
  tbody.replaceChildren(...members.map(row));
}

function row(member) {
  const tr = el("tr");
  tr.dataset.user = String(member.user_id);
  tr.dataset.username = member.username;
  const name = el("td", { text: member.username, cls: "member-name" });
  if (member.user_id === config.me) name.append(el("span", { text: " (you)", cls: "muted" }));

  const select = el("select");
  select.setAttribute("aria-label", `Role of ${member.username}`);
  for (const [value, label] of Object.entries(config.roles)) {
    const option = el("option", { text: label });
    option.value = value;
    option.selected = value === member.role;
    select.append(option);
  }
  select.addEventListener("change", () => changeRole(member, select));

  const remove = el("button", { text: "Remove", cls: "button button-danger" });
  remove.type = "button";
  remove.setAttribute("aria-label", `Remove ${member.username}`);
  remove.addEventListener("click", () => removeMember(member, remove));

  const problem = el("p", { text: refusals[member.user_id] || "", cls: "field-error member-error" });
  problem.hidden = !refusals[member.user_id];
  name.append(problem);

  const roleCell = el("td", { cls: "member-role" });
  roleCell.append(select);
  const actions = el("td", { cls: "member-actions" });
  actions.append(remove);
  tr.append(name, roleCell, el("td", { text: formatWhen(member.created_at), cls: "member-since" }), actions);
  return tr;
}

// A refusal is said beside the member it concerns too: on a long list the message at
// the top of the page may be out of sight.
function rowError(member, text) {
  if (text) refusals[member.user_id] = text;
  else delete refusals[member.user_id];
  const slot = tbody.querySelector(`tr[data-user="${member.user_id}"] .member-error`);
  if (!slot) return;
  slot.textContent = text;
  slot.hidden = !text;
}

// After changing their own role or leaving, a lead may no longer manage the project.
function leftTheLeads(member, newRole) {
  return member.user_id === config.me && newRole !== "lead" && !config.superuser;
}

async function changeRole(member, select) {
  const wanted = select.value;
  select.disabled = true;
  rowError(member, "");
  try {
    const updated = await api(`${config.api.member}${member.user_id}/`, {
      method: "PATCH",
      body: { role: wanted },
    });
    if (leftTheLeads(member, updated.role)) {
      window.location.assign(config.overview);
      return;
    }
    await reload();
    showMessage(message, `${member.username} is now ${roleName(updated.role)}.`, "ok");
  } catch (error) {
    select.value = member.role; // nothing changed
    showMessage(message, `${member.username}'s role was not changed: ${errorText(error, { fields: false })}`, "error");
    rowError(member, errorText(error, { fields: false }));
  } finally {
    select.disabled = false;
  }
}

async function removeMember(member, button) {
  const own = member.user_id === config.me;
  const question = own
    ? "Remove yourself from this project? You will no longer see it."
    : `Remove ${member.username} from this project? Their labels stay; a chain they hold goes back to the queue.`;
  if (!window.confirm(question)) return;
  button.disabled = true;
  rowError(member, "");
  try {
    await api(`${config.api.member}${member.user_id}/`, { method: "DELETE" });
    if (own && !config.superuser) {
      window.location.assign(config.home);
      return;
    }
    delete refusals[member.user_id];
    await reload();
    showMessage(message, `${member.username} was removed.`, "ok");
  } catch (error) {
    button.disabled = false;
    showMessage(message, `${member.username} was not removed: ${errorText(error, { fields: false })}`, "error");
    rowError(member, errorText(error, { fields: false }));
  }
}

function fieldError(field, text) {
  const slot = $(`e-${field}`);
  const input = field === "role" ? role : username;
  slot.textContent = text;
  slot.hidden = !text;
  if (text) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}

async function add(event) {
  event.preventDefault();
  fieldError("username", "");
  fieldError("role", "");
  const name = username.value.trim();
  if (!name) {
    fieldError("username", "Type the username of the person to add.");
    username.focus();
    return;
  }
  addButton.disabled = true;
  try {
    const known = members.find((member) => member.username === name);
    const member = await api(config.api.members, {
      method: "POST",
      body: { username: name, role: role.value },
    });
    username.value = "";
    await reload();
    showMessage(
      message,
      known
        ? `${member.username} was already a member; their role is now ${roleName(member.role)}.`
        : `${member.username} was added as ${roleName(member.role)}.`,
      "ok",
    );
    username.focus();
  } catch (error) {
    if (error.status === 400 && error.body && typeof error.body === "object") {
      for (const [field, problems] of Object.entries(error.body)) {
        fieldError(field === "role" ? "role" : "username", [].concat(problems).join(" "));
      }
      username.focus();
      showMessage(message, "Nobody was added.", "error");
    } else {
      showMessage(message, `Nobody was added: ${errorText(error, { fields: false })}`, "error");
    }
  } finally {
    addButton.disabled = false;
  }
}

addForm.addEventListener("submit", add);

load()
  .then(() => {
    root.dataset.state = "ready";
  })
  .catch((error) => {
    root.dataset.state = "error";
    showMessage(message, `The members could not be loaded: ${error.message}. Reload the page.`, "error");
  });
