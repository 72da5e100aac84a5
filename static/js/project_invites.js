// The members page's invitations: one person (POST /api/v1/projects/{id}/invites/), many
// from a list or a CSV file read into the list box (POST .../invites/bulk/, whole or not
// at all: a 400 lists every bad line), the new links to copy (the API shows each once),
// and the pending invitations with Revoke (GET .../invites/, POST .../{id}/revoke/).
// Everything from the server goes into the page with textContent only.

import { $, el, api, formatWhen, showMessage, errorText, formatCount, NONE } from "./steplab.js";
const config = JSON.parse(document.getElementById("members-config").textContent);

const message = $("invites-message");
const one = { form: $("invite-one"), who: $("f-invite-who"), name: $("f-invite-name"),
  role: $("f-invite-role"), days: $("f-invite-days"), button: $("btn-invite") };
const many = { form: $("invite-many"), text: $("f-invite-list"), file: $("f-invite-file"),
  role: $("f-invite-many-role"), days: $("f-invite-many-days"), button: $("btn-invite-many") };
const errorsBox = $("invite-errors");
const linksBox = $("invite-links");
const linkList = $("invite-link-list");
const pendingBody = document.querySelector("#pending tbody");
const pendingTable = $("pending");
const pendingEmpty = $("pending-empty");
const pendingCount = $("pending-count");

let issuedLinks = []; // [{who, link}] of the newest invitations, for "Copy all links"
let listRequest = 0;

function roleName(value) {
  return config.roles[value] || value;
}

function who(invite) {
  return invite.email || invite.username || "";
}

// ------------------------------------------------------------ pending invitations

async function loadPending() {
  const ticket = ++listRequest;
  const listed = [];
  let url = config.api.invites;
  while (url) {
    const page = await api(url);
    listed.push(...page.results);
    url = page.next;
  }
  if (ticket !== listRequest) return;
  pendingCount.textContent = `(${listed.length})`;
  pendingEmpty.hidden = listed.length > 0;
  pendingTable.hidden = listed.length === 0;
  pendingBody.replaceChildren(...listed.map(pendingRow));
}

async function reloadPending() {
  try {
    await loadPending();
  } catch (error) {
    showMessage(message, `The pending invitations could not be loaded: ${error.message}.`, "error");
  }
}

function pendingRow(invite) {
  const tr = el("tr");
  tr.dataset.invite = String(invite.id);
  tr.dataset.who = who(invite);
  const person = el("td", { text: who(invite), cls: "invite-who-cell" });
  if (invite.name) person.append(el("span", { text: ` (${invite.name})`, cls: "muted" }));
  const expires = el("td", { cls: "invite-expires" });
  expires.append(el("span", { text: formatWhen(invite.expires_at) }));
  if (invite.state === "expired") expires.append(el("span", { text: " expired", cls: "invite-expired" }));
  const revoke = el("button", { text: "Revoke", cls: "button button-danger" });
  revoke.type = "button";
  revoke.setAttribute("aria-label", `Revoke the invitation of ${who(invite)}`);
  revoke.addEventListener("click", () => revokeInvite(invite, revoke));
  const actions = el("td", { cls: "invite-actions" });
  actions.append(revoke);
  tr.append(
    person,
    el("td", { text: roleName(invite.role), cls: "invite-role" }),
    expires,
    el("td", { text: invite.invited_by || NONE, cls: "invite-by" }),
    actions,
  );
  return tr;
}

async function revokeInvite(invite, button) {
  if (!window.confirm(`Revoke the invitation of ${who(invite)}? Its link will let nobody in.`)) {
    return;
  }
  button.disabled = true;
  try {
    await api(`${config.api.invite}${invite.id}/revoke/`, { method: "POST" });
    showMessage(message, `The invitation of ${who(invite)} was revoked.`, "ok");
    await reloadPending();
  } catch (error) {
    button.disabled = false;
    showMessage(message, `The invitation was not revoked: ${errorText(error, { fields: false })}`, "error");
  }
}

// ------------------------------------------------------------ new links

function linkItem(issued) {
  const invite = issued.invite;
  const li = el("li", { cls: "invite-link" });
  li.dataset.who = who(invite);
  const head = el("p", { cls: "invite-link-who" });
  head.append(el("strong", { text: who(invite) }), el("span", { text: ` · ${roleName(invite.role)}` }));
  if (issued.emailed) head.append(el("span", { text: " · e-mailed", cls: "invite-mailed" }));
  else if (issued.email_error) head.append(el("span", { text: ` · ${issued.email_error}`, cls: "invite-unmailed" }));
  const row = el("div", { cls: "invite-link-row" });
  // The whole link, wrapped where it must: a click selects all of it.
  const text = el("code", { text: issued.link, cls: "invite-link-text" });
  text.setAttribute("aria-label", `Invitation link for ${who(invite)}`);
  const copy = el("button", { text: "Copy", cls: "button" });
  copy.type = "button";
  copy.setAttribute("aria-label", `Copy the link for ${who(invite)}`);
  copy.addEventListener("click", () => copyText(issued.link, text, copy));
  row.append(text, copy);
  li.append(head, row);
  return li;
}

