// The project form: /projects/new/ creates (POST /api/v1/projects/), /projects/{id}/settings/
// loads and changes (GET and PATCH /api/v1/projects/{id}/). Both go through the same
// services as any other API client. A 400 names each field's errors; they are shown next
// to their fields, and nothing was saved (the API validates the whole body first).
//
// The guidelines' preview is rendered by the server (POST /api/v1/guidelines/preview/),
// the one renderer the workspace and the project pages use, and put in the page as the
// HTML it returns: raw HTML in the Markdown comes back escaped.

import { $, api, typesetGuidelines, showMessage } from "./steplab.js";
const config = JSON.parse(document.getElementById("settings-config").textContent);

const root = $("project-settings");
const form = $("project-form");
const saveButton = $("btn-save");
const message = $("form-message");
const textarea = $("f-guidelines");
const preview = $("guidelines-preview");
const tabWrite = $("tab-write");
const tabPreview = $("tab-preview");

// Every input of the form, by the API field it sets: one element, or for a group of
// radio buttons or of checkboxes (a fieldset with data-group: the API's list of the
// checked values) their fieldset (which carries the group's error state).
const inputs = {};
const radios = {};
const groups = {};
for (const element of form.querySelectorAll("[name]")) {
  if (element.type === "radio") {
    (radios[element.name] = radios[element.name] || []).push(element);
    inputs[element.name] = element.closest("fieldset");
  } else if (element.type === "checkbox" && element.closest("fieldset[data-group]")) {
    (groups[element.name] = groups[element.name] || []).push(element);
    inputs[element.name] = element.closest("fieldset");
  } else {
    inputs[element.name] = element;
  }
}

let loaded = null; // edit mode: the project as the API last returned it
let busy = false;

function clearErrors() {
  for (const element of form.querySelectorAll(".field-error")) {
    element.textContent = "";
    element.hidden = true;
  }
  for (const input of Object.values(inputs)) input.removeAttribute("aria-invalid");
}

// DRF's 400: {"field": ["message", ...], "non_field_errors": [...]}. Returns how many
// fields it marked; the first is focused.
function showErrors(body) {
  let marked = 0;
  const general = [];
  for (const [field, problems] of Object.entries(body || {})) {
    const text = Array.isArray(problems) ? problems.join(" ") : String(problems);
    const slot = $(`e-${field}`);
    if (slot && inputs[field]) {
      slot.textContent = text;
      slot.hidden = false;
      inputs[field].setAttribute("aria-invalid", "true");
      const boxes = radios[field] || groups[field];
      if (marked === 0) (boxes ? boxes[0] : inputs[field]).focus();
      marked += 1;
    } else {
      general.push(field === "non_field_errors" || field === "detail" ? text : `${field}: ${text}`);
    }
  }
  return { marked, general };
}

// The value the API takes for an input. Numbers go as they are typed (an empty or
// malformed one is the API's to refuse, with its message beside the field).
function valueOf(field) {
  if (field in radios) {
    const checked = radios[field].find((radio) => radio.checked);
    return checked ? checked.value : "";
  }
  if (field in groups) return groups[field].filter((box) => box.checked).map((box) => box.value);
  const input = inputs[field];
  if (input.type === "checkbox") return input.checked;
  if (input.type === "number") {
    const text = input.value.trim();
    return text !== "" && Number.isFinite(Number(text)) ? Number(text) : text;
  }
  return input.value;
}

// The API's warnings: a pre-label or routing source with no machine label in the project
// yet. Saved as asked; shown beside its field until its labels exist.
function showWarnings(project) {
  const warnings = project.warnings || [];
  for (const field of ["prelabel_source", "routing_sources"]) {
    const slot = $(`w-${field}`);
    if (!slot) continue;
    const messages = warnings.filter((warning) => warning.field === field).map((w) => w.message);
    slot.textContent = messages.join(" ");
    slot.hidden = messages.length === 0;
  }
}

function fill(project) {
  loaded = project;
  showWarnings(project);
  const title = document.getElementById("settings-title");
  if (title && project.name) {
    title.textContent = `Settings · ${project.name}`;
    document.title = `Settings · ${project.name}`;
  }
  for (const [field, input] of Object.entries(inputs)) {
    if (!(field in project)) continue;
    if (field in radios) {
      for (const radio of radios[field]) radio.checked = radio.value === project[field];
    } else if (field in groups) {
      const chosen = project[field] || [];
      for (const box of groups[field]) box.checked = chosen.includes(box.value);
    } else if (input.type === "checkbox") input.checked = Boolean(project[field]);
    else input.value = project[field] === null ? "" : String(project[field]);
  }
}

// Edit mode sends only what changed since the form was filled, so two leads changing
// different settings at once do not undo each other.
function changes() {
  const body = {};
  for (const field of Object.keys(inputs)) {
    const value = valueOf(field);
    if (loaded === null || !(field in loaded) || !same(value, loaded[field])) body[field] = value;
  }
  return body;
}

