// fragscope view: the allocator's layout at a moment (segments, blocks, holes), a block's
// details, and the panels beside it (OOMs, sweep, verdict).
"use strict";

// Segments drawn at most: the DOM stays bounded whatever the layout (the rest are counted).
FS.MAX_SEGMENTS = 2000;

// Layout panels: the elements of one (`nodes`: {title, summary, map, details}, from the ids
// layout-title, layout-summary, segment-map and block-details, with `suffix` for the second
// panel of a diff).
FS.layoutNodes = function (suffix) {
  const get = (id) => document.getElementById(id + suffix);
  return {title: get("layout-title"), summary: get("layout-summary"), map: get("segment-map"),
          details: get("block-details"), suffix: suffix};
};

FS.renderLayout = function (nodes, layout, title, pinning, onSelectEvent) {
  nodes.title.textContent = FS.safe(title);
  const summary = nodes.summary;
  summary.textContent =
    "reserved " + FS.bytes(layout.reserved_bytes) + " · allocated " +
    FS.bytes(layout.allocated_bytes) + " · free cached " + FS.bytes(layout.free_cached_bytes) +
    " in " + FS.count(layout.holes) + " holes (largest " + FS.bytes(layout.largest_hole_bytes) +
    ") · " + FS.count(layout.segments) + " segments, " + FS.count(layout.fragmented_segments) +
    " fragmented · RMM fragmentation " + Number(layout.rmm_fragmentation).toFixed(3);
  const map = FS.clear(nodes.map);
  FS.clear(nodes.details);
  const maps = layout.maps || [];
  const shown = maps.slice(0, FS.MAX_SEGMENTS);
  for (const segment of shown) {
    const bar = FS.el("div", {class: "bar"});
    for (const block of segment.blocks) {
      const share = 100 * block.size_bytes / Math.max(1, segment.size_bytes);
      let cls = "block " + block.state;
      if (pinning.has(block.address) && block.state !== "free") cls += " pinning";
      const node = FS.el("div", {
        class: cls, style: "width:" + share + "%", title: FS.bytes(block.size_bytes) + " " +
          block.state + (block.phase ? " · " + block.phase : "") +
          (block.role && block.role !== "unknown" ? " · " + block.role : "") +
          (block.module ? " · " + block.module : "") + (block.op ? " · " + block.op : ""),
        dataset: {address: block.address}});
      node.addEventListener("click", () => {
        for (const old of map.querySelectorAll(".block.selected")) old.classList.remove("selected");
        node.classList.add("selected");
        FS.renderBlock(nodes, block, segment, onSelectEvent);
      });
      bar.appendChild(node);
    }
    const label = segment.address + " " + FS.bytes(segment.size_bytes) + " " + segment.pool +
      " stream " + segment.stream + (segment.fragmented ? " · fragmented" : "");
    map.appendChild(FS.el("div", {class: "segment" + (segment.fragmented ? " fragmented" : "")},
                          FS.el("div", {class: "label", title: label}, label), bar));
  }
  const leftOut = maps.length - shown.length;
  if (leftOut > 0 || layout.blocks_left_out > 0) {
    map.appendChild(FS.el("div", {class: "label"},
      (leftOut > 0 ? FS.count(leftOut) + " more segments not drawn. " : "") +
      (layout.blocks_left_out > 0 ? FS.count(layout.blocks_left_out) +
        " blocks of the smallest segments not listed by fragscope view." : "")));
  }
};

FS.renderBlock = function (nodes, block, segment, onSelectEvent) {
  const details = FS.clear(nodes.details);
  const rows = [
    ["address", block.address],
    ["segment", segment.address + " (" + FS.bytes(segment.size_bytes) + ", " + segment.pool + ")"],
    ["size", FS.bytes(block.size_bytes) + " (" + FS.count(block.size_bytes) + " bytes)"],
    ["requested", block.state === "free" ? "–" : FS.bytes(block.requested_bytes)],
    ["state", block.state],
  ];
  if (block.state !== "free") {
    const when = block.before_trace ? FS.el("span", {}, "before the trace")
      : FS.el("button", {class: "link", id: "alloc-event" + nodes.suffix,
                         onclick: () => onSelectEvent(block.alloc_event)},
              "event " + FS.count(block.alloc_event));
    rows.push(["allocated at", when]);
    rows.push(["time", FS.duration(block.alloc_time_ns)]);
    rows.push(["phase", block.phase || "(no marker)"]);
    rows.push(["role", block.role || "unknown"]);
    if (block.module) rows.push(["module", block.module]);
    if (block.op) rows.push(["op", block.op + (block.backward ? " (in backward)" : "")]);
    if (block.site) rows.push(["call site", block.site]);
  }
  const dl = FS.el("dl");
  for (const [name, value] of rows) {
    dl.appendChild(FS.el("dt", {}, name));
    dl.appendChild(FS.el("dd", {}, value));
  }
  details.appendChild(FS.el("h2", {}, "Block"));
  details.appendChild(dl);
};

// Who holds a block, as the reports say it (analysis/explain/block_holder.h): "saved_activations of
// transformer.h.7.attn (aten::bmm)".
FS.holder = function (role, c) {
  let text = role && role !== "unknown" ? role : "";
  if (c.module) text += (text ? " of " : "") + c.module;
  if (c.op || c.backward) {
    text += (text ? " " : "") + "(" + (c.op || "") + (c.op && c.backward ? ", " : "") +
      (c.backward ? "in backward" : "") + ")";
  }
  return text;
};

