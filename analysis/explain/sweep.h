// Sweep: replays one trace under many allocator configurations on the simulated device, one
// allocator per configuration and one configuration per thread at a time, and ranks them.
//
// The grid is the product of the lists given (placement, expandable_segments,
// max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold) on top of the
// trace's own settings; max_split_size_mb 0 means unlimited, PyTorch's default. By default the
// grid also tries expandable_segments:True. placement:first_fit is a fragscope policy PyTorch
// does not have: such rows are shown for comparison and never recommended.
// garbage_collection_threshold only acts under a memory fraction (PyTorch's rule); when the trace
// has none, such configurations add per_process_memory_fraction:0.999 and their label says so.
//
// Each replay runs with the trace's requests but not its addresses (segments land where the
// simulated device puts them: highest first, as the CUDA driver does) and ignores the trace's own
// options changes. A configuration "avoids the OOMs" when its replay never fails; the recommended
// one avoids them with the lowest peak reserved memory, ties going to fewer device mallocs (each
// is a cudaMalloc, and frees synchronize). Without OOMs in the trace, the recommendation is simply
// the lowest peak reserved.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/allocator_options.h"
#include "analysis/sources/open_trace.h"

namespace fragscope {

struct SweepSpec {
  std::vector<uint64_t> max_split_size_mb = {0, 64, 128, 256, 512, 1024};  // 0 = unlimited
  // roundup_power2_divisions values in PYTORCH_CUDA_ALLOC_CONF syntax ("4", "[64:8,>:1]");
  // "" = the trace's own.
  std::vector<std::string> roundup_power2_divisions = {""};
  std::vector<double> garbage_collection_thresholds = {0.0};  // 0 = the trace's own
  // "True" / "False"; "" = the trace's own.
  std::vector<std::string> expandable_segments = {"", "True"};
  // Placement policy names ("best_fit", "first_fit"); "" = the trace's own (best_fit).
  std::vector<std::string> placements = {""};
  // The replay runs under a cap given apart from the settings (--memory-fraction, --allowed):
  // garbage collection then needs no fraction added to its configurations.
  bool capped = false;
};

struct SweepConfig {
  AllocatorOptions options;
  std::string label;           // PYTORCH_CUDA_ALLOC_CONF string, "(default)" when empty
  int changes_from_trace = 0;  // settings that differ from the trace's own
  // The first row, the baseline: the trace's own settings, or those --conf gave instead of them
  // (base_from_conf).
  bool is_trace_config = false;
  bool base_from_conf = false;
  // False for fragscope-only settings (placement other than best_fit): never recommended.
  bool pytorch_applicable = true;
};

struct SweepResult {
  SweepConfig config;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_active_bytes = 0;
  // The most reserved at once in private pools (CUDA graphs, MemPools); 0 without them.
  uint64_t peak_private_pool_reserved_bytes = 0;
  double utilization = 0.0;  // peak active / peak reserved
  int64_t device_mallocs = 0;
  int64_t device_frees = 0;
  int64_t alloc_retries = 0;
  int64_t ooms = 0;                         // failures in the replay
  std::optional<uint64_t> first_oom_index;  // trace index of the first
  std::vector<uint64_t> oom_indices;        // the first kMaxOomIndices
  // The trace's own OOMs (oom events, where the job failed), reproduced by this replay or not,
  // and, when no cap was given, those whose records show the device had room: refused under a
  // cap the trace does not record (RefusedUnderUnrecordedCap), so that no replay without it says
  // anything about them.
  int64_t trace_ooms = 0;
  int64_t unrecorded_cap_ooms = 0;
  // The trace's OOMs this replay served with a cap above the one the job's settings record (a
  // --conf per_process_memory_fraction, or a cap flag): more memory, not a setting
  // (SweepReplaySettings), and whether the cap came from the flags (for the text: CapRaiser).
  int64_t raised_cap_ooms = 0;
  bool cap_from_flags = false;
  // Baseline row only: the trace ends at the job's OOM (no allocation after its last one), so
  // the replays show only whether a setting gets past it, not whether the job would complete.
  bool ends_at_trace_oom = false;
  double seconds = 0.0;
  std::string error;    // the replay failed (the row has no figures)
  uint64_t events = 0;  // trace events replayed (0: an empty trace)
  // The trace reader's warnings (a torn tail, records the writer dropped): the same in every row.
  std::vector<std::string> source_warnings;

