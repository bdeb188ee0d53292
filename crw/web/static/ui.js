// crw flow ui: live updates by Server-Sent Events (no build step, no library).
// The runs page fetches its table again on each `runs` event; a run's page sets
// the cells of the calls a `calls` event names, appends the rows of a `rows`
// event, and fetches its live part again (and redraws its timeline) when the
// run's state changes, its live part when a call it does not show yet appears.
// Text is set as text, never as markup.
"use strict";

(function () {
  const body = document.body;
  const source = body.dataset.events;
  if (!source || !window.EventSource) return;
  let fetching = null;
  let again = false;

  function refetch(url, target) {
    if (fetching) { again = true; return; }
    fetching = fetch(url, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => { document.getElementById(target).innerHTML = html; })
      .catch(() => {})
      .finally(() => {
        fetching = null;
        if (again) { again = false; refetch(url, target); }
      });
  }

  function partUrl() {
    const url = new URL(window.location.href);
    url.searchParams.set("part", "1");
    url.searchParams.delete("token");
    return url.toString();
  }

  function rowOf(call) {
    for (const tr of document.querySelectorAll("#calls tbody tr")) {
      if (tr.dataset.call === call) return tr;
    }
    return null;
  }

  const events = new EventSource(source);
  body.dataset.live = "connecting";
  events.onopen = () => { body.dataset.live = "open"; };

  if (body.dataset.page === "runs") {
    events.addEventListener("runs", () => refetch(partUrl(), "runs-table"));
    return;
  }

  events.addEventListener("calls", (e) => {
    let missing = false;
    for (const call of JSON.parse(e.data)) {
      const tr = rowOf(call.call);
      if (!tr) { missing = true; continue; }
      for (const cell of tr.querySelectorAll("[data-field]")) {
        const value = call[cell.dataset.field];
        cell.textContent = value === null || value === undefined ? "" : String(value);
        if (cell.dataset.field === "state") cell.className = "state state-" + call.state;
      }
    }
    if (missing && document.querySelectorAll("#calls tbody tr").length < 100) {
      refetch(body.dataset.part, "live");
    }
  });

  events.addEventListener("rows", (e) => {
    const table = document.getElementById("rows");
    if (!table || table.dataset.following !== "yes") return;
    const tbody = table.tBodies[0];
    for (const row of JSON.parse(e.data)) {
      const tr = document.createElement("tr");
      const line = document.createElement("td");
      line.className = "line";
      line.textContent = row.text;
      tr.append(line);
      tbody.append(tr);
    }
  });

  events.addEventListener("run", (e) => {
    const run = JSON.parse(e.data);
    const progress = document.getElementById("run-progress");
    if (progress && run.progress) {
      progress.textContent = run.progress.done + "/" + run.progress.total;
    }
    const state = document.getElementById("run-state");
    const shown = state ? state.textContent + "/" + state.dataset.live : "";
    const key = run.state + "/" + String(run.live);
    const before = body.dataset.runKey === undefined ? shown : body.dataset.runKey;
    body.dataset.runKey = key;
    if (before !== key) {
      refetch(body.dataset.part, "live");
      const timeline = document.querySelector("object.timeline");
      if (timeline) {
        const url = new URL(timeline.data);
        url.searchParams.set("at", String(Date.now()));
        timeline.data = url.toString();
      }
    }
  });
})();