// A group's list is compared as a set: the order the API kept is not the boxes' order.
function same(value, before) {
  if (!Array.isArray(value)) return value === before;
  const sorted = (list) => JSON.stringify([...(list || [])].sort());
  return sorted(value) === sorted(before);
}

function setBusy(value) {
  busy = value;
  saveButton.disabled = value;
  root.setAttribute("aria-busy", value ? "true" : "false");
}

async function save(event) {
  event.preventDefault();
  if (busy) return;
  clearErrors();
  const body = config.mode === "create" ? changesForCreate() : changes();
  if (config.mode === "edit" && Object.keys(body).length === 0) {
    showMessage(message, "Nothing changed.", "info");
    return;
  }
  setBusy(true);
  showMessage(message, config.mode === "create" ? "Creating…" : "Saving…", "info");
  try {
    if (config.mode === "create") {
      const project = await api(config.api.projects, { method: "POST", body });
      window.location.assign(`${config.projectPage}${project.id}/members/?created=1`);
      return;
    }
    const project = await api(config.api.project, { method: "PATCH", body });
    fill(project);
    const names = Object.keys(body).map(label).join(", ");
    const warnings = project.warnings || [];
    if (warnings.length) {
      const why = warnings.map((warning) => warning.message).join(" ");
      showMessage(message, `Saved: ${names}. ${why}`, "warn", { sticky: true });
    } else {
      showMessage(message, `Saved: ${names}.`, "ok");
    }
    root.dataset.saved = String(Number(root.dataset.saved || 0) + 1);
  } catch (error) {
    if (error.status === 400) {
      const { marked, general } = showErrors(error.body);
      const prefix = "Nothing was saved";
      const where = marked ? `: fix the field${marked === 1 ? "" : "s"} marked in red.` : ".";
      showMessage(message, `${prefix}${where}${general.length ? " " + general.join(" ") : ""}`, "error");
    } else {
      showMessage(message, failure(error), "error");
    }
  } finally {
    setBusy(false);
  }
}

// Create sends every field, so the project starts as the form shows it.
function changesForCreate() {
  const body = {};
  for (const field of Object.keys(inputs)) body[field] = valueOf(field);
  return body;
}

function label(field) {
  const element = form.querySelector(`label[for="f-${field}"], #f-${field} > legend`);
  if (element) return element.textContent.trim();
  return field === "guidelines" ? "Guidelines" : field;
}

function failure(error) {
  const detail = error.body && error.body.detail;
  if (error.status === 403) return detail || "You may not change this project.";
  if (error.status === 404) return "This project is gone, or you are no longer a member.";
  return `Nothing was saved: ${detail || error.message}. Try again.`;
}

// --- the guidelines' Write / Preview tabs ------------------------------------------------

let previewRequest = 0; // the newest preview; a slower older answer is dropped

function selectTab(showPreview) {
  tabWrite.setAttribute("aria-selected", String(!showPreview));
  tabPreview.setAttribute("aria-selected", String(showPreview));
  textarea.hidden = showPreview;
  preview.hidden = !showPreview;
}

async function showPreview() {
  selectTab(true);
  const ticket = ++previewRequest;
  preview.classList.add("is-loading");
  try {
    const rendered = await api(config.api.preview, {
      method: "POST",
      body: { guidelines: textarea.value },
    });
    if (ticket !== previewRequest) return;
    preview.innerHTML = rendered.html; // the server's rendering: raw HTML is escaped
    typesetGuidelines(preview);
    if (!textarea.value.trim()) {
      const empty = document.createElement("p");
      empty.className = "muted";
      empty.textContent = "Nothing written yet.";
      preview.replaceChildren(empty);
    }
  } catch (error) {
    if (ticket !== previewRequest) return;
    const problem = document.createElement("p");
    problem.className = "form-error";
    const reason = error.body && error.body.guidelines;
    problem.textContent = `No preview: ${reason ? reason.join(" ") : error.message}`;
    preview.replaceChildren(problem);
  } finally {
    if (ticket === previewRequest) preview.classList.remove("is-loading");
  }
}

tabWrite.addEventListener("click", () => {
  previewRequest += 1;
  selectTab(false);
  textarea.focus();
});
tabPreview.addEventListener("click", showPreview);

form.addEventListener("submit", save);

async function start() {
  if (config.mode === "create") {
    // "ready" once the form's handlers are bound (the template says "loading").
    root.dataset.state = "ready";
    inputs.name.focus();
    return;
  }
  setBusy(true);
  try {
    fill(await api(config.api.project));
    root.dataset.state = "ready";
    setBusy(false);
  } catch (error) {
    root.dataset.state = "error";
    const why = error.status === 404 ? failure(error) : `${error.message}. Reload the page.`;
    showMessage(message, `The settings could not be loaded: ${why}`, "error");
  }
}

start();
