// fragscope view: the page's state and the entry points the data scripts call
// (FragscopeView.meta / tile / layout; analysis/view/README.md, "Data contract").
"use strict";

window.FragscopeView = (function () {
  let meta = null;
  let timeline = null;
  const layouts = new Map();      // id -> layout (precomputed)
  const waiting = new Map();      // id -> callbacks waiting for that layout
  let pinning = new Set();        // addresses of the selected OOM's pinning blocks, on its layout
  let request = 0;                // the latest layout request (older answers are dropped)

  function report() { return (meta && meta.report) || {}; }

  // The precomputed layout for `event`: the one at that event, else the latest before it.
  function nearestLayout(event) {
    let best = null;
    for (const l of meta.layouts) {
      if (l.event <= event && (best === null || l.event >= best.event)) best = l;
    }
    return best || meta.layouts[0] || null;
  }

  function withLayout(id, callback) {
    if (layouts.has(id)) { callback(layouts.get(id)); return; }
    if (!waiting.has(id)) {
      waiting.set(id, []);
      FS.loadScript("data/layout-" + id + ".js", () => {
        waiting.delete(id);
        FS.status("could not load layout " + id);
      });
    }
    waiting.get(id).push(callback);
  }

  function show(layout, title, mine) {
    if (mine !== request) return;
    try {
      FS.renderLayout(layout, title, pinning, selectEvent);
    } catch (e) {
      // A damaged layout leaves the rest of the page working.
      FS.status("could not show the layout (" + title + "): " + e.message);
    }
    timeline.publishState();
  }

  // The layout at `event`: replayed by the server when there is one, else the nearest carried.
  function selectEvent(event, entry, oomPinning) {
    const mine = ++request;
    // Pinning blocks are marked on their OOM's layout only.
    pinning = oomPinning || new Set();
    timeline.select(event);
    if (meta.api && !entry) {
      FS.status("replaying to event " + FS.count(event) + "…");
      fetch("api/layout?event=" + encodeURIComponent(event))
        .then((r) => r.json())
        .then((layout) => {
          if (layout.error) throw new Error(layout.error);
          FS.status("");
          show(layout, "Segments after event " + FS.count(layout.event), mine);
        })
        .catch((e) => FS.status("could not replay to event " + event + ": " + e.message));
      return;
    }
    const chosen = entry || nearestLayout(event);
    if (!chosen) { FS.status("this view carries no layouts"); return; }
    withLayout(chosen.id, (layout) => {
      const exact = chosen.event === event;
      show(layout, (exact ? "Segments at " : "Nearest precomputed moment: ") + chosen.why +
           ", event " + FS.count(chosen.event) +
           (exact ? "" : " (fragscope view --port replays any event)"), mine);
    });
  }

  function selectOom(oom, k) {
    FS.renderOomDetails(oom);
    const entry = meta.layouts.find((l) => l.why === "OOM " + (k + 1));
    selectEvent(oom.event, entry, new Set((oom.pinning || []).map((p) => p.address)));
  }

  function installControls() {
    document.getElementById("zoom-in").addEventListener("click", () => timeline.zoom(0.5));
    document.getElementById("zoom-out").addEventListener("click", () => timeline.zoom(2));
    document.getElementById("zoom-reset").addEventListener("click", () => timeline.reset());
    document.getElementById("sweep-toggle").addEventListener("change", (e) => {
      timeline.showSweep = e.target.checked;
      timeline.scheduleDraw();
    });
    const legend = FS.clear(document.getElementById("legend"));
    for (const curve of timeline.curves) {
      const item = FS.el("span", {title: "show or hide " + curve.name},
                         FS.el("i", {style: "background:" + curve.color}), curve.name);
      item.addEventListener("click", () => {
        if (timeline.hidden.has(curve.name)) timeline.hidden.delete(curve.name);
        else timeline.hidden.add(curve.name);
        item.classList.toggle("off");
        timeline.scheduleDraw();
      });
      legend.appendChild(item);
    }
  }

  return {
    meta: function (m) {
      meta = m;
      document.title = "fragscope view: " + m.title;
      document.getElementById("title").textContent = "fragscope view: " + FS.safe(m.title) + " — " +
        FS.count(m.events) + " events, " + FS.count(m.operations) + " operations";
      timeline = new FS.Timeline(document.getElementById("timeline"), m, {select: selectEvent});
      installControls();
      FS.renderVerdict(report());
      FS.renderSweep(report());
      FS.renderOoms(report(), selectOom);
      const warnings = (report().replay || {}).warnings || [];
      if (warnings.length > 0) FS.status("warning: " + warnings.join("; "));
      timeline.draw();
    },
    tile: function (level, index, base64) {
      if (timeline) timeline.addTile(level, index, base64);
    },
    layout: function (id, layout) {
      layouts.set(id, layout);
      for (const callback of waiting.get(id) || []) callback(layout);
      waiting.delete(id);
    },
  };
})();

window.addEventListener("error", (e) => FS.status("page error: " + e.message));
