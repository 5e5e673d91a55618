// fragscope view: the timeline. Draws the curves from the levels of detail (analysis/view/
// README.md): the coarsest level that still gives at least one bucket per pixel of the visible
// range, falling back to coarser loaded levels while its tiles arrive; at most MAX_TILES tiles kept
// (least recently used dropped; the coarsest level's single tile stays). Events are not spread
// evenly over operations, so an event is mapped to operations by binary search on the event
// column of the coarsest level's tile, which is always kept.
"use strict";

FS.Timeline = class {
  // options: {select(event), onRange(range) (after the user moved the range), rangeNode,
  // exportNode (may be null), stateName (the window property its state is published on)}.
  constructor(canvas, options) {
    this.canvas = canvas;
    this.options = options;
    this.meta = null;
    this.requested = 0;
    this.drawCount = 0;
    this.showSweep = false;
    this.hidden = new Set();
    // Drawn in this order: allocated last, on top of the demand it usually equals.
    this.curves = [
      {name: "demand", max: "demand_max", min: "demand_min", color: "#9467bd"},
      {name: "reserved", max: "reserved_max", min: "reserved_min", color: "#e8710a"},
      {name: "active", max: "active_max", color: "#72b7b2"},
      {name: "allocated", max: "allocated_max", min: "allocated_min", color: "#4c78a8"},
    ];
    this.installInput();
  }

  // Shows a trace: its meta (analysis/view/README.md, "Data contract") and the directory of its
  // tiles. Tiles of the trace shown before are dropped (and ignored if they still arrive).
  load(meta, dir, sourceId) {
    this.meta = meta;
    this.dir = dir;
    this.sourceId = sourceId;
    this.columns = {};
    meta.columns.forEach((name, i) => { this.columns[name] = i; });
    this.width = meta.columns.length;
    this.tiles = new Map();      // "level-tile" -> Float64Array, in least-recently-used order
    this.pending = new Set();    // "level-tile" being loaded
    this.failed = new Set();
    // The job's events: to the last one read, or an OOM past it (an event number counts the
    // folded free completions too).
    this.first = 0;
    this.last = Math.max(1, meta.events);
    for (const o of ((meta.report || {}).ooms || {}).explained || []) {
      this.last = Math.max(this.last, o.event + 1);
    }
    this.range = [this.first, this.last];
    this.selected = null;
    this.firstPaintMs = undefined;
    this.scheduleDraw();
  }

  static get MAX_TILES() { return 64; }

  coarsest() { return this.meta.levels.length - 1; }

  // The tile's buckets, or undefined while it loads (and the load is started).
  tile(level, index) {
    const key = level + "-" + index;
    const data = this.tiles.get(key);
    if (data) {
      this.tiles.delete(key);
      this.tiles.set(key, data);
      return data;
    }
    if (!this.pending.has(key) && !this.failed.has(key)) {
      this.pending.add(key);
      this.requested++;
      FS.loadScript(this.dir + "L" + level + "-" + index + ".js", () => {
        this.pending.delete(key);
        this.failed.add(key);
        FS.status("could not load tile " + key + " of the timeline");
        this.draw();
      });
    }
    return undefined;
  }

  addTile(level, index, base64) {
    const key = level + "-" + index;
    this.pending.delete(key);
    let data;
    try {
      data = FS.decodeTile(base64);
    } catch (e) {
      // A damaged tile is not asked for again; coarser levels stand in for it.
      this.failed.add(key);
      FS.status("tile " + key + " of the timeline is damaged: " + e.message);
      this.scheduleDraw();
      return;
    }
    this.tiles.set(key, data);
    const pinned = this.coarsest() + "-0";
    while (this.tiles.size > FS.Timeline.MAX_TILES) {
      for (const old of this.tiles.keys()) {
        if (old !== pinned) { this.tiles.delete(old); break; }
      }
    }
    this.scheduleDraw();
  }

  // The operations [lo, hi) that the visible range may cover: from the coarsest level's tile
  // (binary search on its event column: the last bucket starting at or before the event), to
  // within one of its buckets; proportionally to events while that tile loads.
  visibleOps() {
    const coarse = this.tiles.get(this.coarsest() + "-0");
    const ops = this.meta.operations;
    if (!coarse) {
      const total = Math.max(1, this.last - this.first);
      return [(this.range[0] - this.first) / total * ops, (this.range[1] - this.first) / total * ops];
    }
    const W = this.width, ev = this.columns.event, n = Math.floor(coarse.length / W);
    const bucketAt = (event) => {
      let lo = 0, hi = n - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (coarse[mid * W + ev] <= event) lo = mid; else hi = mid - 1;
      }
      return lo;
    };
    const width = this.meta.levels[this.coarsest()].width;
    return [bucketAt(this.range[0]) * width, Math.min(ops, (bucketAt(this.range[1]) + 1) * width)];
  }

  // The level for the visible range: the coarsest whose visible buckets are still at least one
  // per pixel (so no detail the screen could show is lost), else the finest.
  wantedLevel() {
    const pixels = Math.max(1, this.canvas.clientWidth - (this.left || 70) - 8);
    const [lo, hi] = this.visibleOps();
    for (let level = this.coarsest(); level > 0; level--) {
      if ((hi - lo) / this.meta.levels[level].width >= pixels) return level;
    }
    return 0;
  }

  // The tiles of `level` that cover the visible range.
  tilesFor(level) {
    const info = this.meta.levels[level];
    const perTile = this.meta.tile_buckets * info.width;
    const [lo, hi] = this.visibleOps();
    const out = [];
    const last = Math.min(info.tiles - 1, Math.floor(Math.max(lo, hi - 1) / perTile));
    for (let t = Math.max(0, Math.floor(lo / perTile)); t <= last; t++) out.push(t);
    return out;
  }

  // Buckets to draw: from the wanted level if all its tiles are here, else the next coarser one
  // that is complete. Returns {level, chunks: [Float64Array]}.
  drawable() {
    const wanted = this.wantedLevel();
    let found = null;
    for (let level = wanted; level < this.meta.levels.length; level++) {
      const chunks = [];
      let complete = true;
      for (const t of this.tilesFor(level)) {
        const data = this.tile(level, t);
        if (data) chunks.push(data); else complete = false;
      }
      if (complete) { found = {level: level, chunks: chunks}; break; }
    }
    return found || {level: this.coarsest(), chunks: []};
  }

  scheduleDraw() {
    if (this.drawPending) return;
    this.drawPending = true;
    requestAnimationFrame(() => { this.drawPending = false; this.draw(); });
  }

  x(event) {
    const w = this.canvas.clientWidth - this.left - 8;
    return this.left + (event - this.range[0]) / Math.max(1, this.range[1] - this.range[0]) * w;
  }

  eventAt(px) {
    const w = this.canvas.clientWidth - this.left - 8;
    const e = this.range[0] + (px - this.left) / w * (this.range[1] - this.range[0]);
    return Math.max(this.first, Math.min(this.last, Math.round(e)));
  }

  draw() {
    if (!this.meta) return;
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const cssW = canvas.clientWidth, cssH = canvas.clientHeight;
    if (canvas.width !== Math.round(cssW * ratio)) canvas.width = Math.round(cssW * ratio);
    if (canvas.height !== Math.round(cssH * ratio)) canvas.height = Math.round(cssH * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    this.left = 70;
    const top = 10, bottom = cssH - 24;
    const {level, chunks} = this.drawable();
    const c = this.columns, W = this.width;
    // The visible buckets, and the scale: the largest value shown (the cap too when near).
    const visible = [];
    let ymax = 1;
    for (const data of chunks) {
      for (let i = 0; i < data.length; i += W) {
        const e = data[i + c.event];
        const next = i + W < data.length ? data[i + W + c.event] : Infinity;
        if (next < this.range[0] || e > this.range[1]) continue;
        visible.push([data, i]);
        for (const curve of this.curves) {
          if (!this.hidden.has(curve.name)) ymax = Math.max(ymax, data[i + c[curve.max]]);
        }
      }
    }
    const limit = this.meta.limit_bytes;
    if (limit && limit < ymax * 1.6) ymax = Math.max(ymax, limit);
    const sweep = this.showSweep ? this.sweepRows() : [];
    for (const row of sweep) ymax = Math.max(ymax, row.peak_reserved_bytes);
    ymax *= 1.05;
    const y = (v) => bottom - v / ymax * (bottom - top);

    // Axes.
    ctx.strokeStyle = "#d0d4da";
    ctx.fillStyle = "#555";
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const v = ymax * k / 4;
      ctx.beginPath(); ctx.moveTo(this.left, y(v)); ctx.lineTo(cssW - 8, y(v)); ctx.stroke();
      ctx.fillText(FS.bytes(v), 4, y(v) + 4);
    }
    for (let k = 0; k <= 5; k++) {
      const e = this.range[0] + (this.range[1] - this.range[0]) * k / 5;
      ctx.fillText(FS.count(e), Math.min(cssW - 60, this.x(e)), cssH - 8);
    }
    // Everything below stays inside the plot area (a bucket starting before the range would
    // otherwise draw over the axis labels).
    ctx.save();
    ctx.beginPath();
    ctx.rect(this.left, 0, cssW - 8 - this.left, bottom + 1);
    ctx.clip();
    // Phase markers (labelled when there is room) and OOMs.
    const report = this.meta.report || {};
    let lastLabel = -1e9;
    for (const p of report.phases || []) {
      if (p.first_event < this.range[0] || p.first_event > this.range[1]) continue;
      const px = this.x(p.first_event);
      ctx.strokeStyle = "#c8ccd2";
      ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, bottom); ctx.stroke();
      if (px - lastLabel > 120 && px < cssW - 200) {
        ctx.fillStyle = "#888";
        ctx.fillText(FS.safe(p.phase).slice(0, 20), px + 2, top + 9);
        lastLabel = px;
      }
    }
    for (const o of ((report.ooms || {}).explained || [])) {
      if (o.event < this.range[0] || o.event > this.range[1]) continue;
      ctx.strokeStyle = "#d93025"; ctx.lineWidth = 2;
      const px = this.x(o.event);
      ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, bottom); ctx.stroke();
      ctx.lineWidth = 1;
    }
    // The cap and the sweep's peaks.
    const labelled = [];
    if (limit) {
      this.hline(ctx, y(limit), "#b3261e", "cap " + FS.bytes(limit), cssW, [6, 4], labelled);
    }
    // The sweep's peaks: the recommended setting solid and labelled first; the others labelled
    // where they do not overlap a label already drawn (the table lists them all).
    const recommended = ((this.meta.report || {}).verdict || {}).recommended;
    const order = sweep.slice().sort((a, b) => (b.index === recommended) - (a.index === recommended));
    for (const row of order) {
      const best = row.index === recommended;
      this.hline(ctx, y(row.peak_reserved_bytes), best ? "#137333" : "#5f8f6e",
                 (best ? "recommended: " : "") + FS.safe(row.label) + " " +
                 FS.bytes(row.peak_reserved_bytes), cssW, best ? [] : [2, 3], labelled);
    }
    // Curves: a band between min and max where the bucket has both, and the max line.
    for (const curve of this.curves) {
      if (this.hidden.has(curve.name)) continue;
      ctx.strokeStyle = curve.color;
      ctx.fillStyle = curve.color + "33";
      if (curve.min) {
        for (const [data, i] of visible) {
          const x0 = this.x(data[i + c.event]);
          const hi = y(data[i + c[curve.max]]), lo = y(data[i + c[curve.min]]);
          if (lo - hi > 1) ctx.fillRect(x0, hi, 1, lo - hi);
        }
      }
      ctx.beginPath();
      let started = false;
      for (const [data, i] of visible) {
        const px = this.x(data[i + c.event]), py = y(data[i + c[curve.max]]);
        if (!started) { ctx.moveTo(px, py); started = true; } else ctx.lineTo(px, py);
      }
      ctx.stroke();
    }
    if (this.selected !== null) {
      ctx.strokeStyle = "#111"; ctx.setLineDash([3, 3]);
      const px = this.x(this.selected);
      ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, bottom); ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.restore();
    this.level = level;
    this.drawCount++;
    if (this.firstPaintMs === undefined && chunks.length > 0) this.firstPaintMs = performance.now();
    const width = this.meta.levels[level].width;
    if (this.options.rangeNode) {
      this.options.rangeNode.textContent =
        "events " + FS.count(this.range[0]) + "–" + FS.count(this.range[1]) + " · " +
        (width === 1 ? "1 op/point" : FS.count(width) + " ops/point");
    }
    if (this.options.exportNode) {
      const a = Math.floor(this.range[0]), b = Math.ceil(this.range[1]);
      this.options.exportNode.textContent = "fragscope convert " + FS.safe(this.meta.title) +
        " range.pickle --events " + a + ":" + b + "   (or range.json)";
    }
    this.publishState();
  }

  // A horizontal line across the plot; its label at the right unless it would overlap one of
  // `labelled` (the y of the labels drawn so far, which it joins).
  hline(ctx, py, color, label, cssW, dash, labelled) {
    ctx.strokeStyle = color; ctx.setLineDash(dash);
    ctx.beginPath(); ctx.moveTo(this.left, py); ctx.lineTo(cssW - 8, py); ctx.stroke();
    ctx.setLineDash([]);
    if (labelled.some((other) => Math.abs(other - py) < 12)) return;
    labelled.push(py);
    ctx.fillStyle = color;
    ctx.fillText(label, cssW - 8 - ctx.measureText(label).width, py - 3);
  }

  sweepRows() {
    const sweep = (this.meta.report || {}).sweep || {};
    return (sweep.configs || []).map((r, index) => Object.assign({index: index}, r))
      .filter((r) => !r.error);
  }

  publishState() {
    if (!this.meta) return;
    window[this.options.stateName] = {
      source: this.sourceId,
      level: this.level,
      range: [this.range[0], this.range[1]],
      tilesCached: this.tiles.size,
      tilesRequested: this.requested,
      pendingTiles: this.pending.size,
      selectedEvent: this.selected,
      drawCount: this.drawCount,
      firstPaintMs: this.firstPaintMs,
    };
  }

  zoom(factor, around) {
    if (!this.meta) return;
    const center = around === undefined ? (this.range[0] + this.range[1]) / 2 : around;
    let span = (this.range[1] - this.range[0]) * factor;
    span = Math.max(20, Math.min(this.last - this.first, span));
    const share = (center - this.range[0]) / Math.max(1, this.range[1] - this.range[0]);
    this.setRange(center - span * share, center - span * share + span);
  }

  // `quiet`: set by another timeline (the ranges of a diff move together), not reported back.
  setRange(a, b, quiet) {
    if (!this.meta) return;
    const span = Math.min(b - a, this.last - this.first);
    if (a < this.first) { a = this.first; b = a + span; }
    if (b > this.last) { b = this.last; a = Math.max(this.first, b - span); }
    this.range = [a, b];
    this.scheduleDraw();
    if (!quiet && this.options.onRange) this.options.onRange(this.range);
  }

  reset() { this.setRange(this.first, this.last); }

  select(event) {
    this.selected = event;
    this.scheduleDraw();
  }

  installInput() {
    const canvas = this.canvas;
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      if (!this.meta) return;
      const rect = canvas.getBoundingClientRect();
      this.zoom(e.deltaY < 0 ? 0.8 : 1.25, this.eventAt(e.clientX - rect.left));
    }, {passive: false});
    let drag = null;
    canvas.addEventListener("mousedown", (e) => {
      if (!this.meta) return;
      drag = {x: e.clientX, range: this.range.slice(), moved: false};
    });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      const w = canvas.clientWidth - this.left - 8;
      const shift = -dx / w * (drag.range[1] - drag.range[0]);
      this.setRange(drag.range[0] + shift, drag.range[1] + shift);
    });
    window.addEventListener("mouseup", (e) => {
      if (!drag) return;
      const wasClick = !drag.moved;
      drag = null;
      if (wasClick && e.target === canvas) {
        const rect = canvas.getBoundingClientRect();
        if (this.meta) this.options.select(this.eventAt(e.clientX - rect.left));
      }
    });
    window.addEventListener("resize", () => this.scheduleDraw());
  }
};
