#include "analysis/explain/job_verdict.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/explain/model_gap.h"
#include "analysis/sources/excerpt.h"
#include "estimator/gpu_presets.h"
#include "estimator/inverse_search.h"
#include "estimator/training_memory.h"

namespace fragscope {
namespace {

namespace est = ::fragscope::estimator;

std::string Size(double bytes) { return FormatSize(static_cast<uint64_t>(std::max(0.0, bytes))); }

// The allocator-visible peak of `job` under a changed configuration, or the estimator's error.
absl::StatusOr<double> PeakOf(const ModelJob& job) {
  absl::StatusOr<est::MemoryEstimate> e = EstimateModelJob(job);
  if (!e.ok()) return e.status();
  return AllocatorVisibleBytes(*e);
}

void AddAlternative(const ModelJob& changed, std::string what, double limit,
                    std::vector<FitAlternative>* out) {
  absl::StatusOr<double> peak = PeakOf(changed);
  FitAlternative a{.what = std::move(what)};
  if (peak.ok()) {
    a.peak_bytes = *peak;
    a.fits = *peak <= limit;
  } else {
    a.note = std::string(peak.status().message());
  }
  out->push_back(std::move(a));
}

}  // namespace

std::string_view VerdictBasisName(VerdictBasis basis) {
  switch (basis) {
    case VerdictBasis::kNone:
      return "";
    case VerdictBasis::kHeadroom:
      return "headroom";
    case VerdictBasis::kFootprint:
      return "model_footprint";
    case VerdictBasis::kDemand:
      return "demand";
  }
  return "";
}

absl::StatusOr<FootprintCheck> CheckFootprint(const ModelJob& job,
                                              const est::MemoryEstimate& estimate,
                                              double limit_bytes) {
  FootprintCheck f;
  f.model = absl::StrFormat("%s, %s", estimate.model_name, estimate.workload);
  f.origin = job.origin;
  f.assumptions = job.assumptions;
  f.theoretical_peak_bytes = AllocatorVisibleBytes(estimate);
  f.limit_bytes = limit_bytes;
  f.exceeds = limit_bytes > 0 && f.theoretical_peak_bytes > limit_bytes;
  // The device terms the allocator never holds (CUDA context, library workspaces) do not grow
  // with the batch: the estimator's "fits a device of C" is "allocator-visible <= C - them".
  const double outside = std::max(0.0, estimate.DeviceBytes() - f.theoretical_peak_bytes);
  if (limit_bytes <= 0) return f;
  if (job.training) {
    absl::StatusOr<int64_t> largest =
        est::LargestMicroBatch(job.spec, job.train, limit_bytes + outside);
    if (!largest.ok()) return largest.status();
    f.largest_micro_batch = *largest;
    if (!f.exceeds) return f;
    if (*largest >= 1) {
      ModelJob smaller = job;
      smaller.train.micro_batch = *largest;
      AddAlternative(smaller, absl::StrCat("micro_batch ", *largest), limit_bytes, &f.alternatives);
    }
    if (job.train.recompute != est::Recompute::kFull) {
      ModelJob recompute = job;
      recompute.train.recompute = est::Recompute::kFull;
      AddAlternative(recompute, "full recompute (activation checkpointing)", limit_bytes,
                     &f.alternatives);
    }
    if (job.train.layout.dp > 1 && job.train.zero_stage < 3) {
      ModelJob zero = job;
      zero.train.zero_stage = 3;
      AddAlternative(zero,
                     absl::StrFormat("ZeRO-3 over the %d data-parallel ranks", job.train.layout.dp),
                     limit_bytes, &f.alternatives);
    }
  } else if (f.exceeds) {
    absl::StatusOr<int64_t> largest =
        est::LargestInferenceBatch(job.spec, job.infer, limit_bytes + outside);
    if (largest.ok() && *largest >= 1 && *largest < job.infer.batch) {
      ModelJob smaller = job;
      smaller.infer.batch = *largest;
      AddAlternative(smaller, absl::StrCat("batch ", *largest), limit_bytes, &f.alternatives);
    }
  }
  if (!f.exceeds) return f;
  // The smallest GPU whose whole memory holds the job (the cap aside).
  const est::GpuSpec* best = nullptr;
  for (const est::GpuSpec& gpu : est::GpuPresets()) {
    if (gpu.memory_bytes >= f.theoretical_peak_bytes + outside &&
        (best == nullptr || gpu.memory_bytes < best->memory_bytes)) {
      best = &gpu;
    }
  }
  if (best != nullptr) {
    f.alternatives.push_back({.what = absl::StrFormat("all of one %s (%s, no cap)", best->name,
                                                      Size(best->memory_bytes)),
                              .peak_bytes = f.theoretical_peak_bytes,
                              .fits = true});
  }
  return f;
}

std::optional<DemandCheck> CheckDemand(const DemandSummary& demand, uint64_t limit_bytes,
                                       bool whole_job) {
  if (limit_bytes == 0) return std::nullopt;
  DemandCheck d;
  d.peak = demand.peak;
  d.limit_bytes = limit_bytes;
  d.outside_bytes = demand.outside_bytes;
  d.factor = static_cast<double>(demand.peak.bytes) / static_cast<double>(limit_bytes);
  d.exceeds = demand.peak.bytes > limit_bytes;
  d.whole_job = whole_job;
  return d;
}

void AttachRecommendation(const std::vector<SweepResult>& sweep, bool trace_has_oom,
                          JobVerdict& v) {
  if (std::optional<SweepRecommendation> rec = RecommendConfig(sweep, trace_has_oom)) {
    v.recommended = rec->index;
    v.recommendation = std::move(rec->reason);
    v.recommendation_headline = rec->headline;
  } else {
    v.recommended.reset();
    v.recommendation = NoRecommendationReason(sweep);
    v.recommendation_headline.clear();
  }
}

JobVerdict DecideVerdict(const std::vector<OomExplanation>& ooms,
                         const std::vector<SweepResult>& sweep,
                         std::optional<FootprintCheck> footprint,
                         std::optional<DemandCheck> demand) {
  JobVerdict v;
  v.footprint = std::move(footprint);
  v.demand = std::move(demand);
  if (!ooms.empty()) {
    v.cause = ooms.front().cause;
    // The job's last OOM decides (the replay's own come after settings the job did not run).
    size_t deciding = ooms.size() - 1;
    for (size_t i = ooms.size(); i-- > 0;) {
      if (ooms[i].in_trace) {
        deciding = i;
        break;
      }
    }
    const OomExplanation& x = ooms[deciding];
    v.deciding_oom = deciding;
    v.headroom_bytes = x.headroom_bytes;
    v.at_cap = x.at_cap;
    v.headroom_share = x.available_bytes > 0 ? static_cast<double>(x.headroom_bytes) /
                                                   static_cast<double>(x.available_bytes)
                                             : 0.0;
  }
  if (v.demand.has_value() && v.demand->exceeds && !v.demand->peak.refused_request) {
    const DemandCheck& d = *v.demand;
    v.capacity_bound = true;
    v.basis = VerdictBasis::kDemand;
    v.cause = OomCause::kCapacity;
    v.why = absl::StrFormat(
        "the trace's requests hold %s at their peak (%s, event %d), %.2fx the %s the job may "
        "use: no packing, and so no allocator setting, can make them fit",
        Size(static_cast<double>(d.peak.bytes)),
        d.peak.phase.empty() ? std::string("before any phase marker")
                             : absl::StrCat("in \"", Excerpt(d.peak.phase), "\""),
        d.peak.event_index, d.factor, Size(static_cast<double>(d.limit_bytes)));
    return v;
  }
  if (v.footprint.has_value() && v.footprint->exceeds) {
    v.capacity_bound = true;
    v.basis = VerdictBasis::kFootprint;
    v.cause = OomCause::kCapacity;
    v.why = absl::StrFormat(
        "the model's theoretical peak (%s) is above the %s the job may use: no allocator setting "
        "can make it fit",
        Size(v.footprint->theoretical_peak_bytes), Size(v.footprint->limit_bytes));
    return v;
  }
  if (!v.deciding_oom.has_value()) return v;
  const OomExplanation& x = ooms[*v.deciding_oom];
  bool ends_at_oom = true;  // without a sweep nothing shows the rest of the job
  for (const SweepResult& r : sweep) {
    if (r.config.is_trace_config) ends_at_oom = r.ends_at_trace_oom;
  }
  if (x.cause == OomCause::kNotReproduced) return v;
  if (x.cause == OomCause::kCapacity || x.headroom_bytes < 0) {
    v.capacity_bound = true;
    v.basis = VerdictBasis::kHeadroom;
    v.why = absl::StrFormat(
        "the live memory and the %s request at event %d exceed the %s available by %s: no "
        "packing, and so no setting, could have served it",
        Size(static_cast<double>(x.rounded_bytes)), x.event_index,
        Size(static_cast<double>(x.available_bytes)), Size(-static_cast<double>(x.headroom_bytes)));
    return v;
  }
  if (!x.at_cap || !ends_at_oom) return v;
  v.capacity_bound = true;
  v.basis = VerdictBasis::kHeadroom;
  v.why = absl::StrFormat(
      "the job is at its cap: with perfect packing the %s request at event %d would have left "
      "%s (%.2f%% of the %s available, below the %.0f%% no setting can be relied on to deliver); "
      "a setting that avoids this OOM only moves the failure to a later allocation, and the "
      "trace ends here",
      Size(static_cast<double>(x.rounded_bytes)), x.event_index,
      Size(static_cast<double>(x.headroom_bytes)), 100.0 * v.headroom_share,
      Size(static_cast<double>(x.available_bytes)), 100.0 * kAtCapShare);
  return v;
}

}  // namespace fragscope
