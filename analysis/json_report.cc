#include "analysis/json_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "allocator/device_stats.h"
#include "analysis/json_verdict.h"
#include "analysis/json_writer.h"

namespace fragscope {
namespace {

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

void WriteLayout(JsonWriter& j, const LayoutSummary& l) {
  j.BeginObject();
  j.Field("event", l.index);
  j.Field("time_ns", l.time_ns);
  j.Field("segments", l.segments);
  j.Field("fragmented_segments", l.fragmented_segments);
  j.Field("reserved_bytes", l.reserved_bytes);
  j.Field("allocated_bytes", l.allocated_bytes);
  j.Field("active_bytes", l.active_bytes);
  j.Field("free_cached_bytes", l.free_cached_bytes);
  j.Field("holes", l.holes);
  j.Field("largest_hole_bytes", l.largest_hole);
  j.Field("rmm_fragmentation", l.rmm_fragmentation);
  j.EndObject();
}

void WriteOom(JsonWriter& j, const OomExplanation& x) {
  j.BeginObject();
  j.Field("event", x.event_index);
  j.Field("time_ns", x.time_ns);
  j.Field("phase", x.phase);
  j.Field("in_trace", x.in_trace);
  j.Field("in_replay", x.in_replay);
  j.Field("cause", OomCauseName(x.cause));
  j.Field("rule", PolicyRuleName(x.rule));
  j.Field("headline", x.headline);
  j.Key("evidence");
  j.BeginArray();
  for (const std::string& e : x.evidence) j.String(e);
  j.EndArray();
  j.Field("requested_bytes", x.requested_bytes);
  j.Field("rounded_bytes", x.rounded_bytes);
  j.Field("segment_bytes", x.segment_bytes);
  j.Field("stream", Hex(x.stream));
  j.Field("device_total_bytes", x.device_total_bytes);
  j.Field("device_free_bytes", x.device_free_bytes);
  j.Field("allowed_bytes", x.allowed_bytes);
  j.Field("limit_bytes", x.limit_bytes);
  j.Field("outside_bytes", x.outside_bytes);
  j.Field("available_bytes", x.available_bytes);
  j.Field("reserved_bytes", x.reserved_bytes);
  j.Field("allocated_bytes", x.allocated_bytes);
  j.Field("pending_free_bytes", x.pending_free_bytes);
  j.Field("reserved_but_unallocated_bytes", x.reserved_but_unallocated_bytes);
  j.Field("free_cached_bytes", x.free_cached_bytes);
  j.Field("holes", x.holes);
  j.Field("headroom_bytes", x.headroom_bytes);
  j.Field("at_cap", x.at_cap);
  j.Field("largest_hole_bytes", x.largest_hole);
  j.Field("fragmented_segments", x.fragmented_segment_count);
  j.Field("oversize_rejected_bytes", x.oversize_rejected_bytes);
  j.Field("other_stream_fitting_bytes", x.other_stream_fitting_bytes);
  j.Key("pool_id");
  j.BeginArray();
  j.Uint(x.pool_id.first);
  j.Uint(x.pool_id.second);
  j.EndArray();
  j.Field("private_pools", x.private_pool_count);
  j.Field("graph_pools", x.graph_pool_count);
  j.Field("private_pool_reserved_bytes", x.private_pool_reserved_bytes);
  j.Field("private_pool_free_bytes", x.private_pool_free_bytes);
  j.Key("fragmented");
  j.BeginArray();
  for (const FragmentedSegment& s : x.fragmented) {
    j.BeginObject();
    j.Field("address", Hex(s.address));
    j.Field("size_bytes", s.size);
    j.Field("free_bytes", s.free_bytes);
    j.Field("holes", s.holes);
    j.Field("largest_hole_bytes", s.largest_hole);
    j.Field("live_blocks", s.live_blocks);
    j.EndObject();
  }
  j.EndArray();
  j.Key("pinning");
  j.BeginArray();
  for (const PinningBlock& p : x.pinning) {
    j.BeginObject();
    j.Field("address", Hex(p.address));
    j.Field("segment", Hex(p.segment));
    j.Field("size_bytes", p.size);
    j.Field("requested_bytes", p.requested_bytes);
    j.Field("pending_free", p.pending_free);
    j.Field("before_trace", p.origin.before_trace);
    j.Field("alloc_event", p.origin.index);
    j.Field("alloc_time_ns", p.origin.time_ns);
    j.Field("phase", p.phase);
    j.EndObject();
  }
  j.EndArray();
  j.Field("avoided_by", x.avoided_by);
  j.Key("model_gap");
  j.BeginArray();
  for (const std::string& line : x.model_gap) j.String(line);
  j.EndArray();
  j.EndObject();
}

void WriteSweep(JsonWriter& j, const RankReport& r, const JsonReportOptions& options) {
  j.BeginObject();
  if (options.include_timings) j.Field("seconds", r.sweep_seconds);
  j.Key("recommended");
  if (r.recommended.has_value()) {
    j.Uint(*r.recommended);
  } else {
    j.Null();
  }
  j.Field("recommendation", r.recommendation);
  j.Field("trace_ooms", r.sweep.empty() ? int64_t{0} : r.sweep.front().trace_ooms);
  j.Key("configs");
  j.BeginArray();
  for (const SweepResult& s : r.sweep) {
    j.BeginObject();
    j.Field("label", s.config.label);
    j.Field("is_trace_config", s.config.is_trace_config);
    j.Field("changes_from_trace", s.config.changes_from_trace);
    j.Field("expandable_segments", s.config.options.expandable_segments);
    j.Field("placement", PlacementPolicyName(s.config.options.placement));
    j.Field("pytorch_applicable", s.config.pytorch_applicable);
    j.Field("peak_reserved_bytes", s.peak_reserved_bytes);
    j.Field("peak_allocated_bytes", s.peak_allocated_bytes);
    j.Field("peak_active_bytes", s.peak_active_bytes);
    j.Field("utilization", s.utilization);
    j.Field("device_mallocs", s.device_mallocs);
    j.Field("device_frees", s.device_frees);
    j.Field("alloc_retries", s.alloc_retries);
    j.Field("ooms", s.ooms);
    j.Key("first_oom_event");
    if (s.first_oom_index.has_value()) {
      j.Uint(*s.first_oom_index);
    } else {
      j.Null();
    }
    j.Field("error", s.error);
    j.EndObject();
  }
  j.EndArray();
  j.EndObject();
}

// The "trace" and "device" members, shared by the analysis and the sweep documents.
void WriteTraceAndDevice(JsonWriter& j, const RankReport& r) {
  const TraceInfo& info = r.info;
  j.Key("trace");
  j.BeginObject();
  j.Field("path", info.path);
  j.Field("format", TraceFormatName(info.format));
  j.Field("device", info.device);
  j.Field("rank", info.rank);
  j.Field("world_size", info.world_size);
  j.Field("pid", info.pid);
  j.Field("host", info.host);
  j.Field("device_name", info.device_name);
  j.Field("start_wall_ns", info.start_wall_ns);
  j.Field("allocator_options", info.allocator_options);
  j.Field("expandable_segments", info.expandable_segments);
  j.EndObject();
  j.Key("device");
  j.BeginObject();
  j.Field("capacity_bytes", r.capacity_bytes);
  j.Field("capacity_source", r.capacity_source);
  j.Field("allowed_bytes", r.allowed_bytes);
  j.EndObject();
}

void WriteRank(JsonWriter& j, const RankReport& r, const JsonReportOptions& options) {
  const MemoryMetrics& m = r.metrics;
  j.BeginObject();
  WriteTraceAndDevice(j, r);
  j.Key("replay");
  j.BeginObject();
  j.Field("options", r.options);
  j.Field("events", m.events);
  j.Field("allocations", m.allocations);
  j.Field("frees", m.frees);
  if (options.include_timings) j.Field("seconds", r.replay_seconds);
  j.Key("warnings");
  j.BeginArray();
  for (const std::string& w : r.warnings) j.String(w);
  j.EndArray();
  j.EndObject();
  j.Key("peaks");
  j.BeginObject();
  j.Field("allocated_bytes", m.peak_allocated_bytes);
  j.Field("active_bytes", m.peak_active_bytes);
  j.Field("requested_bytes", m.peak_requested_bytes);
  j.Field("reserved_bytes", m.peak_reserved_bytes);
  j.Field("internal_waste_bytes", m.peak_internal_waste_bytes);
  j.Field("refused_requests_left_out", m.refused_requests_left_out);
  j.Field("refused_bytes_left_out", m.refused_bytes_left_out);
  j.EndObject();
  j.Key("at_peak_reserved");
  j.BeginObject();
  j.Field("event", m.at_peak.index);
  j.Field("time_ns", m.at_peak.time_ns);
  j.Field("reserved_bytes", m.at_peak.reserved_bytes);
  j.Field("allocated_bytes", m.at_peak.allocated_bytes);
  j.Field("active_bytes", m.at_peak.active_bytes);
  j.Field("requested_bytes", m.at_peak.requested_bytes);
  j.Field("free_cached_bytes", m.at_peak.free_cached_bytes);
  j.Field("largest_free_block_bytes", m.at_peak.largest_free_block);
  j.Field("internal_waste_bytes", m.at_peak.internal_waste_bytes);
  j.EndObject();
  j.Key("fragmentation");
  j.BeginObject();
  j.Field("reserved_but_unallocated_bytes", m.reserved_but_unallocated_at_peak);
  j.Field("rmm_fragmentation", m.rmm_fragmentation_at_peak);
  j.Field("utilization", m.utilization);
  j.Field("realized_fragmentation", m.realized_fragmentation);
  j.Field("internal_waste_fraction", m.internal_waste_fraction_at_peak);
  j.EndObject();
  j.Key("final_stats");
  j.BeginObject();
  for (const auto& [key, value] : FlattenStats(m.final_stats)) j.Field(key, value);
  j.EndObject();
  j.Key("timeline");
  j.BeginObject();
  j.Key("columns");
  j.BeginArray();
  for (const char* c : {"event", "time_ns", "allocated_bytes", "active_bytes", "requested_bytes",
                        "reserved_bytes"}) {
    j.String(c);
  }
  j.EndArray();
  j.Key("points");
  j.BeginArray();
  for (const TimelinePoint& p : m.timeline) {
    j.BeginArray();
    for (uint64_t v : {p.index, p.time_ns, p.allocated_bytes, p.active_bytes, p.requested_bytes,
                       p.reserved_bytes}) {
      j.Uint(v);
    }
    j.EndArray();
  }
  j.EndArray();
  j.EndObject();
  j.Key("ooms");
  j.BeginObject();
  j.Field("count", r.oom_count);
  j.Key("explained");
  j.BeginArray();
  for (const OomExplanation& x : r.ooms) WriteOom(j, x);
  j.EndArray();
  j.EndObject();
  j.Key("at");
  if (r.at_layout.has_value()) {
    WriteLayout(j, *r.at_layout);
  } else {
    j.Null();
  }
  j.Key("layout_at_end");
  WriteLayout(j, r.final_layout);
  j.Key("verdict");
  WriteJsonVerdict(j, r.verdict, r.recommended, r.recommendation);
  j.Key("sweep");
  WriteSweep(j, r, options);
  j.Key("model_gap");
  if (r.model_gap.has_value()) {
    const ModelGap& g = *r.model_gap;
    // The estimator's terms are doubles; bytes are written whole, never in %g's six digits.
    const auto bytes = [](double b) {
      return static_cast<uint64_t>(std::llround(std::max(0.0, b)));
    };
    j.BeginObject();
    j.Field("where", r.model_gap_where);
    j.Field("model", g.model);
    j.Field("theoretical_bytes", bytes(g.theoretical_bytes));
    j.Field("allocated_bytes", bytes(g.allocated_bytes));
    j.Field("unattributed_bytes", bytes(g.unattributed_bytes));
    j.Field("likely_term", g.likely_term);
    j.Key("terms");
    j.BeginArray();
    for (const TermGap& t : g.terms) {
      j.BeginObject();
      j.Field("category", t.category);
      j.Field("estimated_bytes", bytes(t.estimated_bytes));
      j.Field("measured_bytes", bytes(t.measured_bytes));
      j.EndObject();
    }
    j.EndArray();
    j.Key("lines");
    j.BeginArray();
    for (const std::string& line : g.lines) j.String(line);
    j.EndArray();
    j.EndObject();
  } else {
    j.Null();
  }
  j.EndObject();
}

}  // namespace

void WriteJsonReport(const AnalysisReport& report, const JsonReportOptions& options,
                     std::ostream& out) {
  JsonWriter j(out);
  j.BeginObject();
  j.Field("schema", "fragscope.analysis");
  j.Field("schema_version", kReportSchemaVersion);
  j.Key("worst_rank");
  if (report.worst.has_value()) {
    j.Int(report.ranks[*report.worst].info.rank);
  } else {
    j.Null();
  }
  j.Field("worst_reason", report.worst_reason);
  j.Key("ranks");
  j.BeginArray();
  for (const RankReport& r : report.ranks) WriteRank(j, r, options);
  j.EndArray();
  j.EndObject();
}

void WriteJsonSweepReport(const RankReport& rank, const JsonReportOptions& options,
                          std::ostream& out) {
  JsonWriter j(out);
  j.BeginObject();
  j.Field("schema", "fragscope.sweep");
  j.Field("schema_version", kSweepSchemaVersion);
  WriteTraceAndDevice(j, rank);
  j.Key("verdict");
  WriteJsonVerdict(j, rank.verdict, rank.recommended, rank.recommendation);
  j.Key("sweep");
  WriteSweep(j, rank, options);
  j.EndObject();
}

}  // namespace fragscope
