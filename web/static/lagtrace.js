// Enhancements only: every page works without this file.
"use strict";

// Job page: follow progress in place; reload once the job has finished so the
// server renders the matrix and findings.
function followProgress(section) {
  const url = section.dataset.url;
  const bar = section.querySelector("progress");
  const field = (name) => section.querySelector(`[data-field="${name}"]`);
  async function poll() {
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(String(response.status));
      const p = await response.json();
      if (["done", "failed", "cancelled"].includes(p.status)) {
        window.location.reload();
        return;
      }
      bar.value = p.fraction;
      field("phase").textContent = p.phase;
      field("runs").textContent = `${p.runs_done} of ${p.runs_planned}`;
      const rows = field("configs");
      rows.replaceChildren(...p.configs.map((c) => {
        const tr = document.createElement("tr");
        for (const [text, numeric] of [[c.label, false], [String(c.runs), true], [c.state || "–", false], [c.worker || "–", false]]) {
          const td = document.createElement("td");
          td.textContent = text;
          if (numeric) td.className = "num";
          tr.append(td);
        }
        return tr;
      }));
    } catch (error) {
      field("phase").textContent += " (connection lost, retrying)";
    }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
}

// Filter forms submit as soon as a select changes.
function autoSubmit(form) {
  for (const select of form.querySelectorAll("select")) {
    select.addEventListener("change", () => form.submit());
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const progress = document.getElementById("progress");
  if (progress) followProgress(progress);
  document.querySelectorAll("form.filters").forEach(autoSubmit);
});
