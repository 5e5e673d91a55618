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

constexpr uint64_t kUnknownCapacityBytes = uint64_t{1} << 40;  // 1 TiB

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

uint64_t ResolveCapacity(const TraceInfo& info, const AnalysisOptions& options,
                         std::string* source) {
  if (options.capacity_bytes.has_value()) {
    *source = options.capacity_flag;
    return *options.capacity_bytes;
  }
  if (info.capacity_bytes > 0) {
    *source = info.capacity_source.empty() ? "trace" : info.capacity_source;
    return info.capacity_bytes;
  }
  *source = "not recorded in the trace: assumed 1 TiB (pass --capacity for OOM counterfactuals)";
  return kUnknownCapacityBytes;
}

AllocatorOptions TraceOwnOptions(const TraceInfo& info) {
  AllocatorOptions options = info.settings.ok() ? *info.settings : AllocatorOptions();
  if (info.expandable_segments) options.expandable_segments = true;
  return options;
}

namespace {

// Whether --conf names per_process_memory_fraction (any value, 1.0 included).
bool ConfSetsFraction(const AnalysisOptions& options) {
  return options.conf.has_value() && options.conf->Given(AllocatorKey::kPerProcessMemoryFraction);
}

// Settings that name another backend than the native allocator are not replayed: its pools
// are the driver's (cudaMallocAsync), and the native allocator's figures under that name would
// be of an allocator the job did not use. `settings` came from --conf or the trace (`path`'s,
// named when they are its own), written as `text`.
absl::Status NativeBackendOnly(const AllocatorOptions& settings, const std::string& text,
                               bool from_conf, const std::string& path = "") {
  if (settings.backend == "native") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s '%s': backend:%s is not simulated (fragscope replays PyTorch's native caching "
      "allocator)%s",
      from_conf ? std::string("--conf") : absl::StrCat(path, ": the trace's allocator settings"),
      Excerpt(text), settings.backend,
      from_conf ? ""
                : "; give --conf with native settings (e.g. --conf '') to see what the native "
                  "allocator would do with these requests"));
}

// A cap set both in --conf and with --memory-fraction/--allowed: which one is meant?
absl::Status OneCap(const AnalysisOptions& options) {
  if (CapFromFlags(options) && ConfSetsFraction(options)) {
    return absl::InvalidArgumentError(
        "--conf sets per_process_memory_fraction and --memory-fraction/--allowed give a cap too: "
        "give the cap once");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckConfOption(const AnalysisOptions& options) {
  if (!options.conf.has_value()) return absl::OkStatus();
  // As --memory-fraction: a cap of 0 bytes can serve nothing.
  if (options.conf->per_process_memory_fraction <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--conf '%s': per_process_memory_fraction:0 caps the device at 0 bytes; expected a "
        "fraction in (0, 1]",
        options.conf->source));
  }
  if (absl::Status s = NativeBackendOnly(*options.conf, options.conf->source, true); !s.ok()) {
    return s;
  }
  return OneCap(options);
}

std::optional<uint64_t> RecordedJobCapReplaced(const TraceInfo& info,
                                               const AnalysisOptions& options,
                                               uint64_t capacity_bytes) {
  if (!options.conf.has_value() && !CapFromFlags(options)) return std::nullopt;
  const double recorded = TraceOwnOptions(info).per_process_memory_fraction;
  if (recorded >= 1.0) return std::nullopt;
  return AllowedBytesForFraction(recorded, capacity_bytes);
}

std::shared_ptr<const std::vector<uint64_t>> TraceEmptyCacheCalls(const TraceOpener& opener,
                                                                  const TraceInfo& info,
                                                                  const AnalysisOptions& options) {
  if (info.records_empty_cache) return nullptr;
  AnalysisOptions own_options = options;
  own_options.conf.reset();
  absl::StatusOr<ReplayConfig> own = MakeReplayConfig(info, own_options);
  if (!own.ok()) return nullptr;
  // A cap --conf sets is the cap the user says the job had (the settings it replaces are not).
  if (ConfSetsFraction(options) && !own->allowed_bytes.has_value()) {
    own->options.per_process_memory_fraction = options.conf->per_process_memory_fraction;
  }
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) return nullptr;
  Replayer replayer(**source, *own);
  if (!replayer.Init().ok() || !replayer.Run(nullptr).ok()) return nullptr;
  return std::make_shared<const std::vector<uint64_t>>(replayer.inferred_empty_cache_at());
}

