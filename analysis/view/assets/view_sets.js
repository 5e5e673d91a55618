// fragscope view: views of several traces (analysis/view/README.md, "Views of several traces"):
// the ranks of a job (the cross-rank summary, a rank selector) and two traces side by side (the
// comparison's tables, and the event alignment that makes their timelines move together).
"use strict";

// ---- Ranks ----

// The cross-rank summary: one row per rank (click: that rank's view), the outliers' sentences
// and the notes; `choose(k)` shows source k.
FS.renderRanks = function (m, choose) {
  document.getElementById("set-panel").hidden = false;
  document.getElementById("ranks-bar").hidden = false;
  const cross = m.cross_rank || {};
  const byRank = new Map((cross.ranks || []).map((r) => [r.rank, r]));
  const outlying = new Set((cross.outliers || []).map((o) => o.rank));
  const select = FS.clear(document.getElementById("rank-select"));
  const table = FS.clear(document.getElementById("rank-table"));
  table.appendChild(FS.el("tr", {}, FS.el("th", {}, "rank"), FS.el("th", {}, "peak reserved"),
    FS.el("th", {}, "peak allocated"), FS.el("th", {}, "utilization"), FS.el("th", {}, "OOMs"),
    FS.el("th", {}, "events"), FS.el("th", {}, "")));
  m.sources.forEach((entry, k) => {
    const r = byRank.get(entry.rank) || {};
    const mark = (entry.rank === cross.worst_rank ? "worst" : "") +
      (outlying.has(entry.rank) ? (entry.rank === cross.worst_rank ? ", " : "") + "outlier" : "");
    select.appendChild(FS.el("option", {value: String(k)},
      "rank " + entry.rank + (mark ? " (" + mark + ")" : "")));
    const row = FS.el("tr", {class: "rank-row" + (mark ? " marked" : ""),
                             dataset: {index: String(k)}},
      FS.el("td", {}, String(entry.rank)), FS.el("td", {}, FS.bytes(r.peak_reserved_bytes)),
      FS.el("td", {}, FS.bytes(r.peak_allocated_bytes)),
      FS.el("td", {}, r.utilization === undefined ? "–" : (100 * r.utilization).toFixed(1) + " %"),
      FS.el("td", {}, String(r.oom_count === undefined ? "–" : r.oom_count)),
      FS.el("td", {}, FS.count(r.events || 0)), FS.el("td", {}, mark));
    row.addEventListener("click", () => choose(k));
    table.appendChild(row);
  });
  select.addEventListener("change", () => choose(Number(select.value)));
  const notes = FS.clear(document.getElementById("rank-notes"));
  const medians = cross.medians || {};
  notes.appendChild(FS.el("li", {}, "Median peak reserved " +
    FS.bytes(medians.peak_reserved_bytes) + ", peak allocated " +
    FS.bytes(medians.peak_allocated_bytes) + "." +
    (cross.worst_rank === null || cross.worst_rank === undefined ? ""
      : " Worst: rank " + cross.worst_rank + " (" + (cross.worst_reason || "") +
        "); the sweep of settings is run on it.")));
  for (const o of cross.outliers || []) notes.appendChild(FS.el("li", {class: "outlier"}, o.sentence));
  for (const note of cross.notes || []) notes.appendChild(FS.el("li", {}, note));
};

// Marks rank k as the one shown, in the selector and the table.
FS.markRank = function (k) {
  document.getElementById("rank-select").value = String(k);
  for (const row of document.querySelectorAll("#rank-table tr.rank-row")) {
    row.classList.toggle("selected", row.dataset.index === String(k));
  }
};

// ---- Two traces side by side ----

// The events of A and B that correspond: the first events of the phases the comparison aligned
// (by the markers' text, in order), the starts and the ends; between two of them, linearly. Kept
// only while both sides increase, so the map is monotone both ways.
FS.alignment = function (m) {
  if (m.alignment) return m.alignment;
  const [a, b] = m.sources;
  const points = [[0, 0]];
  for (const p of (m.comparison || {}).phases || []) {
    if (!p.a || !p.b) continue;
    const last = points[points.length - 1];
    if (p.a.first_event > last[0] && p.b.first_event > last[1]) {
      points.push([p.a.first_event, p.b.first_event]);
    }
  }
  const last = points[points.length - 1];
  const ends = [Math.max(1, a.events || 0), Math.max(1, b.events || 0)];
  if (ends[0] > last[0] && ends[1] > last[1]) points.push(ends);
  m.alignment = points;
  return points;
};

