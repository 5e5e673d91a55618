#include "analysis/analyzer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/format_size.h"
#include "allocator/memory_fraction.h"
#include "allocator/memory_summary.h"
#include "analysis/explain/job_verdict.h"
#include "analysis/explain/model_gap.h"
#include "analysis/explain/model_job.h"
#include "analysis/explain/oom_collector.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/metrics/demand.h"
#include "analysis/metrics/metrics.h"
#include "analysis/replay/hook_list.h"
#include "analysis/sources/excerpt.h"

namespace fragscope {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Captures the layout after the last event whose index is <= at (--at EVENT).
class AtCapture final : public ReplayHooks {
 public:
  AtCapture(Replayer& replayer, uint64_t at) : replayer_(replayer), at_(at) {}
  uint32_t callbacks() const override { return kHookTraceEvent | kHookFinish; }
  void OnTraceEvent(const TraceEvent& event) override {
    if (!layout_.has_value() && event.index > at_) Capture();
    prev_index_ = event.index;
    prev_time_ns_ = event.time_ns;
  }
  void OnFinish() override {
    if (!layout_.has_value()) Capture();
  }
  std::optional<LayoutSummary>& layout() { return layout_; }

 private:
  void Capture() {
    layout_ = CurrentLayout(replayer_);
    layout_->index = prev_index_;
    layout_->time_ns = prev_time_ns_;
  }
  Replayer& replayer_;
  uint64_t at_;
  uint64_t prev_index_ = 0;
  uint64_t prev_time_ns_ = 0;
  std::optional<LayoutSummary> layout_;
};

// Reports the replay's progress every 64 Ki operations.
class ProgressHook final : public ReplayHooks {
 public:
  ProgressHook(const TraceSource& source, const AnalysisOptions& options)
      : source_(source), options_(options) {}
  uint32_t callbacks() const override { return kHookOpDone; }
  // REQUIRES: options.progress is set.
  void OnOpDone(const TraceEvent&) override {
    if ((++ops_ & 0xFFFF) == 0) options_.progress("replay", source_.Progress());
  }

 private:
  const TraceSource& source_;
  const AnalysisOptions& options_;
  uint64_t ops_ = 0;
};

std::string DescribeFix(const SweepResult& r) {
  return absl::StrFormat("%s avoids it (peak reserved %s, %d device mallocs)", r.config.label,
                         FormatSize(r.peak_reserved_bytes), r.device_mallocs);
}

// The model of the job: --model, else --model-json (with the log's recorded job), else the log's
// model record. A record that does not parse is a warning, not an error: the log is still the
// job's.
absl::StatusOr<std::optional<ModelJob>> ResolveModelJob(const AnalysisOptions& options,
                                                        const std::string& record,
                                                        std::vector<std::string>* warnings) {
  std::optional<ModelJob> recorded;
  if (!record.empty()) {
    absl::StatusOr<ModelJob> r = ModelJobFromRecord(record);
    if (r.ok()) {
      recorded = *std::move(r);
    } else {
      warnings->push_back(absl::StrCat(r.status().message(), " (the model record is not used)"));
    }
  }
  if (options.model.has_value()) return ParseModelSpec(*options.model);
  if (options.model_json.has_value()) return ModelJobFromConfigFile(*options.model_json, recorded);
  return recorded;
}

// The distance to the footprint at the first OOM with a layout, else at --at EVENT.
void AttachModelGap(const estimator::MemoryEstimate& estimate, RankReport& report) {
  const LayoutSummary* where = nullptr;
  for (const OomExplanation& x : report.ooms) {
    if (x.layout.has_value()) {
      where = &*x.layout;
      report.model_gap_where = absl::StrFormat("at the first OOM, event %d", x.event_index);
      break;
    }
  }
  if (where == nullptr && report.at_layout.has_value()) {
    where = &*report.at_layout;
    report.model_gap_where = absl::StrFormat("at event %d, --at", report.at_layout->index);
  }
  if (where == nullptr) {
    report.model_gap_where =
        "no OOM and no --at EVENT: no layout to attribute (pass --at to pick a moment)";
    return;
  }
  report.model_gap = CompareWithModel(estimate, *where);
  for (OomExplanation& x : report.ooms) {
    if (x.layout.has_value()) x.model_gap = CompareWithModel(estimate, *x.layout).lines;
  }
}

// Whether the trace shows the whole job: no OOM of the job, or the job went on after its last.
bool WholeJob(const RankReport& report) {
  bool job_oom = false;
  for (const OomExplanation& x : report.ooms) job_oom |= x.in_trace;
  if (!job_oom) return true;
  for (const SweepResult& r : report.sweep) {
    if (r.config.is_trace_config) return !r.ends_at_trace_oom;
  }
  return false;
}

// The estimator's allocator-visible terms, largest first (the demand's parts where the log has
// no allocation roles).
std::vector<DemandTerm> EstimatorTerms(const estimator::MemoryEstimate& estimate) {
  std::vector<DemandTerm> terms;
  for (const estimator::Term& t : estimate.terms) {
    if (t.placement != estimator::Placement::kDevice || !t.at_peak || t.value <= 0 ||
        t.key == "cuda_context") {  // the CUDA context is outside the allocator
      continue;
    }
    terms.push_back({.name = t.label, .bytes = static_cast<uint64_t>(t.value)});
  }
  return LargestFirst(std::move(terms));
}

}  // namespace

