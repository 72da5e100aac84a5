// The webhooks page: the project's webhooks (GET /api/v1/projects/{id}/webhooks/), adding
// one (POST the same), changing, pausing, rotating the secret of and deleting one (PATCH,
// DELETE .../webhooks/{webhook_id}/), a test event (POST .../test/), and each one's
// delivery log, paged (GET .../deliveries/?page=N), with a replay per delivery
// (POST .../deliveries/{delivery_id}/replay/). Everything from the server goes into the
// page with textContent only.

import { $, el, api, formatWhen, showMessage, errorText, NONE } from "./steplab.js";
const config = JSON.parse(document.getElementById("webhooks-config").textContent);
const EVENTS = config.events;

const root = $("webhooks");
const message = $("webhooks-message");
const form = $("webhook-new");
const list = $("webhook-list");
const pages = new Map(); // webhook id -> the log page shown

function button(text, className, onClick, label) {
  const node = el("button", { text, cls: `button ${className || ""}`.trim() });
  node.type = "button";
  if (label) node.setAttribute("aria-label", label);
  node.addEventListener("click", () => onClick(node));
  return node;
}

function hookUrl(hook, suffix = "") {
  return `${config.api.webhooks}${hook.id}/${suffix}`;
}

function eventBoxes(chosen, prefix) {
  const set = el("fieldset", { cls: "field webhook-events" });
  set.append(el("legend", { text: "Events" }));
  for (const [value, label] of Object.entries(EVENTS)) {
    const wrap = el("label", { cls: "check" });
    const box = el("input");
    box.type = "checkbox";
    box.name = `${prefix}-events`;
    box.value = value;
    box.checked = chosen.includes(value);
    wrap.append(box, ` ${label} `, el("code", { text: value }));
    set.append(wrap);
  }
  return set;
}

function checked(container) {
  return [...container.querySelectorAll("input[type=checkbox][value]:checked")]
    .map((box) => box.value);
}

function editForm(hook) {
  const details = el("details", { cls: "webhook-edit" });
  details.append(el("summary", { text: "Edit" }));
  const edit = el("form", { cls: "webhook-form" });
  edit.noValidate = true;
  const url = el("input");
  url.type = "url";
  url.value = hook.url;
  url.setAttribute("aria-label", "URL");
  const description = el("input");
  description.type = "text";
  description.value = hook.description;
  description.setAttribute("aria-label", "Description");
  const boxes = eventBoxes(hook.events, `hook-${hook.id}`);
  const active = el("label", { cls: "check" });
  const activeBox = el("input");
  activeBox.type = "checkbox";
  activeBox.checked = hook.active;
  active.append(activeBox, " Active (paused: no events are sent)");
  const save = el("button", { text: "Save", cls: "button primary" });
  save.type = "submit";
  edit.append(url, description, boxes, active, save);
  edit.addEventListener("submit", async (event) => {
    event.preventDefault();
    await act(save, () => api(hookUrl(hook), {
      method: "PATCH",
      body: {
        url: url.value,
        description: description.value,
        events: checked(boxes),
        active: activeBox.checked,
      },
    }), "Saved.", "Not saved");
  });
  details.append(edit);
  return details;
}

function secretRow(hook) {
  const row = el("div", { cls: "webhook-secret" });
  const code = el("code", { text: hook.secret });
  code.hidden = true;
  const show = button("Show secret", "", () => {
    code.hidden = !code.hidden;
    show.textContent = code.hidden ? "Show secret" : "Hide secret";
  });
  const rotate = button("Rotate secret", "", (control) => {
    if (!window.confirm("Make a new secret? Receivers must verify with the new one.")) return;
    act(control, () => api(hookUrl(hook), { method: "PATCH", body: { rotate_secret: true } }),
      "A new secret was made.", "The secret was not rotated");
  });
  row.append(el("span", { text: "Secret:" }), code, show, rotate);
  return row;
}

function deliveryRow(hook, delivery) {
  const tr = el("tr");
  tr.dataset.delivery = String(delivery.id);
  const what = el("td", { cls: "delivery-event" });
  const payload = el("details");
  payload.append(el("summary", { text: delivery.event }), el("pre", { text: JSON.stringify(delivery.payload, null, 2) }));
  what.append(payload);
  const status = el("td", { text: delivery.status, cls: `delivery-status-${delivery.status}` });
  const answer = delivery.last_status_code
    ? `${delivery.last_status_code}${delivery.response_ms !== null ? ` in ${delivery.response_ms} ms` : ""}`
    : NONE;
  let note = delivery.last_error || "";
  if (delivery.status === "pending" && delivery.next_attempt_at) {
    note = `${note} Next try ${formatWhen(delivery.next_attempt_at)}.`.trim();
  }
  if (delivery.replay_of) note = `${note} Replay of ${delivery.replay_of}.`.trim();
  const actions = el("td", { cls: "delivery-actions" });
  actions.append(button("Replay", "", (control) => act(
    control,
    () => api(hookUrl(hook, `deliveries/${delivery.id}/replay/`), { method: "POST", body: {} }),
    `Delivery ${delivery.id} replayed.`,
    "Not replayed",
  ), `Replay delivery ${delivery.id}`));
  tr.append(
    el("td", { text: String(delivery.id) }),
    el("td", { text: formatWhen(delivery.created_at), cls: "delivery-when" }),
    what,
    status,
    el("td", { text: String(delivery.attempts) }),
    el("td", { text: answer, cls: "delivery-answer" }),
    el("td", { text: note, cls: "delivery-note" }),
    actions,
  );
  return tr;
}