absl::StatusOr<ReplayConfig> MakeReplayConfig(const TraceInfo& info,
                                              const AnalysisOptions& options) {
  ReplayConfig config;
  std::string source;
  config.capacity_bytes = ResolveCapacity(info, options, &source);
  if (!options.conf.has_value() && !info.settings.ok()) {
    // The trace's settings are the file's: name it, and quote an excerpt (a damaged header's
    // text can be long and binary).
    return absl::InvalidArgumentError(absl::StrFormat("%s: the trace's allocator settings '%s': %s",
                                                      info.path, Excerpt(info.allocator_options),
                                                      Excerpt(info.settings.status().message())));
  }
  const AllocatorOptions& settings = options.conf.has_value() ? *options.conf : *info.settings;
  const std::string& text =
      options.conf.has_value() ? options.conf->source : info.allocator_options;
  if (absl::Status s = NativeBackendOnly(settings, text, options.conf.has_value(), info.path);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = OneCap(options); !s.ok()) return s;
  config.options = settings;
  if (options.conf.has_value()) {
    // The job's cap is not among the settings --conf replaces (PyTorch sets it apart, with
    // set_per_process_memory_fraction): a fraction the trace records stays, unless --conf sets
    // its own.
    const double recorded = TraceOwnOptions(info).per_process_memory_fraction;
    if (recorded < 1.0 && !ConfSetsFraction(options)) {
      config.options.per_process_memory_fraction = recorded;
    }
  }
  config.follow_options_changes = !options.conf.has_value();
  // Other settings make other segments: the trace's addresses would collide with them.
  config.script_addresses = !options.conf.has_value();
  if (options.allowed_bytes.has_value() || options.memory_fraction.has_value()) {
    // The cap given replaces a fraction in the settings: the configurations tested (and
    // recommended) must not name another cap than the one replayed.
    config.options.per_process_memory_fraction = 1.0;
  }
  if (options.allowed_bytes.has_value()) {
    if (*options.allowed_bytes > config.capacity_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--allowed %s is more than the %s device (%s): it would cap nothing",
          FormatSize(*options.allowed_bytes), FormatSize(config.capacity_bytes), source));
    }
    config.allowed_bytes = options.allowed_bytes;
  } else if (options.memory_fraction.has_value()) {
    // PyTorch's cap for the fraction (Note [The memory fraction's bytes]).
    config.allowed_bytes = AllowedBytesForFraction(*options.memory_fraction, config.capacity_bytes);
    if (*config.allowed_bytes < kSmallBufferBytes) {  // as --allowed (cli_flags.cc)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--memory-fraction %g caps the %s device at %s, below the smallest segment (2 MiB)",
          *options.memory_fraction, FormatSize(config.capacity_bytes),
          FormatSize(*config.allowed_bytes)));
    }
  }
  return config;
}

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

