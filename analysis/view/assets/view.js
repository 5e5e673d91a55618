// fragscope view: the page's state and the entry points the data scripts call
// (FragscopeView.meta / tile / layout; analysis/view/README.md, "Data contract"). A view shows one
// trace, one rank of several at a time (a selector), or two traces side by side (a diff): a
// "panel" is a timeline with its layout panel, showing one source (a trace's files).
"use strict";

window.FragscopeView = (function () {
  let top = null;               // data/meta.js: a trace's meta, or a set's (kind "ranks"/"diff")
  const sources = new Map();    // id -> {entry, meta, layouts, waiting, onMeta}
  const panels = [];            // [{timeline, nodes, source, pinning, request, label}]
  let syncing = false;          // a diff's ranges moving together

  function source(entry) {
    if (!sources.has(entry.id)) {
      sources.set(entry.id, {entry: entry, meta: null, layouts: new Map(), waiting: new Map(),
                             onMeta: []});
    }
    return sources.get(entry.id);
  }

  // Calls back with the source's meta, loading its meta.js first when needed.
  function withMeta(src, callback) {
    if (src.meta) { callback(src.meta); return; }
    src.onMeta.push(callback);
    if (src.onMeta.length > 1) return;
    FS.status("loading " + src.entry.title + "…");
    FS.loadScript(src.entry.dir + "meta.js", () => {
      src.onMeta = [];
      FS.status("could not load " + src.entry.dir + "meta.js");
    });
  }

  function withLayout(src, id, callback) {
    if (src.layouts.has(id)) { callback(src.layouts.get(id)); return; }
    if (!src.waiting.has(id)) {
      src.waiting.set(id, []);
      FS.loadScript(src.entry.dir + "layout-" + id + ".js", () => {
        src.waiting.delete(id);
        FS.status("could not load layout " + id + " of " + src.entry.title);
      });
    }
    src.waiting.get(id).push(callback);
  }

  // The precomputed layout for `event`: the one at that event, else the latest before it.
  function nearestLayout(meta, event) {
    let best = null;
    for (const l of meta.layouts) {
      if (l.event <= event && (best === null || l.event >= best.event)) best = l;
    }
    return best || meta.layouts[0] || null;
  }

  function show(panel, layout, title, mine) {
    if (mine !== panel.request) return;
    try {
      FS.renderLayout(panel.nodes, layout, panel.label + title, panel.pinning,
                      (event) => selectEvent(panel, event));
    } catch (e) {
      // A damaged layout leaves the rest of the page working.
      FS.status("could not show the layout (" + title + "): " + e.message);
    }
    panel.timeline.publishState();
  }

  // The layout at `event` in `panel`: replayed by the server when there is one, else the nearest
  // carried. In a diff the other panel follows, at the aligned event (`followed`: this is it).
  function selectEvent(panel, event, entry, oomPinning, followed) {
    const src = panel.source;
    if (!src) return;
    const mine = ++panel.request;
    // Pinning blocks are marked on their OOM's layout only.
    panel.pinning = oomPinning || new Set();
    panel.timeline.select(event);
    if (!followed && panels.length === 2) {
      const other = panels[panel === panels[0] ? 1 : 0];
      const aligned = Math.max(0, Math.round(FS.alignEvent(top, panel === panels[0], event)));
      selectEvent(other, aligned, null, null, true);
    }
    if (top.api && !entry) {
      FS.status("replaying to event " + FS.count(event) + "…");
      fetch("api/layout?event=" + encodeURIComponent(event) +
            (src.entry.id ? "&source=" + encodeURIComponent(src.entry.id) : ""))
        .then((r) => r.json())
        .then((layout) => {
          if (layout.error) throw new Error(layout.error);
          FS.status("");
          show(panel, layout, "Segments after event " + FS.count(layout.event), mine);
        })
        .catch((e) => FS.status("could not replay to event " + event + ": " + e.message));
      return;
    }
    const chosen = entry || nearestLayout(src.meta, event);
    if (!chosen) { FS.status("this view carries no layouts"); return; }
    withLayout(src, chosen.id, (layout) => {
      const exact = chosen.event === event;
      show(panel, layout, (exact ? "Segments at " : "Nearest precomputed moment: ") + chosen.why +
           ", event " + FS.count(chosen.event) +
           (exact ? "" : " (fragscope view --port replays any event)"), mine);
    });
  }

  function selectOom(item) {
    const panel = panels[item.panel];
    FS.renderOomDetails(item.oom);
    const entry = panel.source.meta.layouts.find((l) => l.why === "OOM " + (item.k + 1));
    selectEvent(panel, item.oom.event, entry,
                new Set((item.oom.pinning || []).map((p) => p.address)));
  }

  // The OOMs of every panel's trace (labelled by panel in a diff).
  function renderOoms() {
    const items = [];
    panels.forEach((panel, p) => {
      const explained = ((panel.source.meta.report || {}).ooms || {}).explained || [];
      explained.forEach((oom, k) => items.push({oom: oom, k: k, panel: p, label: panel.tag}));
    });
    FS.renderOoms(items, selectOom);
  }

  function makePanel(canvas, suffix, label, tag, primary) {
    const panel = {nodes: FS.layoutNodes(suffix), source: null, pinning: new Set(), request: 0,
                   label: label, tag: tag};
    panel.timeline = new FS.Timeline(canvas, {
      select: (event) => selectEvent(panel, event),
      onRange: (range) => followRange(panel, range),
      rangeNode: primary ? document.getElementById("range") : null,
      exportNode: primary ? document.getElementById("export") : null,
      stateName: primary ? "fragscopeViewState" : "fragscopeViewStateB",
    });
    panels.push(panel);
    return panel;
  }

  // A diff: the other timeline shows the aligned range.
  function followRange(panel, range) {
    if (panels.length !== 2 || syncing) return;
    syncing = true;
    const first = panel === panels[0];
    const other = panels[first ? 1 : 0];
    other.timeline.setRange(FS.alignEvent(top, first, range[0]),
                            FS.alignEvent(top, first, range[1]), true);
    syncing = false;
  }

  // Shows source `src` in `panel`; then() once its meta is in.
  function showSource(panel, src, then) {
    withMeta(src, (meta) => {
      FS.status("");
      panel.source = src;
      panel.pinning = new Set();
      panel.request++;
      panel.timeline.load(meta, src.entry.dir, src.entry.id);
      if (then) then(meta);
    });
  }

  // The verdict, sweep and OOMs of the trace in the first panel (a single trace or a rank).
  function renderTrace(meta) {
    FS.renderVerdict(meta.report || {});
    const worst = top.kind === "ranks" ? (top.cross_rank || {}).worst_rank : null;
    FS.renderSweep(meta.report || {}, worst === null || worst === undefined ? "no sweep"
      : "The settings are swept on the worst rank only (rank " + worst + ").");
    renderOoms();
    FS.clear(document.getElementById("oom-details"));
    const warnings = ((meta.report || {}).replay || {}).warnings || [];
    if (warnings.length > 0) FS.status("warning: " + warnings.join("; "));
  }

  function installControls() {
    const each = (f) => panels.forEach((p) => f(p.timeline));
    // In a diff the first timeline leads: the second follows its range.
    document.getElementById("zoom-in").addEventListener("click", () => panels[0].timeline.zoom(0.5));
    document.getElementById("zoom-out").addEventListener("click", () => panels[0].timeline.zoom(2));
    document.getElementById("zoom-reset").addEventListener("click", () => each((t) => t.reset()));
    document.getElementById("sweep-toggle").addEventListener("change", (e) => {
      each((t) => { t.showSweep = e.target.checked; t.scheduleDraw(); });
    });
    const legend = FS.clear(document.getElementById("legend"));
    for (const curve of panels[0].timeline.curves) {
      const item = FS.el("span", {title: "show or hide " + curve.name},
                         FS.el("i", {style: "background:" + curve.color}), curve.name);
      item.addEventListener("click", () => {
        each((t) => {
          if (t.hidden.has(curve.name)) t.hidden.delete(curve.name);
          else t.hidden.add(curve.name);
          t.scheduleDraw();
        });
        item.classList.toggle("off");
      });
      legend.appendChild(item);
    }
  }

  function startTrace(m) {
    const panel = makePanel(document.getElementById("timeline"), "", "", "", true);
    installControls();
    const src = source({id: "", dir: "data/", title: m.title});
    src.meta = m;
    showSource(panel, src, renderTrace);
  }

  function startRanks(m) {
    const panel = makePanel(document.getElementById("timeline"), "", "", "", true);
    installControls();
    const choose = (k) => {
      const entry = m.sources[k];
      FS.markRank(k);
      showSource(panel, source(entry), (meta) => {
        document.getElementById("title").textContent = "fragscope view: rank " + entry.rank +
          " of " + FS.safe(m.title) + " — " + FS.safe(entry.title) + ", " +
          FS.count(meta.events) + " events";
        renderTrace(meta);
      });
    };
    FS.renderRanks(m, choose);
    const worst = (m.cross_rank || {}).worst_rank;
    const start = m.sources.findIndex((s) => s.rank === worst);
    choose(start >= 0 ? start : 0);
  }

  function startDiff(m) {
    document.getElementById("timeline-b-box").hidden = false;
    document.getElementById("layout-b").hidden = false;
    document.getElementById("sweep-box").hidden = true;
    document.getElementById("layout-title-b").textContent = "B: click a timeline or an OOM";
    document.body.classList.add("diff");
    const [a, b] = m.sources;
    document.getElementById("timeline-title").textContent = "A: " + FS.safe(a.title);
    document.getElementById("timeline-b-title").textContent = "B: " + FS.safe(b.title);
    const pa = makePanel(document.getElementById("timeline"), "", "A: ", "A", true);
    const pb = makePanel(document.getElementById("timeline-b"), "-b", "B: ", "B", false);
    installControls();
    FS.renderDiff(m, (rangeA) => pa.timeline.setRange(rangeA[0], rangeA[1]));
    showSource(pa, source(a), () => showSource(pb, source(b), () => renderOoms()));
  }

  return {
    meta: function (m) {
      if (top && m.source !== undefined) {
        // A source's meta in a view of several traces.
        const src = sources.get(m.source);
        if (!src || src.meta) return;
        src.meta = m;
        const callbacks = src.onMeta;
        src.onMeta = [];
        for (const callback of callbacks) callback(m);
        return;
      }
      top = m;
      document.title = "fragscope view: " + m.title;
      document.getElementById("title").textContent = "fragscope view: " + FS.safe(m.title) +
        (m.kind ? "" : " — " + FS.count(m.events) + " events, " + FS.count(m.operations) +
                       " operations");
      if (m.kind === "ranks") startRanks(m);
      else if (m.kind === "diff") startDiff(m);
      else startTrace(m);
    },
    tile: function (level, index, base64, sourceId) {
      for (const panel of panels) {
        if (panel.source && panel.source.entry.id === (sourceId || "")) {
          panel.timeline.addTile(level, index, base64);
        }
      }
    },
    layout: function (id, layout, sourceId) {
      const src = sources.get(sourceId || "");
      if (!src) return;
      src.layouts.set(id, layout);
      for (const callback of src.waiting.get(id) || []) callback(layout);
      src.waiting.delete(id);
    },
  };
})();

window.addEventListener("error", (e) => FS.status("page error: " + e.message));