// The event of the other trace that corresponds to `event` of A (fromA) or of B.
FS.alignEvent = function (m, fromA, event) {
  const points = FS.alignment(m);
  const from = fromA ? 0 : 1, to = 1 - from;
  let i = 0;
  while (i + 2 < points.length && points[i + 1][from] <= event) i++;
  const p = points[i], q = points[Math.min(i + 1, points.length - 1)];
  if (q[from] === p[from]) return p[to] + (event - p[from]);
  return p[to] + (event - p[from]) * (q[to] - p[to]) / (q[from] - p[from]);
};

// The comparison: the figures of A and B with B's difference, and each phase of either
// (click a phase: both timelines show it; `zoomA([first, last])` sets A's range, B follows).
FS.renderDiff = function (m, zoomA) {
  document.getElementById("set-panel").hidden = false;
  const c = m.comparison || {};
  const fa = c.a_figures || {}, fb = c.b_figures || {};
  const change = (key) => {
    const d = (fb[key] || 0) - (fa[key] || 0);
    return d === 0 ? "the same" : (d > 0 ? "+" : "−") + FS.bytes(Math.abs(d));
  };
  document.getElementById("verdict").textContent = "B against A: peak reserved " +
    change("peak_reserved_bytes") + ", peak allocated " + change("peak_allocated_bytes") +
    "; OOMs " + (fa.ooms || 0) + " → " + (fb.ooms || 0) + ". Both timelines move together, " +
    "aligned by their phase markers; a click shows both layouts.";
  const table = FS.clear(document.getElementById("diff-table"));
  table.appendChild(FS.el("tr", {}, FS.el("th", {}, FS.safe(c.title || "A against B")),
    FS.el("th", {}, "A: " + c.a), FS.el("th", {}, "B: " + c.b), FS.el("th", {}, "B − A")));
  const rows = [["peak allocated", "peak_allocated_bytes", true],
                ["peak reserved", "peak_reserved_bytes", true],
                ["peak demand", "peak_demand_bytes", true],
                ["allocations", "allocations", false], ["OOMs", "ooms", false]];
  for (const [name, key, bytes] of rows) {
    const a = fa[key] || 0, b = fb[key] || 0;
    const show = bytes ? FS.bytes : FS.count;
    table.appendChild(FS.el("tr", {class: a !== b ? "differs" : ""}, FS.el("td", {}, name),
      FS.el("td", {}, show(a)), FS.el("td", {}, show(b)),
      FS.el("td", {}, a === b ? "same" : (b > a ? "+" : "−") + show(Math.abs(b - a)))));
  }
  const phases = FS.clear(document.getElementById("phase-table"));
  phases.appendChild(FS.el("tr", {}, FS.el("th", {}, "phase"), FS.el("th", {}, "allocations A / B"),
    FS.el("th", {}, "peak allocated A / B"), FS.el("th", {}, "peak reserved A / B")));
  const list = c.phases || [];
  const cell = (p, key, bytes) => (p ? (bytes ? FS.bytes(p[key]) : FS.count(p[key])) : "–");
  list.slice(0, FS.MAX_PHASE_ROWS).forEach((p, k) => {
    const same = p.a && p.b && ["allocations", "peak_allocated_bytes", "peak_reserved_bytes"]
      .every((key) => p.a[key] === p.b[key]);
    const row = FS.el("tr", {class: "phase-row" + (same ? "" : " differs"),
                             title: p.a ? "show this phase in both" : "not in A",
                             dataset: {aFirst: p.a ? String(p.a.first_event) : "",
                                       bFirst: p.b ? String(p.b.first_event) : ""}},
      FS.el("td", {}, p.phase || "(before the first marker)"),
      FS.el("td", {}, cell(p.a, "allocations") + " / " + cell(p.b, "allocations")),
      FS.el("td", {}, cell(p.a, "peak_allocated_bytes", true) + " / " +
                      cell(p.b, "peak_allocated_bytes", true)),
      FS.el("td", {}, cell(p.a, "peak_reserved_bytes", true) + " / " +
                      cell(p.b, "peak_reserved_bytes", true)));
    if (p.a) {
      // The phase in A runs to the next phase of A (or A's end).
      const next = list.slice(k + 1).find((q) => q.a);
      const end = next ? next.a.first_event : Math.max(1, m.sources[0].events || 0);
      row.addEventListener("click", () => zoomA([p.a.first_event, Math.max(p.a.first_event + 20,
                                                                             end)]));
    }
    phases.appendChild(row);
  });
  if (list.length > FS.MAX_PHASE_ROWS) {
    phases.appendChild(FS.el("tr", {}, FS.el("td", {colspan: "4"}, FS.count(list.length -
      FS.MAX_PHASE_ROWS) + " more phases: fragscope diff --json has them all")));
  }
};

// Phase rows shown at most (the DOM stays small on a job of thousands of steps).
FS.MAX_PHASE_ROWS = 500;