absl::StatusOr<AnalysisReport> AnalyzeTraces(const std::vector<std::string>& paths,
                                             const AnalysisOptions& options) {
  if (paths.empty()) return absl::InvalidArgumentError("no trace given");
  std::vector<TraceOpener> openers;
  std::map<int32_t, std::string> rank_paths;
  std::optional<int32_t> world_size;
  std::string world_size_path;
  AnalysisReport report;
  for (const std::string& path : paths) {
    absl::StatusOr<TraceOpener> opener =
        TraceOpener::Create(path, {.device = options.device, .every_device = paths.size() == 1});
    if (!opener.ok()) return opener.status();
    if (const std::vector<int> devices = opener->Devices();
        paths.size() == 1 && options.device < 0 && devices.size() > 1) {
      // One snapshot, several devices' traces: each device is a report of its own.
      report.per_device = true;
      for (const int device : devices) {
        absl::StatusOr<TraceOpener> one = opener->ForDevice(device);
        if (!one.ok()) return one.status();
        openers.push_back(*std::move(one));
      }
      continue;
    }
    if (paths.size() > 1) {
      absl::StatusOr<std::unique_ptr<TraceSource>> probe = opener->Open();
      if (!probe.ok()) return probe.status();
      const TraceInfo& info = (*probe)->info();
      if (info.format != TraceFormat::kFslog) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: several traces are analyzed as the ranks of one job, which needs .fslog logs "
            "(they record the rank); analyze %s traces one at a time",
            path, TraceFormatName(info.format)));
      }
      auto [it, inserted] = rank_paths.emplace(info.rank, path);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "not the ranks of one job: %s and %s both claim rank %d; give one log per rank",
            it->second, path, info.rank));
      }
      if (world_size.has_value() && *world_size != info.world_size) {
        return absl::InvalidArgumentError(
            absl::StrFormat("not the ranks of one job: %s has world size %d but %s has %d",
                            world_size_path, *world_size, path, info.world_size));
      }
      world_size = info.world_size;
      world_size_path = path;
    }
    openers.push_back(std::move(*opener));
  }
  for (const TraceOpener& opener : openers) {
    absl::StatusOr<RankReport> rank = AnalyzeTrace(opener, options);
    if (!rank.ok()) return rank.status();
    report.ranks.push_back(std::move(*rank));
  }
  if (report.ranks.size() > 1) {
    // Worst: the first to run out of memory (wall clock); else the highest peak reserved. Ties
    // go to the lowest rank, whatever the order of the paths, and are said.
    const auto first_oom_time = [&](const RankReport& r) {
      return r.info.start_wall_ns + static_cast<int64_t>(r.ooms.front().time_ns);
    };
    std::vector<size_t> tied;  // the ranks (indices) that share the worst key
    const auto consider = [&](size_t i, auto key_of) {
      if (tied.empty() || key_of(report.ranks[i]) < key_of(report.ranks[tied.front()])) {
        tied = {i};
      } else if (key_of(report.ranks[i]) == key_of(report.ranks[tied.front()])) {
        tied.push_back(i);
      }
    };
    for (size_t i = 0; i < report.ranks.size(); ++i) {
      if (!report.ranks[i].ooms.empty()) consider(i, first_oom_time);
    }
    const bool oom = !tied.empty();
    if (!oom) {
      for (size_t i = 0; i < report.ranks.size(); ++i) {
        consider(i, [](const RankReport& r) {
          return ~uint64_t{0} - r.metrics.peak_reserved_bytes;  // most reserved first
        });
      }
    }
    // A snapshot's devices are told apart by device, ranks by rank.
    const auto id = [&](const RankReport& r) {
      return report.per_device ? r.info.device : r.info.rank;
    };
    const char* unit = report.per_device ? "device" : "rank";
    std::sort(tied.begin(), tied.end(),
              [&](size_t a, size_t b) { return id(report.ranks[a]) < id(report.ranks[b]); });
    const RankReport& worst = report.ranks[tied.front()];
    report.worst = tied.front();
    if (tied.size() == 1) {
      report.worst_reason =
          oom ? absl::StrFormat("%s %d ran out of memory first (event %d)", unit, id(worst),
                                worst.ooms.front().event_index)
              : absl::StrFormat("no %s ran out of memory; %s %d reserved the most (%s peak)", unit,
                                unit, id(worst), FormatSize(worst.metrics.peak_reserved_bytes));
    } else {
      std::vector<std::string> ids;
      for (size_t i : tied) ids.push_back(absl::StrCat(id(report.ranks[i])));
      const std::string who = absl::StrJoin(ids, ", ");
      report.worst_reason =
          oom ? absl::StrFormat(
                    "%ss %s ran out of memory at the same moment (event %d; %s %d "
                    "shown)",
                    unit, who, worst.ooms.front().event_index, unit, id(worst))
              : absl::StrFormat(
                    "no %s ran out of memory; %ss %s reserved the most (%s peak; "
                    "%s %d shown)",
                    unit, unit, who, FormatSize(worst.metrics.peak_reserved_bytes), unit,
                    id(worst));
    }
  }
  return report;
}

}  // namespace fragscope
