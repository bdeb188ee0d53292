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
  events.onopen = () => {
    body.dataset.live = "open";
    delete body.dataset.runKey; // a stream (re)connected: its first event fetches again
  };

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

  // Rows are appended once each, by seq: a row an event brings while the last
  // rows are fetched again waits, and is appended after them unless they hold it.
  let rowsFetching = false;
  let waitingRows = [];

  function appendRows(rows) {
    const tbody = document.getElementById("rows-body");
    const last = tbody.lastElementChild;
    let seen = last ? Number(last.dataset.seq) : 0;
    for (const row of rows) {
      if (row.seq <= seen) continue;
      const tr = document.createElement("tr");
      tr.dataset.seq = String(row.seq);
      const line = document.createElement("td");
      line.className = "line";
      line.textContent = row.text;
      tr.append(line);
      tbody.append(tr);
      seen = row.seq;
    }
  }

  events.addEventListener("rows", (e) => {
    const table = document.getElementById("rows");
    if (!table || table.dataset.following !== "yes") return;
    const rows = JSON.parse(e.data);
    if (rowsFetching) waitingRows = waitingRows.concat(rows);
    else appendRows(rows);
  });

  function refetchRows() {
    rowsFetching = true;
    fetch(body.dataset.rows, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => { document.getElementById("rows-body").innerHTML = html; })
      .catch(() => {})
      .finally(() => {
        rowsFetching = false;
        appendRows(waitingRows);
        waitingRows = [];
      });
  }

  // The page was drawn before its stream connected: the rows written between
  // are in neither, so the first event of the stream fetches the live part and
  // the last rows again (drawn after the stream's first read, they hold them).
  events.addEventListener("run", (e) => {
    const run = JSON.parse(e.data);
    const progress = document.getElementById("run-progress");
    if (progress && run.progress) {
      progress.textContent = run.progress.done + "/" + run.progress.total;
    }
    const key = run.state + "/" + String(run.live);
    const first = body.dataset.runKey === undefined;
    const changed = !first && body.dataset.runKey !== key;
    body.dataset.runKey = key;
    if (first || changed) refetch(body.dataset.part, "live");
    const rows = document.getElementById("rows");
    if (first && rows && rows.dataset.following === "yes") refetchRows();
    if (changed) {
      const timeline = document.querySelector("object.timeline");
      if (timeline) {
        const url = new URL(timeline.data);
        url.searchParams.set("at", String(Date.now()));
        timeline.data = url.toString();
      }
    }
  });
})();
