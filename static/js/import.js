// The lead's import page: drop (or choose) a file, upload it to the imports API with the
// upload's own progress, then poll the import job it answers with (records and bytes
// read) until it is done (its counts) or failed (every bad line with its number).
//
// The job's id goes into the address (?job=) so a reload keeps following it. Text from
// the file (reasons quote it) and file names are put in the page with textContent only.

import { $, api, csrfToken, showMessage, errorText, formatCount } from "./steplab.js";
const config = JSON.parse(document.getElementById("import-config").textContent);
const POLL_MS = 1000;

const root = $("import");
const form = $("im-form");
const input = $("im-file");
const drop = $("im-drop");
const start = $("im-start");
let chosen = null;
let pollTimer = null;

function bytes(n) {
  const units = ["bytes", "KB", "MB", "GB"];
  let value = Number(n || 0);
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return unit === 0 ? `${value} bytes` : `${value.toFixed(1)} ${units[unit]}`;
}

function choose(file) {
  chosen = file || null;
  $("im-chosen").textContent = chosen ? `${chosen.name} (${bytes(chosen.size)})` : "No file chosen";
  start.disabled = !chosen;
  if (chosen && chosen.size > config.maxBytes) {
    showMessage($("im-message"), `${chosen.name} is larger than the import limit of ${formatCount(config.maxBytes)} bytes.`, "error");
    start.disabled = true;
  } else {
    showMessage($("im-message"), "");
  }
}

input.addEventListener("change", () => choose(input.files[0]));
["dragenter", "dragover"].forEach((name) =>
  drop.addEventListener(name, (event) => {
    event.preventDefault();
    drop.classList.add("is-over");
  }),
);
["dragleave", "drop"].forEach((name) =>
  drop.addEventListener(name, () => drop.classList.remove("is-over")),
);
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  if (event.dataTransfer && event.dataTransfer.files.length) choose(event.dataTransfer.files[0]);
});

function setBar(value, max) {
  const bar = $("im-bar");
  if (max > 0) {
    bar.max = max;
    bar.value = Math.min(value, max);
  } else {
    bar.removeAttribute("value"); // indeterminate
  }
}

function showJobHead(name, state, label) {
  $("im-job").hidden = false;
  $("im-job-name").textContent = name;
  const badge = $("im-job-status");
  badge.textContent = label;
  badge.className = `badge im-${state}`;
  root.dataset.state = state;
}

// The upload itself: XMLHttpRequest, for its upload progress events.
function upload(file, format) {
  return new Promise((resolve, reject) => {
    const body = new FormData();
    body.append("file", file);
    body.append("format", format);
    const request = new XMLHttpRequest();
    request.open("POST", config.api.imports);
    request.setRequestHeader("X-CSRFToken", csrfToken());
    request.setRequestHeader("Accept", "application/json");
    request.upload.addEventListener("progress", (event) => {
      const total = event.lengthComputable ? event.total : file.size;
      setBar(event.loaded, total);
      $("im-progress-text").textContent =
        event.loaded >= total ? "Uploaded; waiting for the import…" : `Uploading: ${bytes(event.loaded)} of ${bytes(total)}`;
    });
    request.addEventListener("load", () => {
      let data;
      try {
        data = request.responseText ? JSON.parse(request.responseText) : null;
      } catch {
        data = null;
      }
      if (request.status === 202) resolve(data);
      else reject(Object.assign(new Error(`upload: ${request.status}`), { status: request.status, body: data }));
    });
    request.addEventListener("error", () => reject(new Error("The upload was interrupted.")));
    request.send(body);
  });
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!chosen) return;
  clearTimeout(pollTimer);
  start.disabled = true;
  showMessage($("im-message"), "");
  $("im-counts").hidden = true;
  $("im-failure").hidden = true;
  showJobHead(chosen.name, "uploading", "uploading");
  setBar(0, chosen.size);
  try {
    const job = await upload(chosen, $("im-format").value);
    const address = new URL(window.location.href);
    address.searchParams.set("job", job.id);
    window.history.replaceState(null, "", address);
    render(job);
  } catch (error) {
    $("im-job").hidden = true;
    root.dataset.state = "idle";
    showMessage($("im-message"), errorText(error) || "The upload failed.", "error");
    start.disabled = false;
  }
});

function render(job) {
  const labels = { queued: "queued", running: "importing", done: "imported", failed: "not imported" };
  showJobHead(job.filename, job.status, labels[job.status] || job.status);
  const text = $("im-progress-text");
  if (job.status === "queued") {
    setBar(0, 1);
    text.textContent = "Waiting for a worker…";
  } else if (job.status === "running") {
    setBar(job.bytes_read, job.size);
    text.textContent = job.records_read
      ? `${formatCount(job.records_read)} records read · ${bytes(job.bytes_read)} of ${bytes(job.size)}`
      : `Checking the file (${bytes(job.size)})…`;
  } else {
    setBar(1, 1);
    text.textContent = `${formatCount(job.records_read)} records read · ${bytes(job.size)}`;
  }
  if (job.status === "done") renderDone(job);
  if (job.status === "failed") renderFailed(job);
  if (job.status === "queued" || job.status === "running") {
    pollTimer = setTimeout(() => poll(job.url), POLL_MS);
  } else {
    start.disabled = !chosen;
  }
}

function renderDone(job) {
  const result = job.result;
  $("im-chains-created").textContent = formatCount(result.chains_created);
  $("im-chains-duplicate").textContent = formatCount(result.chains_duplicate);
  $("im-steps-created").textContent = formatCount(result.steps_created);
  $("im-labels-created").textContent = formatCount(result.labels_created);
  $("im-format-read").textContent = result.format;
  $("im-counts").hidden = false;
  // A problems file adds problems (for sampling runs), no chains.
  const added = result.format === "problems"
    ? `${formatCount(result.problems_created)} problems (${formatCount(result.problems_duplicate)} ` +
      "already here)"
    : `${formatCount(result.chains_created)} chains`;
  showMessage(
    $("im-message"),
    result.already_imported
      ? `${job.filename} was imported into this project before; nothing was added.`
      : `${job.filename} was imported: ${added}.`,
    "ok",
  );
}

function renderFailed(job) {
  $("im-detail").textContent = job.detail;
  const table = $("im-errors");
  const rows = table.querySelector("tbody");
  rows.replaceChildren(
    ...job.errors.map((error) => {
      const tr = document.createElement("tr");
      const line = document.createElement("td");
      line.textContent = error.where;
      const reason = document.createElement("td");
      reason.textContent = error.reason;
      tr.append(line, reason);
      return tr;
    }),
  );
  table.hidden = job.errors.length === 0;
  const omitted = $("im-errors-omitted");
  omitted.textContent = `… and ${formatCount(job.errors_omitted)} more bad lines.`;
  omitted.hidden = !job.errors_omitted;
  $("im-failure").hidden = false;
  showMessage($("im-message"), "Nothing from this file was written.", "error");
}

async function poll(url) {
  try {
    render(await api(url));
  } catch (error) {
    if (error.status === 404 || error.status === 403) {
      showMessage($("im-message"), errorText(error), "error");
      root.dataset.state = "idle";
      return;
    }
    // A dropped connection or a restarting server: try again.
    pollTimer = setTimeout(() => poll(url), POLL_MS * 3);
  }
}

// "idle" once the page listens (the template says "loading"): a file dropped before
// this line would be dropped on nothing.
const following = new URL(window.location.href).searchParams.get("job");
if (following && /^\d+$/.test(following)) poll(`${config.api.imports}${following}/`);
else root.dataset.state = "idle";