void WithholdRecommendation(RankReport& report) {
  JobVerdict& v = report.verdict;
  v.recommended.reset();
  v.recommendation = absl::StrCat(
      "no setting is shown to save the job (",
      v.basis == VerdictBasis::kFootprint ? "its model does not fit its cap"
      : v.basis == VerdictBasis::kDemand  ? "its requests need more than it may use"
                                          : "it is at its cap",
      ": see the verdict); the rows show which settings get past the OOM in the replay");
  v.recommendation_headline = kCapacityBoundHeadline;
  for (OomExplanation& x : report.ooms) {
    if (x.in_replay && x.fix_row.has_value()) {
      x.avoided_by =
          absl::StrCat("none shown to save the job (the verdict below says why); ",
                       report.sweep[*x.fix_row].config.label, " gets past this allocation only");
    }
  }
}

absl::StatusOr<RankReport> AnalyzeTrace(const TraceOpener& opener, const AnalysisOptions& options) {
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) return source.status();
  RankReport report;
  report.info = (*source)->info();
  report.info.initial_segments.clear();
  absl::StatusOr<ReplayConfig> config = MakeReplayConfig((*source)->info(), options);
  if (!config.ok()) return config.status();
  if (options.conf.has_value()) {
    config->empty_cache_at = TraceEmptyCacheCalls(opener, (*source)->info(), options);
  }
  report.capacity_bytes = ResolveCapacity((*source)->info(), options, &report.capacity_source);
  report.allowed_bytes = ReplayCapBytes(*config);
  if (options.conf.has_value()) {
    report.settings_check =
        CheckSettings({.from = "--conf", .text = options.conf->source, .options = *options.conf},
                      (*source)->info().recorded_settings);
  } else if (options.env_settings.has_value()) {
    report.settings_check =
        CheckSettings(*options.env_settings, (*source)->info().recorded_settings);
  }
  report.options = FormatAllocatorOptions(config->options);

  const auto replay_start = std::chrono::steady_clock::now();
  Replayer replayer(**source, *config);
  if (absl::Status s = replayer.Init(); !s.ok()) return s;
  MetricsCollector metrics(replayer, options.timeline_points);
  const OomReplayContext oom_context{.capacity_bytes = config->capacity_bytes,
                                     .capacity_assumed = !options.capacity_bytes.has_value() &&
                                                         (*source)->info().capacity_bytes == 0,
                                     .allowed_bytes = report.allowed_bytes,
                                     .settings_replaced = options.conf.has_value(),
                                     .trace_options = TraceOwnOptions((*source)->info()),
                                     .recorded_job_cap = RecordedJobCapReplaced(
                                         (*source)->info(), options, config->capacity_bytes),
                                     .cap_from_flags = CapFromFlags(options)};
  OomCollector ooms(replayer, oom_context);
  metrics.set_served_counts(
      [&oom_context](const ReplayOom& oom) { return ServedByReplacedSettings(oom, oom_context); });
  ProgressHook progress(**source, options);
  DemandCollector demand((*source)->info());
  ooms.set_demand(&demand);
  HookList hooks;
  hooks.Add(&metrics);
  hooks.Add(&ooms);
  hooks.Add(&demand);
  PhaseFiguresCollector phases(metrics, demand);
  hooks.Add(&phases);
  if (options.progress) hooks.Add(&progress);
  std::optional<AtCapture> at;
  if (options.at_index.has_value()) {
    at.emplace(replayer, *options.at_index);
    hooks.Add(&*at);
  }
  if (absl::Status s = replayer.Run(&hooks); !s.ok()) return s;
  report.replay_seconds = Seconds(replay_start);
  if (options.progress) options.progress("replay", 1.0);

  report.metrics = metrics.metrics();
  report.phases = phases.Take();
  report.model_record = replayer.recorded_model();
  report.memory_summary = MemorySummary(report.metrics.final_stats, (*source)->info().device);
  report.ooms = std::move(ooms.explanations());
  report.oom_count = ooms.total();
  report.final_layout = CurrentLayout(replayer);
  report.final_layout.maps.clear();
  if (at.has_value()) {
    report.at_index = options.at_index;
    report.at_layout = std::move(at->layout());
  }
  report.warnings = replayer.warnings();
  for (const std::string& w : (*source)->warnings()) report.warnings.push_back(w);
  if (report.metrics.events == 0) {
    report.warnings.push_back(kEmptyTraceWarning);
  }

  bool trace_has_oom = false;
  for (const OomExplanation& x : report.ooms) trace_has_oom |= x.in_trace || x.in_replay;
  if (options.run_sweep && report.metrics.events > 0) {
    const auto sweep_start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<SweepConfig>> configs =
        BuildSweepConfigs(config->options, options.sweep, options.conf.has_value());
    if (!configs.ok()) return configs.status();
    report.sweep = RunSweep(
        opener, *configs,
        {config->capacity_bytes, config->allowed_bytes, TraceOwnOptions((*source)->info()),
         options.conf.has_value() || (*source)->info().records_empty_cache
             ? config->empty_cache_at
             : std::make_shared<const std::vector<uint64_t>>(replayer.inferred_empty_cache_at()),
         oom_context.recorded_job_cap, oom_context.cap_from_flags},
        options.threads, [&](size_t done, size_t total) {
          if (options.progress) {
            options.progress("sweep", static_cast<double>(done) / static_cast<double>(total));
          }
        });
    report.sweep_seconds = Seconds(sweep_start);
    for (OomExplanation& x : report.ooms) {
      if (!x.in_replay) {
        x.avoided_by =
            x.cap_raised
                ? absl::StrCat("none shown: under ", CapRaiser(oom_context.cap_from_flags),
                               " the job has more memory than its own cap, and with that room "
                               "any settings serve this request")
            : x.unrecorded_cap
                ? "none shown: the job ran under a memory cap the trace does not record, and "
                  "without it every setting serves this request"
            : options.conf.has_value()
                ? "the --conf settings: the replay under them does not fail here"
                : "none shown: the replay of the job's own settings does not fail here, so the "
                  "sweep cannot tell which setting would avoid it";
        continue;
      }
      std::optional<size_t> fix = SmallestFixFor(report.sweep, x.event_index);
      x.fix_row = fix;
      x.avoided_by =
          fix.has_value() ? DescribeFix(report.sweep[*fix]) : "no tested setting avoids it";
    }
  }

  absl::StatusOr<std::optional<ModelJob>> model =
      ResolveModelJob(options, replayer.recorded_model(), &report.warnings);
  if (!model.ok()) return model.status();
  std::optional<FootprintCheck> footprint;
  std::optional<estimator::MemoryEstimate> kept_estimate;
  if (model->has_value()) {
    // An assumed capacity (none recorded or given) is no limit to compare a footprint with.
    const bool limit_known = report.allowed_bytes.has_value() || !oom_context.capacity_assumed;
    const uint64_t available = report.allowed_bytes.value_or(report.capacity_bytes);
    absl::StatusOr<estimator::MemoryEstimate> estimate = EstimateModelJob(**model);
    absl::StatusOr<FootprintCheck> check =
        estimate.ok()
            ? CheckFootprint(**model, *estimate, limit_known ? static_cast<double>(available) : 0)
            : absl::StatusOr<FootprintCheck>(estimate.status());
    if (check.ok()) {
      footprint = *std::move(check);
      AttachModelGap(*estimate, report);
      kept_estimate = *estimate;
    } else if ((*model)->recorded) {
      // The log is still the job's: a record the estimator cannot take costs only the verdict.
      report.warnings.push_back(absl::StrCat("the log's model record: ", check.status().message(),
                                             " (no footprint verdict)"));
    } else {
      return check.status();
    }
  }
  std::optional<DemandCheck> demand_check;
  if (report.allowed_bytes.has_value() || !oom_context.capacity_assumed) {
    const DemandSummary& d = demand.summary();
    const uint64_t device_room =
        report.capacity_bytes > d.outside_bytes ? report.capacity_bytes - d.outside_bytes : 0;
    demand_check =
        CheckDemand(d, std::min(report.allowed_bytes.value_or(report.capacity_bytes), device_room),
                    WholeJob(report));
  }
  if (demand_check.has_value() && demand.summary().has_roles) {
    demand_check->terms = RoleTerms(demand.summary().peak.roles);
    demand_check->terms_source = "the log's allocation roles";
  } else if (demand_check.has_value() && kept_estimate.has_value()) {
    demand_check->terms = EstimatorTerms(*kept_estimate);
    demand_check->terms_source = "the estimator's terms at its own peak";
  }
  report.verdict =
      DecideVerdict(report.ooms, report.sweep, std::move(footprint), std::move(demand_check));
  if (options.run_sweep && report.metrics.events > 0) {
    AttachRecommendation(report.sweep, trace_has_oom, report.verdict);
  }
  if (report.verdict.capacity_bound) WithholdRecommendation(report);
  return report;
}

}  // namespace fragscope
