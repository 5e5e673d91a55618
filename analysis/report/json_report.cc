#include "analysis/report/json_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "allocator/device_stats.h"
#include "analysis/explain/block_holder.h"
#include "analysis/report/comparison_render.h"
#include "analysis/report/json_verdict.h"
#include "analysis/report/settings_check_json.h"

namespace fragscope {
namespace {

using estimator::JsonNumber;
using estimator::JsonOrNull;
using estimator::OrderedJson;

// Fractions and seconds: six significant digits.
OrderedJson Fraction(double v) { return JsonNumber(v, 6); }

}  // namespace

std::string HexAddress(uint64_t v) { return absl::StrFormat("0x%x", v); }

OrderedJson LayoutJson(const LayoutSummary& l) {
  OrderedJson j;
  j["event"] = l.index;
  j["time_ns"] = l.time_ns;
  j["segments"] = l.segments;
  j["fragmented_segments"] = l.totals.fragmented_segments;
  j["reserved_bytes"] = l.totals.reserved_bytes;
  j["allocated_bytes"] = l.totals.allocated_bytes;
  j["active_bytes"] = l.active_bytes;
  j["free_cached_bytes"] = l.totals.free_cached_bytes;
  j["holes"] = l.totals.holes;
  j["largest_hole_bytes"] = l.totals.largest_hole;
  j["rmm_fragmentation"] = Fraction(l.rmm_fragmentation);
  return j;
}

OrderedJson RoleBytesJson(const RoleBytes& roles) {
  OrderedJson j = OrderedJson::object();
  for (int role = 0; role < kAllocationRoleCount; ++role) {
    const uint64_t bytes = roles[static_cast<size_t>(role)];
    if (bytes > 0) j[std::string(AllocationRoleName(static_cast<AllocationRole>(role)))] = bytes;
  }
  return j;
}

OrderedJson ModuleBytesJson(const std::vector<DemandTerm>& modules) {
  OrderedJson j = OrderedJson::array();
  for (const DemandTerm& t : modules) j.push_back({{"module", t.name}, {"bytes", t.bytes}});
  return j;
}

namespace {

OrderedJson Oom(const OomExplanation& x) {
  OrderedJson j;
  j["event"] = x.event_index;
  j["time_ns"] = x.time_ns;
  j["phase"] = x.phase;
  j["in_trace"] = x.in_trace;
  j["in_replay"] = x.in_replay;
  j["cause"] = OomCauseName(x.cause);
  j["rule"] = PolicyRuleName(x.rule);
  j["headline"] = x.headline;
  j["evidence"] = x.evidence;
  j["requested_bytes"] = x.requested_bytes;
  j["rounded_bytes"] = x.rounded_bytes;
  j["segment_bytes"] = x.segment_bytes;
  j["stream"] = HexAddress(x.stream);
  j["device_total_bytes"] = x.device_total_bytes;
  j["device_free_bytes"] = x.device_free_bytes;
  j["allowed_bytes"] = JsonOrNull(x.allowed_bytes);
  j["limit_bytes"] = x.limit_bytes;
  j["outside_bytes"] = x.outside_bytes;
  j["available_bytes"] = x.available_bytes;
  j["reserved_bytes"] = x.reserved_bytes;
  j["allocated_bytes"] = x.allocated_bytes;
  j["pending_free_bytes"] = x.pending_free_bytes;
  j["reserved_but_unallocated_bytes"] = x.reserved_but_unallocated_bytes;
  j["free_cached_bytes"] = x.free_cached_bytes;
  j["holes"] = x.holes;
  j["headroom_bytes"] = x.headroom_bytes;
  j["at_cap"] = x.at_cap;
  j["largest_hole_bytes"] = x.largest_hole;
  j["fragmented_segments"] = x.fragmented_segment_count;
  j["oversize_rejected_bytes"] = x.oversize_rejected_bytes;
  j["other_stream_fitting_bytes"] = x.other_stream_fitting_bytes;
  j["pool_id"] = {x.pool_id.first, x.pool_id.second};
  j["private_pools"] = x.private_pool_count;
  j["graph_pools"] = x.graph_pool_count;
  j["private_pool_reserved_bytes"] = x.private_pool_reserved_bytes;
  j["private_pool_free_bytes"] = x.private_pool_free_bytes;
  OrderedJson fragmented = OrderedJson::array();
  for (const FragmentedSegment& s : x.fragmented) {
    fragmented.push_back({{"address", HexAddress(s.address)},
                          {"size_bytes", s.size},
                          {"free_bytes", s.free_bytes},
                          {"holes", s.holes},
                          {"largest_hole_bytes", s.largest_hole},
                          {"live_blocks", s.live_blocks}});
  }
  j["fragmented"] = std::move(fragmented);
  OrderedJson pinning = OrderedJson::array();
  for (const PinningBlock& p : x.pinning) {
    pinning.push_back({{"address", HexAddress(p.address)},
                       {"segment", HexAddress(p.segment)},
                       {"size_bytes", p.size},
                       {"requested_bytes", p.requested_bytes},
                       {"pending_free", p.pending_free},
                       {"before_trace", p.origin.before_trace},
                       {"alloc_event", p.origin.index},
                       {"alloc_time_ns", p.origin.time_ns},
                       {"phase", p.phase},
                       {"role", AllocationRoleName(p.origin.role)},
                       {"site", p.site},
                       {"module", p.context.module},
                       {"op", p.context.op},
                       {"backward", p.context.backward}});
  }
  j["pinning"] = std::move(pinning);
  j["held_by_role"] = RoleBytesJson(x.held_by_role);
  j["held_by_module"] = ModuleBytesJson(x.held_by_module);
  j["request_context"] = Known(x.request_context)
                             ? HolderJson(x.request_context.role, x.request_context)
                             : OrderedJson();
  j["avoided_by"] = x.avoided_by;
  j["model_gap"] = x.model_gap;
  return j;
}

OrderedJson Sweep(const RankReport& r, const JsonReportOptions& options) {
  OrderedJson j = OrderedJson::object();
  if (options.include_timings) j["seconds"] = Fraction(r.sweep_seconds);
  j["recommended"] = JsonOrNull(r.verdict.recommended);
  j["recommendation"] = r.verdict.recommendation;
  j["trace_ooms"] = r.sweep.empty() ? int64_t{0} : r.sweep.front().trace_ooms;
  OrderedJson configs = OrderedJson::array();
  for (const SweepResult& s : r.sweep) {
    OrderedJson c;
    c["label"] = s.config.label;
    c["is_trace_config"] = s.config.is_trace_config;
    c["changes_from_trace"] = s.config.changes_from_trace;
    c["expandable_segments"] = s.config.options.expandable_segments;
    c["placement"] = PlacementPolicyName(s.config.options.placement);
    c["pytorch_applicable"] = s.config.pytorch_applicable;
    c["peak_reserved_bytes"] = s.peak_reserved_bytes;
    c["peak_allocated_bytes"] = s.peak_allocated_bytes;
    c["peak_active_bytes"] = s.peak_active_bytes;
    c["peak_private_pool_reserved_bytes"] = s.peak_private_pool_reserved_bytes;
    c["utilization"] = Fraction(s.utilization);
    c["device_mallocs"] = s.device_mallocs;
    c["device_frees"] = s.device_frees;
    c["alloc_retries"] = s.alloc_retries;
    c["ooms"] = s.ooms;
    c["first_oom_event"] = JsonOrNull(s.first_oom_index);
    c["error"] = s.error;
    configs.push_back(std::move(c));
  }
  j["configs"] = std::move(configs);
  return j;
}

// The "trace" and "device" members, shared by the analysis and the sweep documents.
void AddTraceAndDevice(OrderedJson& j, const RankReport& r) {
  const TraceInfo& info = r.info;
  OrderedJson trace;
  trace["path"] = info.path;
  trace["format"] = TraceFormatName(info.format);
  trace["device"] = info.device;
  trace["rank"] = info.rank;
  trace["world_size"] = info.world_size;
  trace["pid"] = info.pid;
  trace["host"] = info.host;
  trace["device_name"] = info.device_name;
  trace["start_wall_ns"] = info.start_wall_ns;
  trace["allocator_options"] = info.allocator_options;
  trace["expandable_segments"] = info.expandable_segments;
  j["trace"] = std::move(trace);
  j["device"] = {{"capacity_bytes", r.capacity_bytes},
                 {"capacity_source", r.capacity_source},
                 {"allowed_bytes", JsonOrNull(r.allowed_bytes)}};
}

OrderedJson ModelGapJson(const RankReport& r) {
  if (!r.model_gap.has_value()) return nullptr;
  const ModelGap& g = *r.model_gap;
  // The estimator's terms are doubles; bytes are written whole, never in six digits.
  const auto bytes = [](double b) { return static_cast<uint64_t>(std::llround(std::max(0.0, b))); };
  OrderedJson j;
  j["where"] = r.model_gap_where;
  j["model"] = g.model;
  j["theoretical_bytes"] = bytes(g.theoretical_bytes);
  j["allocated_bytes"] = bytes(g.allocated_bytes);
  j["unattributed_bytes"] = bytes(g.unattributed_bytes);
  j["likely_term"] = g.likely_term;
  OrderedJson terms = OrderedJson::array();
  for (const TermGap& t : g.terms) {
    terms.push_back({{"category", t.category},
                     {"estimated_bytes", bytes(t.estimated_bytes)},
                     {"measured_bytes", bytes(t.measured_bytes)}});
  }
  j["terms"] = std::move(terms);
  j["lines"] = g.lines;
  return j;
}

OrderedJson Rank(const RankReport& r, const JsonReportOptions& options) {
  const MemoryMetrics& m = r.metrics;
  OrderedJson j;
  AddTraceAndDevice(j, r);
  OrderedJson replay;
  replay["options"] = r.options;
  replay["events"] = m.events;
  replay["allocations"] = m.allocations;
  replay["frees"] = m.frees;
  if (options.include_timings) replay["seconds"] = Fraction(r.replay_seconds);
  replay["warnings"] = r.warnings;
  j["replay"] = std::move(replay);
  j["settings_check"] = JsonSettingsCheck(r.settings_check);
  OrderedJson peaks;
  peaks["allocated_bytes"] = m.peak_allocated_bytes;
  peaks["active_bytes"] = m.peak_active_bytes;
  peaks["requested_bytes"] = m.peak_requested_bytes;
  peaks["reserved_bytes"] = m.peak_reserved_bytes;
  peaks["internal_waste_bytes"] = m.peak_internal_waste_bytes;
  peaks["refused_requests_left_out"] = m.refused_requests_left_out;
  peaks["refused_bytes_left_out"] = m.refused_bytes_left_out;
  j["peaks"] = std::move(peaks);
  OrderedJson at_peak;
  at_peak["event"] = m.at_peak.index;
  at_peak["time_ns"] = m.at_peak.time_ns;
  at_peak["reserved_bytes"] = m.at_peak.reserved_bytes;
  at_peak["allocated_bytes"] = m.at_peak.allocated_bytes;
  at_peak["active_bytes"] = m.at_peak.active_bytes;
  at_peak["requested_bytes"] = m.at_peak.requested_bytes;
  at_peak["free_cached_bytes"] = m.at_peak.free_cached_bytes;
  at_peak["largest_free_block_bytes"] = m.at_peak.largest_free_block;
  at_peak["internal_waste_bytes"] = m.at_peak.internal_waste_bytes;
  j["at_peak_reserved"] = std::move(at_peak);
  OrderedJson fragmentation;
  fragmentation["reserved_but_unallocated_bytes"] = m.reserved_but_unallocated_at_peak;
  fragmentation["rmm_fragmentation"] = Fraction(m.rmm_fragmentation_at_peak);
  fragmentation["utilization"] = Fraction(m.utilization);
  fragmentation["realized_fragmentation"] = Fraction(m.realized_fragmentation);
  fragmentation["internal_waste_fraction"] = Fraction(m.internal_waste_fraction_at_peak);
  j["fragmentation"] = std::move(fragmentation);
  OrderedJson final_stats = OrderedJson::object();
  for (const auto& [key, value] : FlattenStats(m.final_stats)) final_stats[key] = value;
  j["final_stats"] = std::move(final_stats);
  OrderedJson points = OrderedJson::array();
  for (const TimelinePoint& p : m.timeline) {
    points.push_back({p.index, p.time_ns, p.allocated_bytes, p.active_bytes, p.requested_bytes,
                      p.reserved_bytes});
  }
  j["timeline"] = {{"columns",
                    {"event", "time_ns", "allocated_bytes", "active_bytes", "requested_bytes",
                     "reserved_bytes"}},
                   {"points", std::move(points)}};
  OrderedJson explained = OrderedJson::array();
  for (const OomExplanation& x : r.ooms) explained.push_back(Oom(x));
  j["ooms"] = {{"count", r.oom_count}, {"explained", std::move(explained)}};
  j["at"] = r.at_layout.has_value() ? LayoutJson(*r.at_layout) : OrderedJson(nullptr);
  j["layout_at_end"] = LayoutJson(r.final_layout);
  j["verdict"] = JsonVerdict(r.verdict);
  j["sweep"] = Sweep(r, options);
  j["model_gap"] = ModelGapJson(r);
  OrderedJson phases = OrderedJson::array();
  for (const PhaseFigures& p : r.phases) {
    phases.push_back({{"phase", p.phase},
                      {"first_event", p.first_event},
                      {"allocations", p.allocations},
                      {"peak_allocated_bytes", p.peak_allocated_bytes},
                      {"peak_reserved_bytes", p.peak_reserved_bytes},
                      {"peak_demand_bytes", p.peak_demand_bytes},
                      {"roles_at_peak_demand", RoleBytesJson(p.roles_at_peak_demand)}});
  }
  j["phases"] = std::move(phases);
  j["prediction"] = r.prediction.has_value() ? ComparisonJson(*r.prediction) : OrderedJson(nullptr);
  return j;
}

}  // namespace

OrderedJson JsonReport(const AnalysisReport& report, const JsonReportOptions& options) {
  OrderedJson j;
  j["schema"] = "fragscope.analysis";
  j["schema_version"] = kReportSchemaVersion;
  j["worst_rank"] = report.worst.has_value() ? OrderedJson(report.ranks[*report.worst].info.rank)
                                             : OrderedJson(nullptr);
  j["worst_reason"] = report.worst_reason;
  j["per_device"] = report.per_device;
  j["worst_device"] = report.worst.has_value() && report.per_device
                          ? OrderedJson(report.ranks[*report.worst].info.device)
                          : OrderedJson(nullptr);
  OrderedJson ranks = OrderedJson::array();
  for (const RankReport& r : report.ranks) ranks.push_back(Rank(r, options));
  j["ranks"] = std::move(ranks);
  return j;
}

void WriteJsonReport(const AnalysisReport& report, const JsonReportOptions& options,
                     std::ostream& out) {
  out << estimator::DumpJson(JsonReport(report, options));
}

void WriteJsonSweepReport(const RankReport& rank, const JsonReportOptions& options,
                          std::ostream& out) {
  OrderedJson j;
  j["schema"] = "fragscope.sweep";
  j["schema_version"] = kSweepSchemaVersion;
  AddTraceAndDevice(j, rank);
  j["verdict"] = JsonVerdict(rank.verdict);
  j["sweep"] = Sweep(rank, options);
  out << estimator::DumpJson(j);
}

}  // namespace fragscope
