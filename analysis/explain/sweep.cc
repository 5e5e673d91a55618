#include "analysis/explain/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/alloc_conf_syntax.h"
#include "allocator/check.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/replay/replay.h"

namespace fragscope {
namespace {

// Counts the swept settings that differ between a and b.
int Changes(const AllocatorOptions& a, const AllocatorOptions& b) {
  return (a.max_split_size_bytes != b.max_split_size_bytes ? 1 : 0) +
         (a.roundup_power2_divisions != b.roundup_power2_divisions ? 1 : 0) +
         (a.garbage_collection_threshold != b.garbage_collection_threshold ? 1 : 0) +
         (a.expandable_segments != b.expandable_segments ? 1 : 0) +
         (a.placement != b.placement ? 1 : 0);
}

// Collects a sweep replay's OOMs.
class SweepHooks final : public ReplayHooks {
 public:
  // `cap`: the row's replay's (ReplayCapBytes).
  SweepHooks(SweepResult& result, const SweepReplaySettings& settings, std::optional<uint64_t> cap)
      : result_(result),
        trace_options_(settings.trace_options),
        capped_(cap.has_value()),
        raises_job_cap_(RaisesRecordedCap(cap, settings.recorded_job_cap)) {}
  // The baseline row also watches the trace's allocations (SweepResult::ends_at_trace_oom).
  uint32_t callbacks() const override {
    return kHookOom | (result_.config.is_trace_config ? kHookTraceEvent : 0u);
  }
  void OnTraceEvent(const TraceEvent& event) override {
    if (event.kind == EventKind::kAlloc) result_.ends_at_trace_oom = false;
  }
  void OnOom(const ReplayOom& oom) override {
    if (oom.in_trace) {
      ++result_.trace_ooms;
      if (result_.config.is_trace_config) result_.ends_at_trace_oom = true;
    }
    if (oom.in_trace && !oom.in_replay && !capped_ &&
        RefusedUnderUnrecordedCap(*oom.event, trace_options_)) {
      ++result_.unrecorded_cap_ooms;
    }
    if (oom.in_trace && !oom.in_replay && raises_job_cap_) ++result_.raised_cap_ooms;
    if (!oom.in_replay) return;
    ++result_.ooms;
    if (!result_.first_oom_index.has_value()) result_.first_oom_index = oom.event->index;
    if (result_.oom_indices.size() < SweepResult::kMaxOomIndices) {
      result_.oom_indices.push_back(oom.event->index);
    }
  }