function showLinks(issuedList) {
  issuedLinks = issuedList.map((issued) => ({ who: who(issued.invite), link: issued.link }));
  linkList.replaceChildren(...issuedList.map(linkItem));
  linksBox.hidden = issuedList.length === 0;
  $("btn-copy-all").hidden = issuedList.length < 2;
}

async function copyText(text, shown, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // No clipboard here (a plain-HTTP address, a denied permission): the link is selected
    // for the person to copy with the keyboard.
    if (shown) window.getSelection().selectAllChildren(shown);
    showMessage(message, "The browser refused to copy: the link is selected, copy it with Ctrl+C.", "error");
    return;
  }
  const label = button.textContent;
  button.textContent = "Copied";
  window.setTimeout(() => { button.textContent = label; }, 1500);
}

// ------------------------------------------------------------ errors

function clearErrors() {
  errorsBox.hidden = true;
  $("invite-error-list").replaceChildren();
  const slot = $("e-invite-who");
  slot.hidden = true;
  slot.textContent = "";
  one.who.removeAttribute("aria-invalid");
  many.text.removeAttribute("aria-invalid");
}

function listErrors(body) {
  $("invite-errors-detail").textContent = body.detail || "Nobody was invited.";
  $("invite-error-list").replaceChildren(
    ...(body.errors || []).map((error) => {
      const item = el("li");
      item.append(el("strong", { text: `Line ${error.line}` }), el("span", { text: `${error.who ? ` (${error.who})` : ""}: ${error.message}` }));
      return item;
    }),
  );
  errorsBox.hidden = false;
  many.text.setAttribute("aria-invalid", "true");
}

// ------------------------------------------------------------ forms

async function inviteOne(event) {
  event.preventDefault();
  clearErrors();
  const person = one.who.value.trim();
  if (!person) {
    fieldError("Type the e-mail address or the username of the person to invite.");
    return;
  }
  const body = {
    role: one.role.value,
    name: one.name.value.trim(),
    expires_in_days: Number(one.days.value),
  };
  body[person.includes("@") ? "email" : "username"] = person;
  one.button.disabled = true;
  try {
    const issued = await api(config.api.invites, { method: "POST", body });
    showLinks([issued]);
    showMessage(message, `${person} is invited as ${roleName(issued.invite.role)}: copy the link below.`, "ok");
    one.who.value = "";
    one.name.value = "";
    await reloadPending();
  } catch (error) {
    if (error.status === 400 && error.body && typeof error.body === "object") {
      fieldError(Object.values(error.body).flat().join(" "));
      showMessage(message, "Nobody was invited.", "error");
    } else {
      showMessage(message, `Nobody was invited: ${errorText(error, { fields: false })}`, "error");
    }
  } finally {
    one.button.disabled = false;
  }
}

function fieldError(text) {
  const slot = $("e-invite-who");
  slot.textContent = text;
  slot.hidden = !text;
  one.who.setAttribute("aria-invalid", "true");
  one.who.focus();
}

async function inviteMany(event) {
  event.preventDefault();
  clearErrors();
  if (!many.text.value.trim()) {
    listErrors({ detail: "The list is empty: type or paste people, one a line, or choose a CSV file." });
    many.text.focus();
    return;
  }
  many.button.disabled = true;
  try {
    const result = await api(config.api.invitesBulk, {
      method: "POST",
      body: {
        text: many.text.value,
        role: many.role.value,
        expires_in_days: Number(many.days.value),
      },
    });
    showLinks(result.invites);
    showMessage(message, `${result.count} ${result.count === 1 ? "person is" : "people are"} invited: copy the links below.`, "ok");
    many.text.value = "";
    many.file.value = "";
    await reloadPending();
  } catch (error) {
    if (error.status === 400 && error.body && (error.body.errors || error.body.detail)) {
      listErrors(error.body);
    } else if (error.status === 400 && error.body && typeof error.body === "object") {
      listErrors({ detail: Object.values(error.body).flat().join(" ") });
    } else {
      listErrors({ detail: `Nobody was invited: ${errorText(error, { fields: false })}` });
    }
    showMessage(message, "Nobody was invited.", "error");
  } finally {
    many.button.disabled = false;
  }
}

// A chosen file is read into the list box, so the lead sees what will be sent.
function fileChosen() {
  clearErrors();
  const file = many.file.files[0];
  if (!file) return;
  // Four bytes a character at most in UTF-8: a larger file cannot fit the list's bound.
  if (file.size > config.maxListChars * 4) {
    listErrors({ detail: `${file.name} is too large for one list (at most ${formatCount(config.maxListChars)} characters).` });
    many.file.value = "";
    return;
  }
  const reader = new FileReader();
  reader.addEventListener("load", () => {
    many.text.value = String(reader.result).replace(/^\uFEFF/, "");
    showMessage(message, `${file.name} is in the list box: check it, then press "Create invitations".`, "ok");
  });
  reader.addEventListener("error", () => {
    listErrors({ detail: `${file.name} could not be read.` });
  });
  reader.readAsText(file);
}

one.form.addEventListener("submit", inviteOne);
many.form.addEventListener("submit", inviteMany);
many.file.addEventListener("change", fileChosen);
$("btn-copy-all").addEventListener("click", (event) => {
  const lines = issuedLinks.map((item) => `${item.who}\t${item.link}`).join("\n");
  copyText(lines, null, event.currentTarget);
});

reloadPending();
