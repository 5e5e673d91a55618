// Analyze: the pipeline behind `fragscope analyze` and `fragscope demo`: open a trace, replay it
// once with metrics and OOM explanations, sweep allocator settings on the same requests, attach
// the smallest fixing setting to each OOM and compare with the model's theoretical footprint.
// Several traces (one per rank) are analyzed one after the other and the worst rank is named.
// One trace's pipeline is analyzer.cc; what its replays run under (capacity, settings, cap,
// empty_cache() calls) is replay_config.cc; several traces are analyze_traces.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/explain/sweep.h"
#include "analysis/replay/replay.h"
#include "analysis/report/report.h"
#include "analysis/sources/open_trace.h"
#include "analysis/sources/settings_check.h"

namespace fragscope {

struct AnalysisOptions {
  std::optional<uint64_t> capacity_bytes;    // overrides the trace's
  std::string capacity_flag = "--capacity";  // where capacity_bytes came from ("--gpu h200")
  std::optional<uint64_t> allowed_bytes;     // memory-fraction cap in bytes
  std::optional<double> memory_fraction;     // ... or as a fraction of the capacity
  // Replay under these settings instead of the trace's (--conf, parsed by the command line).
  std::optional<AllocatorOptions> conf;
  // The settings the environment gives the job (PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF),
  // read by the command line: checked against the trace's when --conf is not given.
  std::optional<AskedSettings> env_settings;
  std::optional<uint64_t> at_index;  // also report the layout after this event
  int device = -1;                   // snapshot device
  size_t timeline_points = 600;
  bool run_sweep = true;
  SweepSpec sweep;
  int threads = 0;                        // sweep threads; 0 = one per core
  std::optional<std::string> model;       // --model SPEC (model_job.h)
  std::optional<std::string> model_json;  // --model-json PATH (model_job.h)
  // Progress of the current stage in [0, 1], with its name; called from the analyzing thread.
  std::function<void(const std::string& stage, double fraction)> progress;
};

// The capacity to simulate: the flag, else the trace's (log header or inference), else 1 TiB
// ("unlimited") with a note. Sets *source to a human explanation.
uint64_t ResolveCapacity(const TraceInfo& info, const AnalysisOptions& options,
                         std::string* source);

// The trace's own allocator settings (PyTorch's defaults if its text is not valid settings),
// with expandable segments when its events show them.
AllocatorOptions TraceOwnOptions(const TraceInfo& info);

// The cap the job's own settings record (a per_process_memory_fraction below 1 in the trace), on
// the replay's device, when the replay may not run under it: --conf replaces the settings, or
// --memory-fraction/--allowed give a cap of their own. A replay with more room than this cap
// (RaisesRecordedCap) that serves the job's OOM shows more memory, not a fix. nullopt otherwise
// (no cap recorded, or the replay runs the job's own).
std::optional<uint64_t> RecordedJobCapReplaced(const TraceInfo& info,
                                               const AnalysisOptions& options,
                                               uint64_t capacity_bytes);

// Whether the replay's cap comes from --memory-fraction or --allowed (else from the settings:
// the trace's, or --conf's).
inline bool CapFromFlags(const AnalysisOptions& options) {
  return options.allowed_bytes.has_value() || options.memory_fraction.has_value();
}

// For a trace that does not record empty_cache() (snapshots): the events before which the job
// called it, inferred by a replay of the trace's own settings (under `options`' device and cap,
// without its --conf), for replays under other settings (ReplayConfig::empty_cache_at). nullptr
// when the trace records the calls, or its own settings cannot be replayed (those replays then
// infer for themselves).
std::shared_ptr<const std::vector<uint64_t>> TraceEmptyCacheCalls(const TraceOpener& opener,
                                                                  const TraceInfo& info,
                                                                  const AnalysisOptions& options);

// Checks --conf against the rest of `options` without a trace, so that a command can report it
// before reading one: it names the native allocator, caps the device above 0 bytes, and sets no
// cap beside --memory-fraction/--allowed. MakeReplayConfig checks the same.
absl::Status CheckConfOption(const AnalysisOptions& options);

// The replay configuration for a trace under `options`. Errors: the trace's settings are not
// valid settings, or name another backend than the native allocator.
absl::StatusOr<ReplayConfig> MakeReplayConfig(const TraceInfo& info,
                                              const AnalysisOptions& options);

// A capacity-bound report (JobVerdict) gets no recommendation: the sweep's rows stay, and a
// setting that avoids an OOM in the replay is said to get past that allocation only.
void WithholdRecommendation(RankReport& report);

absl::StatusOr<RankReport> AnalyzeTrace(const TraceOpener& opener, const AnalysisOptions& options);

// The warning of a rank whose trace has no events.
inline constexpr char kEmptyTraceWarning[] = "the trace has no events: nothing to analyze";

// Errors: a file that cannot be read, two logs of the same rank, logs of different jobs.
absl::StatusOr<AnalysisReport> AnalyzeTraces(const std::vector<std::string>& paths,
                                             const AnalysisOptions& options);

}  // namespace fragscope