  static constexpr size_t kMaxOomIndices = 64;

  // The row's tag in tables: " [trace]" or " [--conf]" for the baseline, "" for the others.
  std::string_view Tag() const {
    return !config.is_trace_config ? "" : config.base_from_conf ? " [--conf]" : " [trace]";
  }
};

struct SweepReplaySettings {
  uint64_t capacity_bytes = 0;
  std::optional<uint64_t> allowed_bytes;
  // The trace's own settings (TraceOwnOptions): they sized the segments its OOMs asked for.
  AllocatorOptions trace_options;
  // The job's empty_cache() calls for every row (ReplayConfig::empty_cache_at; nullptr: infer).
  std::shared_ptr<const std::vector<uint64_t>> empty_cache_at;
  // RecordedJobCapReplaced: a row whose cap is above it (or that has none) and serves the job's
  // OOM shows more memory, not a setting that avoids it (SweepResult::raised_cap_ooms).
  std::optional<uint64_t> recorded_job_cap;
  // allowed_bytes comes from --memory-fraction/--allowed (OomReplayContext::cap_from_flags).
  bool cap_from_flags = false;
};

// The configurations of `spec` over `base` (the trace's options, or those of --conf when
// `base_from_conf`). The base configuration is always included (first), so the table shows the
// baseline, and the roundup and garbage-collection lists are compared against not setting them
// (the base's own value). Configurations that round and collect alike are one (a division of 1
// rounds as none does, as in PyTorch). Errors: invalid values, named.
absl::StatusOr<std::vector<SweepConfig>> BuildSweepConfigs(const AllocatorOptions& base,
                                                           const SweepSpec& spec,
                                                           bool base_from_conf = false);

// Replays `opener`'s trace under every configuration, `threads` at a time (0 = one per core).
// `progress`, if set, is called with (finished, total) from the worker threads, serialized.
std::vector<SweepResult> RunSweep(const TraceOpener& opener,
                                  const std::vector<SweepConfig>& configs,
                                  const SweepReplaySettings& settings, int threads,
                                  const std::function<void(size_t, size_t)>& progress = {});

struct SweepRecommendation {
  size_t index = 0;
  std::string reason;
  // What the row is, in a few words, for a summary that shows the setting without the reason
  // (the HTML report's card): "recommended setting" only when it avoids OOMs the replay
  // reproduces; "lowest-peak setting (...)" when there is no reproduced OOM to avoid.
  std::string_view headline;
};

// Added to a recommendation that avoids the OOMs of a trace that ends at its OOM.
inline constexpr std::string_view kEndsAtOomCaveat =
    "; only as far as the trace goes: it ends where the job died, so whether the job would "
    "then complete is not shown (re-run it under the setting)";

// The headline when no setting is recommended because the job is bound by its cap (JobVerdict).
inline constexpr std::string_view kCapacityBoundHeadline =
    "no setting can save the job: it is bound by its memory cap";

// The recommended row, or nullopt when no configuration avoids the OOMs.
std::optional<SweepRecommendation> RecommendConfig(const std::vector<SweepResult>& results,
                                                   bool trace_has_oom);
// Why RecommendConfig found none: no row avoids the OOMs, or only fragscope-only ones do.
std::string NoRecommendationReason(const std::vector<SweepResult>& results);

// The smallest tested change that avoids the OOM at trace event `oom_index` (no failure at or
// before it), as the index of the row: fewest settings changed, then lowest peak reserved.
std::optional<size_t> SmallestFixFor(const std::vector<SweepResult>& results, uint64_t oom_index);

}  // namespace fragscope
