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
      // A lost worker, or none alive to take the job (services/jobs/workers.py).
      field("warning").textContent = p.warning || "";
      field("warning").hidden = !p.warning;
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

// Finding page: the py-spy profile as an interactive flame graph (vendored
// d3-flame-graph, see static/vendor/README.md): click a frame to zoom into it, type
// to highlight matching frames. Frame names come from the job's code: the library
// writes them as text, never as markup.
function drawFlameGraph(box) {
  const chartBox = box.querySelector(".flame-chart");
  const details = box.querySelector(".flame-details");
  const tools = box.querySelector(".flame-tools");
  if (typeof window.flamegraph !== "function" || typeof window.d3 === "undefined") {
    details.textContent = "The interactive flame graph needs its script; the static one is below.";
    return;
  }
  fetch(box.dataset.profile, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((response) => {
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      return response.json();
    })
    .then((data) => {
      const chart = window.flamegraph()
        .width(Math.max(280, Math.floor(chartBox.clientWidth || box.clientWidth)))
        .cellHeight(18)
        .minFrameSize(1)
        .transitionDuration(200)
        .sort(true)
        .setDetailsElement(details);
      window.d3.select(chartBox).datum(data).call(chart);
      const term = tools.querySelector("input[name=term]");
      term.addEventListener("input", () => {
        const value = term.value.trim();
        if (value) chart.search(value);
        else chart.clear();
      });
      tools.addEventListener("submit", (event) => event.preventDefault());
      tools.querySelector("[data-action=reset]").addEventListener("click", () => {
        term.value = "";
        chart.clear();
        chart.resetZoom();
      });
      box.dataset.ready = "true";
    })
    .catch((error) => {
      details.textContent = `The interactive flame graph did not load (${error.message}); the static one is below.`;
    });
}

// A flame graph inside a closed <details> has no width yet: draw it when opened.
function whenVisible(box, draw) {
  const folded = box.closest("details:not([open])");
  if (!folded) {
    draw(box);
    return;
  }
  folded.addEventListener("toggle", () => { if (folded.open && !box.dataset.ready) draw(box); }, { once: true });
}

// Phones: the nav folds behind a button.
function foldNav(header) {
  const button = header.querySelector(".nav-toggle");
  if (!button) return;
  button.hidden = false;
  header.classList.add("folding");
  button.addEventListener("click", () => {
    const open = header.classList.toggle("nav-open");
    button.setAttribute("aria-expanded", String(open));
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".flame[data-profile]").forEach((box) => whenVisible(box, drawFlameGraph));
  const header = document.querySelector("header.top");
  if (header) foldNav(header);
  const progress = document.getElementById("progress");
  if (progress) followProgress(progress);
  document.querySelectorAll("form.filters").forEach(autoSubmit);
});