FS.renderVerdict = function (report) {
  const node = FS.clear(document.getElementById("verdict"));
  const v = report.verdict || {};
  const sweep = (report.sweep || {}).configs || [];
  const ooms = (report.ooms || {}).count || 0;
  node.appendChild(FS.el("span", {}, ooms + (ooms === 1 ? " OOM. " : " OOMs. ")));
  if (v.capacity_bound) {
    node.appendChild(FS.el("span", {class: "bound"}, "Capacity-bound: no setting saves it. "));
  } else if (v.recommended !== null && v.recommended !== undefined && sweep[v.recommended]) {
    node.appendChild(FS.el("span", {class: "fix"}, "Recommended: " + sweep[v.recommended].label +
                                                    ". "));
  }
  if (v.cause) node.appendChild(FS.el("span", {}, "Cause: " + v.cause + ". "));
  if (v.why) node.appendChild(FS.el("span", {}, v.why));
  if (!node.textContent) node.textContent = "No OOM and no verdict to give.";
  // Who holds the memory at the demand's peak: by role (or the estimator's terms) and by module.
  const d = v.demand;
  if (d && ((d.terms || []).length > 0 || (d.modules || []).length > 0)) {
    const parts = (list, key) => list.slice(0, 5).map((t) => t[key] + " " + FS.bytes(t.bytes))
      .join(", ");
    node.appendChild(FS.el("div", {class: "peak-holders"}, "At the peak (" + FS.bytes(d.peak_bytes) +
      "): " + ((d.terms || []).length > 0 ? parts(d.terms, "name") : "") +
      ((d.modules || []).length > 0 ? " · by module: " + parts(d.modules, "module") : "")));
  }
};

// `unswept`: what to say when the report carries no sweep.
FS.renderSweep = function (report, unswept) {
  const table = FS.clear(document.getElementById("sweep-table"));
  const sweep = report.sweep || {};
  const rec = (report.verdict || {}).recommended;
  table.appendChild(FS.el("tr", {}, FS.el("th", {}, "setting"), FS.el("th", {}, "peak reserved"),
                          FS.el("th", {}, "OOMs")));
  (sweep.configs || []).forEach((row, i) => {
    table.appendChild(FS.el("tr", {class: i === rec ? "recommended" : ""},
      FS.el("td", {}, row.label + (row.is_trace_config ? " (trace)" : "")),
      FS.el("td", {}, row.error ? "error" : FS.bytes(row.peak_reserved_bytes)),
      FS.el("td", {}, row.error ? row.error : String(row.ooms))));
  });
  if ((sweep.configs || []).length === 0) {
    table.appendChild(FS.el("tr", {}, FS.el("td", {colspan: "3"}, unswept || "no sweep")));
  }
};

// items: [{oom, k (its number in its trace, from 0), label ("" or "A", "B")}].
FS.renderOoms = function (items, onOom) {
  const list = FS.clear(document.getElementById("oom-list"));
  for (const item of items) {
    const oom = item.oom;
    const node = FS.el("li", {dataset: {event: String(oom.event)}},
      FS.el("b", {}, (item.label ? item.label + " " : "") + "#" + (item.k + 1) + " event " +
                     FS.count(oom.event) + " · " + oom.cause),
      FS.el("div", {}, oom.headline));
    node.addEventListener("click", () => {
      for (const old of list.querySelectorAll("li.selected")) old.classList.remove("selected");
      node.classList.add("selected");
      onOom(item);
    });
    list.appendChild(node);
  }
  if (items.length === 0) list.appendChild(FS.el("li", {}, "none"));
};

FS.renderOomDetails = function (oom) {
  const node = FS.clear(document.getElementById("oom-details"));
  node.appendChild(FS.el("p", {}, oom.headline));
  const ul = FS.el("ul");
  for (const line of oom.evidence || []) ul.appendChild(FS.el("li", {}, line));
  node.appendChild(ul);
  const held = Object.entries(oom.held_by_role || {}).sort((a, b) => b[1] - a[1]);
  if (held.some(([role]) => role !== "unknown")) {
    node.appendChild(FS.el("p", {}, "Held by role: " +
      held.map(([role, bytes]) => role + " " + FS.bytes(bytes)).join(", ")));
  }
  const rc = oom.request_context;
  if (rc) {
    node.appendChild(FS.el("p", {}, "Requested by: " + FS.holder(rc.role, rc)));
  }
  if ((oom.held_by_module || []).length > 0) {
    node.appendChild(FS.el("p", {}, "Held by module: " +
      oom.held_by_module.map((m) => m.module + " " + FS.bytes(m.bytes)).join(", ")));
  }
  if (oom.avoided_by) node.appendChild(FS.el("p", {}, "Fix: " + oom.avoided_by));
  const pins = oom.pinning || [];
  if (pins.length > 0) {
    node.appendChild(FS.el("p", {}, pins.length + " pinning blocks, marked red on the map: " +
      pins.map((p) => FS.bytes(p.size_bytes) + " " + FS.holder(p.role, p) +
               (p.site ? " at " + p.site : "")).join("; ")));
  }
};