async function deliveryLog(hook, box) {
  const page = pages.get(hook.id) || 1;
  const data = await api(`${hookUrl(hook, "deliveries/")}?page=${page}`);
  const table = el("table", { cls: "table table-stack deliveries-table" });
  const head = el("tr");
  for (const name of ["#", "When", "Event", "Status", "Tries", "Answer", "Note"]) {
    const th = el("th", { text: name });
    th.scope = "col";
    head.append(th);
  }
  const actionsHead = el("th");
  actionsHead.setAttribute("aria-label", "Actions");
  head.append(actionsHead);
  const thead = el("thead");
  thead.append(head);
  const tbody = el("tbody");
  tbody.append(...data.results.map((delivery) => deliveryRow(hook, delivery)));
  table.append(thead, tbody);
  const wrap = el("div", { cls: "table-wrap" });
  wrap.append(table);
  const pager = el("div", { cls: "deliveries-pager" });
  const newer = button("Newer", "", () => { pages.set(hook.id, page - 1); reload(); });
  newer.disabled = !data.previous;
  const older = button("Older", "", () => { pages.set(hook.id, page + 1); reload(); });
  older.disabled = !data.next;
  pager.append(newer, el("span", { text: `Page ${page} · ${data.count} in all`, cls: "muted" }), older);
  box.replaceChildren(data.count ? wrap : el("p", { text: "Nothing sent yet.", cls: "muted" }));
  if (data.count) box.append(pager);
}

function hookCard(hook) {
  const card = el("section", { cls: "card webhook" });
  card.dataset.webhook = String(hook.id);
  const head = el("div", { cls: "webhook-head" });
  head.append(
    el("h3", { text: hook.url, cls: "webhook-url" }),
    el("span", { text: hook.active ? "Active" : "Paused", cls: `webhook-badge ${hook.active ? "on" : "off"}` }),
  );
  card.append(head);
  if (hook.description) card.append(el("p", { text: hook.description, cls: "muted" }));
  card.append(el("p", { text: `Events: ${hook.events.map((e) => EVENTS[e] || e).join(", ")}`, cls: "webhook-events-list" }));
  card.append(secretRow(hook), editForm(hook));
  const actions = el("div", { cls: "webhook-actions" });
  actions.append(
    button("Send test event", "", (control) => act(
      control,
      () => api(hookUrl(hook, "test/"), { method: "POST", body: {} }),
      "A test event is on its way.",
      "No test event was sent",
    )),
    button("Refresh log", "", () => reload()),
    button("Delete", "button-danger", (control) => {
      if (!window.confirm(`Delete the webhook to ${hook.url} and its log?`)) return;
      act(control, () => api(hookUrl(hook), { method: "DELETE" }), "Deleted.", "Not deleted");
    }),
  );
  card.append(actions, el("h4", { text: "Deliveries" }));
  const log = el("div", { cls: "webhook-log" });
  card.append(log);
  return { card, log };
}

async function act(control, call, done, failed) {
  control.disabled = true;
  try {
    await call();
    showMessage(message, done, "ok");
  } catch (error) {
    showMessage(message, `${failed}: ${errorText(error)}`, "error");
  } finally {
    control.disabled = false;
  }
  await reload();
}

let loadRequest = 0; // the newest load; an older one finishing late is dropped

// Whether this load's answer was shown (false: a newer load superseded it).
async function load() {
  const ticket = ++loadRequest;
  const hooks = await api(config.api.webhooks);
  if (ticket !== loadRequest) return false;
  const open = new Set([...list.querySelectorAll("details[open]")].map((d) => d.closest("[data-webhook]")?.dataset.webhook));
  const cards = hooks.map(hookCard);
  await Promise.all(hooks.map((hook, i) => deliveryLog(hook, cards[i].log)));
  if (ticket !== loadRequest) return false;
  $("webhooks-count").textContent = `(${hooks.length})`;
  $("webhooks-empty").hidden = hooks.length > 0;
  for (const { card } of cards) {
    if (open.has(card.dataset.webhook)) card.querySelector(".webhook-edit").open = true;
  }
  list.replaceChildren(...cards.map(({ card }) => card));
  return true;
}

async function reload() {
  root.dataset.state = "loading";
  const ticket = loadRequest + 1;
  try {
    if (await load()) root.dataset.state = "ready";
  } catch (error) {
    if (ticket !== loadRequest) return;
    showMessage(message, `The webhooks could not be loaded: ${errorText(error)}.`, "error");
    root.dataset.state = "error";
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  for (const id of ["e-webhook-url", "e-webhook-events"]) $(id).hidden = true;
  const submit = $("btn-webhook-new");
  submit.disabled = true;
  try {
    await api(config.api.webhooks, {
      method: "POST",
      body: {
        url: $("f-webhook-url").value,
        description: $("f-webhook-description").value,
        events: checked(form),
      },
    });
    form.reset();
    showMessage(message, "Webhook added. Its secret is under Show secret.", "ok");
  } catch (error) {
    const body = error.body || {};
    let shown = false;
    for (const field of ["url", "events"]) {
      if (body[field]) {
        $(`e-webhook-${field}`).textContent = [].concat(body[field]).join(" ");
        $(`e-webhook-${field}`).hidden = false;
        shown = true;
      }
    }
    if (!shown) showMessage(message, `No webhook was added: ${errorText(error)}.`, "error");
  } finally {
    submit.disabled = false;
  }
  await reload();
});

reload();
