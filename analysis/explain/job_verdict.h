// JobVerdict: what a report concludes for the whole job, beyond each OOM's class: whether the
// job is bound by its memory cap (so that no allocator setting can save it), and what would fit.
// The text, JSON and HTML reports render it; no report decides anything from another's prose.
//
// Note [Headroom at an OOM] (OomExplanation::headroom_bytes, at_cap; kAtCapShare)
// headroom = available - live - pending free - request: the room that perfect packing would
// have left after serving the failed request (available is the memory-fraction cap, else the
// device, less memory held outside PyTorch). No setting does better than perfect packing, and
// none reaches it: the best settings of the recorded traces leave up to 1 % of what they reserve
// unused at their peak (the sweep's utilization, 99.0-99.8 % on the H100 logs in tests/data/gpu:
// block rounding, 2 MiB segment granules, 20 MiB expandable pages). The job is *at its cap* when
// the headroom is below 2 % of what it may use, twice that loss: room that no setting can be
// relied on to deliver. The H100 GPT-2 log fits its 21.26 GiB cap by 57 MiB (0.26 %): at its
// cap (its model's peak is 23.56 GiB: the next allocations of the same forward fail under any
// setting). The H100 fragmentation log leaves 0.98 GiB of 4 GiB (24 %): not at its cap, and
// expandable segments saved that job on the device.
// When the trace ends at such an OOM (nothing after it shows the rest of the job), a setting
// that avoids the OOM is not shown to save the job: no setting is recommended. An OOM whose live
// memory and request exceed what is available (cause capacity) is capacity-bound too.
//
// Note [Demand against the cap]
// The trace's demand (analysis/metrics/demand.h, Note [Demand]) is measured, not estimated: when
// its peak of granted requests exceeds what the job may use, the job is capacity-bound by the
// factor demand / limit, whatever its OOMs look like, and it decides before the model's footprint
// (an estimate) and the headroom of one OOM. A peak reached only by adding a refused request (the
// job's OOM record) is the headroom test itself (cause capacity), and stays its basis.
//
// Note [Footprint against the cap]
// When the model is known (--model, --model-json, or the log's model record), its theoretical
// peak (the estimator's allocator-visible terms: AllocatorVisibleBytes) is compared with the
// cap. A peak above the cap makes the job capacity-bound whatever the trace shows: the verdict's
// cause becomes capacity (model footprint), no setting is recommended, and the verdict lists what
// would fit by the same estimator: the largest micro-batch, full recompute, ZeRO-3 over the data-
// parallel ranks (when there are several), and the smallest GPU preset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/explain/model_job.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/explain/sweep.h"
#include "analysis/metrics/demand.h"
#include "estimator/term.h"

namespace fragscope {

// One way to fit the job, by the estimator.
struct FitAlternative {
  std::string what;       // "micro_batch 12", "full recompute", "ZeRO-3 over 8 ranks", ...
  double peak_bytes = 0;  // its theoretical peak (allocator-visible)
  bool fits = false;      // at most the limit (for a GPU preset: its capacity less overheads)
  std::string note;       // why it was not estimated, when it was not
};

struct FootprintCheck {
  std::string model;   // the estimate's model and workload
  std::string origin;  // ModelJob::origin
  std::vector<Assumption> assumptions;
  double theoretical_peak_bytes = 0;
  double limit_bytes = 0;  // the cap, else the device's capacity
  bool exceeds = false;
  std::optional<int64_t> largest_micro_batch;  // training: 0 when not even 1 fits
  std::vector<FitAlternative> alternatives;
};

struct DemandCheck {
  DemandPeak peak;
  uint64_t limit_bytes = 0;    // what the job may use: the cap, else the device, less outside
  uint64_t outside_bytes = 0;  // held outside PyTorch (DemandSummary::outside_bytes)
  double factor = 0;           // peak / limit
  bool exceeds = false;        // peak > limit (a peak of granted requests only decides)
  // The trace does not end at an OOM of the job: its demand is the whole job's (a prediction,
  // or a job that went on).
  bool whole_job = false;
  std::vector<DemandTerm> terms;  // the largest parts at the peak, largest first
  std::string terms_source;       // "the log's allocation roles", "the estimator (...)", ""
};

// The demand check of `demand` against `limit_bytes` (0: unknown, nullopt returned).
std::optional<DemandCheck> CheckDemand(const DemandSummary& demand, uint64_t limit_bytes,
                                       bool whole_job);

enum class VerdictBasis : uint8_t { kNone, kHeadroom, kFootprint, kDemand };
// "", "headroom", "model_footprint", "demand"
std::string_view VerdictBasisName(VerdictBasis basis);

struct JobVerdict {
  std::optional<OomCause> cause;       // the first OOM's class; capacity when the footprint exceeds
  std::optional<size_t> deciding_oom;  // the OOM whose headroom is reported (index into ooms)
  std::optional<int64_t> headroom_bytes;
  double headroom_share = 0;  // of the limit
  bool at_cap = false;        // the deciding OOM's (OomExplanation::at_cap)
  bool capacity_bound = false;
  VerdictBasis basis = VerdictBasis::kNone;
  std::optional<FootprintCheck> footprint;
  std::optional<DemandCheck> demand;
  std::string why;  // capacity_bound: why no setting is recommended
  // The sweep's recommended row (index into the report's sweep; nullopt: none is shown to save
  // the job), why it is (or why none is), and what the row is in a few words (HTML card).
  std::optional<size_t> recommended;
  std::string recommendation;
  std::string recommendation_headline;
};

// The footprint check of `job` (estimated as `estimate`) against `limit_bytes`. Errors: the
// estimator's.
absl::StatusOr<FootprintCheck> CheckFootprint(const ModelJob& job,
                                              const estimator::MemoryEstimate& estimate,
                                              double limit_bytes);

// Sets v's recommendation from the sweep (RecommendConfig; NoRecommendationReason when none).
void AttachRecommendation(const std::vector<SweepResult>& sweep, bool trace_has_oom, JobVerdict& v);

// The verdict from the trace's demand, the explained OOMs, the sweep's baseline (whether the
// trace ends at its OOM) and, when the model is known, its footprint.
JobVerdict DecideVerdict(const std::vector<OomExplanation>& ooms,
                         const std::vector<SweepResult>& sweep,
                         std::optional<FootprintCheck> footprint,
                         std::optional<DemandCheck> demand = std::nullopt);

}  // namespace fragscope