 private:
  SweepResult& result_;
  const AllocatorOptions& trace_options_;
  const bool capped_;  // the replay has a cap (given, or in the settings): it stands for the job's
  const bool
      raises_job_cap_;  // more room than the job's recorded cap (SweepResult::raised_cap_ooms)
};

SweepResult RunOne(const TraceOpener& opener, const SweepConfig& config,
                   const SweepReplaySettings& settings) {
  SweepResult result;
  result.config = config;
  result.cap_from_flags = settings.cap_from_flags;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) {
    result.error = std::string(source.status().message());
    return result;
  }
  ReplayConfig replay;
  replay.options = config.options;
  replay.capacity_bytes = settings.capacity_bytes;
  replay.allowed_bytes = settings.allowed_bytes;
  // The baseline row under the trace's own settings replays as `analyze` does, with the trace's
  // addresses, so its figures are analyze's; other settings lay memory out their own way.
  replay.script_addresses = config.is_trace_config && !config.base_from_conf;
  replay.follow_options_changes = false;
  replay.empty_cache_at = settings.empty_cache_at;
  Replayer replayer(**source, replay);
  absl::Status status = replayer.Init();
  SweepHooks hooks(result, settings, ReplayCapBytes(replay));
  if (status.ok()) status = replayer.Run(&hooks);
  if (status.ok() && replayer.failed_allocations() > 0) {
    // Its figures would leave those allocations out, and the row could look best.
    status = absl::InternalError(
        absl::StrFormat("%d allocations failed other than by running out of memory; the first: %s",
                        replayer.failed_allocations(), replayer.first_failed_allocation()));
  }
  if (!status.ok()) {
    result.error = std::string(status.message());
    return result;
  }
  result.events = replayer.events_read();
  result.source_warnings = (*source)->warnings();
  const DeviceStats stats = replayer.allocator().GetStats();
  result.peak_reserved_bytes = static_cast<uint64_t>(stats.reserved_bytes[0].peak);
  result.peak_allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  result.peak_active_bytes = static_cast<uint64_t>(stats.active_bytes[0].peak);
  result.peak_private_pool_reserved_bytes = replayer.allocator().PeakPrivatePoolReservedBytes();
  result.utilization = result.peak_reserved_bytes == 0
                           ? 0.0
                           : static_cast<double>(result.peak_active_bytes) /
                                 static_cast<double>(result.peak_reserved_bytes);
  result.device_mallocs = stats.num_device_alloc;
  result.device_frees = stats.num_device_free;
  result.alloc_retries = stats.num_alloc_retries;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// The options as the allocator acts on them: a roundup division of 1 rounds as none does
// (PyTorch's round_size splits only for divisions > 1), and which keys were named, and how,
// changes nothing.
AllocatorOptions Behaviour(AllocatorOptions options) {
  for (uint32_t& divisions : options.roundup_power2_divisions) {
    if (divisions == 1) divisions = 0;
  }
  options.given.reset();
  options.source.clear();
  options.warnings.clear();
  return options;
}

// Orders rows that avoid the OOMs: lowest peak reserved, then fewer device mallocs.
bool Better(const SweepResult& a, const SweepResult& b) {
  if (a.peak_reserved_bytes != b.peak_reserved_bytes) {
    return a.peak_reserved_bytes < b.peak_reserved_bytes;
  }
  if (a.device_mallocs != b.device_mallocs) return a.device_mallocs < b.device_mallocs;
  return a.config.changes_from_trace < b.config.changes_from_trace;
}

}  // namespace

absl::StatusOr<std::vector<SweepConfig>> BuildSweepConfigs(const AllocatorOptions& base,
                                                           const SweepSpec& spec,
                                                           bool base_from_conf) {
  const std::string base_conf = FormatAllocatorOptions(base);  // the row's label
  std::vector<SweepConfig> configs;
  configs.push_back({.options = base,
                     .label = base_conf.empty() ? "(default)" : base_conf,
                     .is_trace_config = true,
                     .base_from_conf = base_from_conf,
                     .pytorch_applicable = base.placement == PlacementPolicy::kBestFit});
  std::vector<uint64_t> splits = spec.max_split_size_mb;
  std::vector<std::string> roundups = spec.roundup_power2_divisions;
  std::vector<double> gcs = spec.garbage_collection_thresholds;
  std::vector<std::string> expandables = spec.expandable_segments;
  std::vector<std::string> placements = spec.placements;
  if (splits.empty()) splits = {UINT64_MAX};
  // Each roundup and threshold is measured against leaving it as the base has it, so that a row
  // without it is there to beat.
  if (std::find(roundups.begin(), roundups.end(), "") == roundups.end()) {
    roundups.insert(roundups.begin(), "");
  }
  if (std::find(gcs.begin(), gcs.end(), 0.0) == gcs.end()) gcs.insert(gcs.begin(), 0.0);
  if (expandables.empty()) expandables = {""};
  if (placements.empty()) placements = {""};
  // The grid, outermost dimension first.
  struct Point {
    const std::string* placement;
    const std::string* expandable;
    uint64_t split;
    const std::string* roundup;
    double gc;
  };
  std::vector<Point> grid;
  for (const std::string& placement : placements) {
    for (const std::string& expandable : expandables) {
      for (uint64_t split : splits) {
        for (const std::string& roundup : roundups) {
          for (double gc : gcs) grid.push_back({&placement, &expandable, split, &roundup, gc});
        }
      }
    }
  }
  for (const Point& point : grid) {
    AllocatorOptions options = base;
    // The first edit that fails names the configuration built so far and the value.
    const auto set = [&](AllocatorKey key, std::string_view value) -> absl::Status {
      absl::Status s = SetAllocatorOption(options, key, value);
      if (s.ok()) return s;
      const std::string so_far = FormatAllocatorOptions(options);
      return absl::InvalidArgumentError(absl::StrFormat("sweep configuration '%s' with %s:%s: %s",
                                                        so_far.empty() ? "(default)" : so_far,
                                                        AllocatorKeyName(key), value, s.message()));
    };
    if (!point.placement->empty()) {
      FRAGSCOPE_RETURN_IF_ERROR(set(AllocatorKey::kPlacement, *point.placement));
    }
    if (!point.expandable->empty()) {
      FRAGSCOPE_RETURN_IF_ERROR(set(AllocatorKey::kExpandableSegments, *point.expandable));
    }
    if (point.split == 0) {
      FRAGSCOPE_RETURN_IF_ERROR(ResetAllocatorOption(options, AllocatorKey::kMaxSplitSizeMb));
    } else if (point.split != UINT64_MAX) {
      FRAGSCOPE_RETURN_IF_ERROR(set(AllocatorKey::kMaxSplitSizeMb, absl::StrCat(point.split)));
    }
    if (!point.roundup->empty()) {
      FRAGSCOPE_RETURN_IF_ERROR(set(AllocatorKey::kRoundupPower2Divisions, *point.roundup));
    }
    if (point.gc > 0) {
      FRAGSCOPE_RETURN_IF_ERROR(
          set(AllocatorKey::kGarbageCollectionThreshold, alloc_conf::FormatDouble(point.gc)));
      if (base.per_process_memory_fraction >= 1.0 && !spec.capped) {
        FRAGSCOPE_RETURN_IF_ERROR(set(AllocatorKey::kPerProcessMemoryFraction, "0.999"));
      }
    }
    const AllocatorOptions behaviour = Behaviour(options);
    const bool duplicate = std::any_of(configs.begin(), configs.end(), [&](const auto& c) {
      return Behaviour(c.options) == behaviour;
    });
    if (duplicate) continue;
    const std::string label = FormatAllocatorOptions(options);
    const bool pytorch_applicable = options.placement == PlacementPolicy::kBestFit;
    const int changes = Changes(base, options);
    configs.push_back({.options = std::move(options),
                       .label = label.empty() ? "(default)" : label,
                       .changes_from_trace = changes,
                       .pytorch_applicable = pytorch_applicable});
  }
  return configs;
}

std::vector<SweepResult> RunSweep(const TraceOpener& opener,
                                  const std::vector<SweepConfig>& configs,
                                  const SweepReplaySettings& settings, int threads,
                                  const std::function<void(size_t, size_t)>& progress) {
  std::vector<SweepResult> results(configs.size());
  size_t workers = threads > 0 ? static_cast<size_t>(threads)
                               : std::max<size_t>(1, std::thread::hardware_concurrency());
  workers = std::min(workers, configs.size());
  std::atomic<size_t> next{0};
  std::mutex progress_mu;
  size_t finished = 0;
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < configs.size(); i = next.fetch_add(1)) {
      results[i] = RunOne(opener, configs[i], settings);
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress(++finished, configs.size());
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return results;
}

std::optional<SweepRecommendation> RecommendConfig(const std::vector<SweepResult>& results,
                                                   bool trace_has_oom) {
  std::optional<size_t> best;
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepResult& r = results[i];
    if (!r.error.empty() || r.ooms > 0 || !r.config.pytorch_applicable) continue;
    if (!best.has_value() || Better(r, results[*best])) best = i;
  }
  if (!best.has_value()) return std::nullopt;
  const SweepResult& r = results[*best];
  const auto trace_row = std::find_if(results.begin(), results.end(), [](const SweepResult& x) {
    return x.config.is_trace_config && x.error.empty();
  });
  const SweepResult* base = trace_row != results.end() ? &*trace_row : nullptr;
  const std::string_view caveat =
      base != nullptr && base->ends_at_trace_oom ? kEndsAtOomCaveat : "";
  std::string reason;
  std::string_view headline = "lowest-peak setting (the job's OOM is not reproduced)";
  if (!trace_has_oom) {
    headline = "lowest-peak setting (no OOM to avoid)";
    reason = absl::StrFormat(
        "%s has no OOM; lowest peak reserved memory (%d device mallocs)",
        base != nullptr && base->config.base_from_conf ? "the --conf configuration" : "the trace",
        r.device_mallocs);
  } else if (base == nullptr || base->ooms > 0) {
    headline =
        caveat.empty() ? "recommended setting" : "recommended setting (as far as the trace goes)";
    reason = absl::StrFormat(
        "avoids every OOM with the lowest peak reserved memory among those that do (%d device "
        "mallocs)%s",
        r.device_mallocs, caveat);
  } else if (base->raised_cap_ooms > 0) {
    // --conf or a cap flag let the job use more memory than the cap it ran under.
    reason = absl::StrFormat(
        "the job's OOM is not reproduced: under %s the job has more memory than the "
        "per_process_memory_fraction it ran under, so no setting is shown to fix it; lowest peak "
        "reserved memory (%d device mallocs)",
        CapRaiser(base->cap_from_flags), r.device_mallocs);
  } else if (base->unrecorded_cap_ooms > 0) {
    // Any settings serve a request that only a missing cap refused.
    reason = absl::StrFormat(
        "the job's OOM is not reproduced: the job ran under a memory cap the trace does not "
        "record (give the job's own with --memory-fraction or --allowed), so no setting is shown "
        "to fix it; lowest peak reserved memory (%d device mallocs)",
        r.device_mallocs);
  } else if (base->config.base_from_conf) {
    headline = "lowest-peak setting (no OOM under --conf)";
    reason = absl::StrFormat(
        "the job's OOM does not happen under the --conf settings (the baseline row); lowest peak "
        "reserved memory (%d device mallocs)%s",
        r.device_mallocs, caveat);
  } else {
    // The job failed but its own settings replay without an OOM (e.g. a cap the trace does not
    // record): "avoids every OOM" would credit the setting with what the replay never showed.
    reason = absl::StrFormat(
        "the job's OOM does not happen when its own settings are replayed, so no setting is shown "
        "to fix it; lowest peak reserved memory (%d device mallocs)",
        r.device_mallocs);
  }
  return SweepRecommendation{*best, std::move(reason), headline};
}

std::string NoRecommendationReason(const std::vector<SweepResult>& results) {
  const bool fragscope_only_avoids = std::any_of(results.begin(), results.end(), [](auto& r) {
    return r.error.empty() && r.ooms == 0 && !r.config.pytorch_applicable;
  });
  return fragscope_only_avoids
             ? "no tested PyTorch configuration avoids the OOM; only fragscope-only placements "
               "do (add best_fit to --placement to test PyTorch's own)"
             : "no tested configuration avoids the OOM";
}

std::optional<size_t> SmallestFixFor(const std::vector<SweepResult>& results, uint64_t oom_index) {
  std::optional<size_t> best;
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepResult& r = results[i];
    if (!r.error.empty() || r.config.is_trace_config || !r.config.pytorch_applicable) continue;
    if (r.first_oom_index.has_value() && *r.first_oom_index <= oom_index) continue;
    if (!best.has_value()) {
      best = i;
      continue;
    }
    const SweepResult& b = results[*best];
    if (r.config.changes_from_trace != b.config.changes_from_trace) {
      if (r.config.changes_from_trace < b.config.changes_from_trace) best = i;
    } else if (Better(r, b)) {
      best = i;
    }
  }
  return best;
}

}  // namespace fragscope
