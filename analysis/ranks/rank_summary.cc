#include "analysis/ranks/rank_summary.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <tuple>

#include "absl/strings/str_format.h"
#include "analysis/explain/oom_collector.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/metrics/metrics.h"
#include "analysis/ranks/rank_inputs.h"
#include "analysis/replay/hook_list.h"
#include "analysis/replay/replay.h"

namespace fragscope {

std::string_view RankSourceName(RankSource source) {
  switch (source) {
    case RankSource::kLogHeader:
      return "log header";
    case RankSource::kFileName:
      return "file name";
    case RankSource::kOrderGiven:
      return "order given";
    case RankSource::kFlag:
      return "--rank";
  }
  return "unknown";
}

std::optional<RankSource> RankSourceFromName(std::string_view name) {
  for (RankSource s : {RankSource::kLogHeader, RankSource::kFileName, RankSource::kOrderGiven,
                       RankSource::kFlag}) {
    if (RankSourceName(s) == name) return s;
  }
  return std::nullopt;
}

namespace {

// The device memory outside the allocator: at the job's first OOM (that moment is the one that
// matters), else when the log opened. Only where the device's capacity is known, not inferred
// (an .fslog header or --capacity): a snapshot's capacity is inferred from its OOM's own free
// and reserved figures, which leaves nothing outside by construction.
void FillOutside(const TraceInfo& info, bool capacity_known,
                 const std::vector<OomExplanation>& ooms, RankSummary* summary) {
  if (!capacity_known) return;
  for (const OomExplanation& x : ooms) {
    if (x.in_trace && x.device_total_bytes > 0) {
      summary->outside_pytorch_bytes = x.outside_bytes;
      summary->outside_source = absl::StrFormat("OOM at event %d", x.event_index);
      return;
    }
  }
  if (info.device_free_at_open_bytes.has_value() && info.capacity_bytes > 0) {
    const uint64_t held = *info.device_free_at_open_bytes + info.reserved_at_open_bytes;
    summary->outside_pytorch_bytes = info.capacity_bytes - std::min(info.capacity_bytes, held);
    summary->outside_source = "log open";
  }
}

}  // namespace

absl::StatusOr<RankSummary> SummarizeTrace(const TraceOpener& opener,
                                           const AnalysisOptions& options, const RankHint& hint) {
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) return source.status();
  const TraceInfo& info = (*source)->info();
  absl::StatusOr<ReplayConfig> config = MakeReplayConfig(info, options);
  if (!config.ok()) return config.status();
  if (options.conf.has_value()) {
    config->empty_cache_at = TraceEmptyCacheCalls(opener, info, options);
  }

  RankSummary summary;
  summary.path = info.path.empty() ? opener.path() : info.path;
  summary.format = std::string(TraceFormatName(info.format));
  std::tie(summary.rank, summary.rank_source) =
      AssignRank(opener.path(), info.format, info.rank, hint);
  summary.local_rank = info.local_rank;
  summary.world_size = info.world_size;
  summary.pp_size = info.pp_size;
  summary.tp_size = info.tp_size;
  summary.host = info.host;
  summary.device = info.device;
  summary.device_name = info.device_name;
  summary.pid = info.pid;
  summary.start_wall_ns = info.start_wall_ns;
  summary.capacity_bytes = ResolveCapacity(info, options, &summary.capacity_source);

  const auto start = std::chrono::steady_clock::now();
  Replayer replayer(**source, *config);
  if (absl::Status s = replayer.Init(); !s.ok()) return s;
  MetricsCollector metrics(replayer, /*timeline_points=*/2);
  const OomReplayContext oom_context{
      .capacity_bytes = config->capacity_bytes,
      .capacity_assumed = !options.capacity_bytes.has_value() && info.capacity_bytes == 0,
      .allowed_bytes = ReplayCapBytes(*config),
      .settings_replaced = options.conf.has_value(),
      .trace_options = TraceOwnOptions(info),
      .recorded_job_cap = RecordedJobCapReplaced(info, options, config->capacity_bytes),
      .cap_from_flags = CapFromFlags(options)};
  OomCollector ooms(replayer, oom_context);
  metrics.set_served_counts(
      [&oom_context](const ReplayOom& oom) { return ServedByReplacedSettings(oom, oom_context); });
  PhasePeakCollector phases(replayer, metrics);
  HookList hooks;
  hooks.Add(&metrics);
  hooks.Add(&ooms);
  hooks.Add(&phases);
  if (absl::Status s = replayer.Run(&hooks); !s.ok()) return s;
  summary.replay_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const MemoryMetrics& m = metrics.metrics();
  summary.events = m.events;
  summary.allocations = m.allocations;
  summary.frees = m.frees;
  summary.peak_allocated_bytes = m.peak_allocated_bytes;
  summary.peak_active_bytes = m.peak_active_bytes;
  summary.peak_reserved_bytes = m.peak_reserved_bytes;
  summary.utilization = m.utilization;
  summary.phases = phases.phases();

  const std::vector<OomExplanation>& explained = ooms.explanations();
  summary.oom_count = ooms.total();
  for (const OomExplanation& x : explained) {
    const std::string cause(OomCauseName(x.cause));
    auto it = std::find_if(summary.oom_causes.begin(), summary.oom_causes.end(),
                           [&](const auto& c) { return c.first == cause; });
    if (it == summary.oom_causes.end()) {
      summary.oom_causes.emplace_back(cause, 1);
    } else {
      ++it->second;
    }
  }
  if (!explained.empty()) {
    const OomExplanation& x = explained.front();
    OomBrief brief;
    brief.event_index = x.event_index;
    brief.time_ns = x.time_ns;
    brief.wall_ns =
        info.start_wall_ns != 0 ? info.start_wall_ns + static_cast<int64_t>(x.time_ns) : 0;
    brief.in_trace = x.in_trace;
    brief.cause = std::string(OomCauseName(x.cause));
    brief.rule = std::string(PolicyRuleName(x.rule));
    brief.phase = x.phase;
    brief.requested_bytes = x.requested_bytes;
    brief.headline = x.headline;
    brief.evidence = x.evidence;
    summary.first_oom = std::move(brief);
  }
  FillOutside(info, info.format == TraceFormat::kFslog || options.capacity_bytes.has_value(),
              explained, &summary);

  std::vector<std::string> warnings = replayer.warnings();
  for (const std::string& w : (*source)->warnings()) warnings.push_back(w);
  if (m.events == 0) warnings.push_back(kEmptyTraceWarning);
  summary.warning_count = warnings.size();
  if (warnings.size() > RankSummary::kMaxWarnings) warnings.resize(RankSummary::kMaxWarnings);
  summary.warnings = std::move(warnings);
  return summary;
}

}  // namespace fragscope
