#include "analysis/ranks/cross_rank_outliers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"

namespace fragscope {
namespace {

std::string Size(double bytes) { return FormatSize(static_cast<uint64_t>(std::max(bytes, 0.0))); }

// How a sentence names a phase kind (PhaseKindOf).
std::string PhaseWords(const std::string& phase) {
  if (phase == "(no marker)") return "before the first marker";
  if (phase == PhasePeakCollector::kOtherPhases) return "in phases beyond the first 32";
  if (phase == "optimizer" || phase == "forward" || phase == "backward") {
    return absl::StrFormat("in the %s phase", phase);
  }
  return absl::StrFormat("in the \"%s\" phase", phase);
}

uint64_t Rise(const PhaseRise& p, OutlierMetric metric) {
  return metric == OutlierMetric::kPeakReserved ? p.reserved_rise_bytes : p.allocated_rise_bytes;
}

// The median rise of each phase over a set of ranks, computed once per phase when first asked.
// A phase most ranks lack has a median rise of 0.
class PhaseMedians {
 public:
  PhaseMedians(const std::vector<RankSummary>& ranks, const ComparedRanks& set,
               OutlierMetric metric)
      : size_(set.members.size()) {
    for (size_t member : set.members) {
      for (const PhaseRise& p : ranks[member].phases) {
        rises_[p.phase].push_back(static_cast<double>(Rise(p, metric)));
      }
    }
  }
  double Of(const std::string& phase) {
    auto known = medians_.find(phase);
    if (known != medians_.end()) return known->second;
    double median = 0;
    auto it = rises_.find(phase);
    if (it != rises_.end() && it->second.size() * 2 > size_) {
      std::vector<double> values = it->second;
      values.resize(size_, 0.0);  // the ranks without the phase rose 0 in it
      median = Median(std::move(values));
    }
    medians_[phase] = median;
    return median;
  }

 private:
  size_t size_;
  absl::flat_hash_map<std::string, std::vector<double>> rises_;
  absl::flat_hash_map<std::string, double> medians_;
};

// Splits the excess of the outlier over the set's median by phase: the phase whose rise exceeds
// the set's median rise of that phase the most, and its share of the excess.
void AttributeToPhase(const RankSummary& rank, PhaseMedians& medians, RankOutlier* outlier) {
  const double excess = outlier->value - outlier->median;
  double best = 0;
  for (const PhaseRise& p : rank.phases) {
    const double phase_excess = static_cast<double>(Rise(p, outlier->metric)) - medians.Of(p.phase);
    if (phase_excess > best) {
      best = phase_excess;
      outlier->phase = p.phase;
    }
  }
  outlier->phase_excess_bytes = static_cast<uint64_t>(best);
  outlier->phase_share = excess > 0 ? std::min(best / excess, 1.0) : 0.0;
}

std::string PhaseClause(const RankOutlier& o) {
  if (o.phase.empty() || o.phase_excess_bytes == 0) return "";
  if (o.phase_share >= 0.95) return absl::StrFormat(", all of it %s", PhaseWords(o.phase));
  if (o.phase_share >= 0.5) {
    return absl::StrFormat(", %s of it %s", Size(static_cast<double>(o.phase_excess_bytes)),
                           PhaseWords(o.phase));
  }
  return absl::StrFormat(", spread over phases (the most, %s, %s)",
                         Size(static_cast<double>(o.phase_excess_bytes)), PhaseWords(o.phase));
}

std::string Against(const RankOutlier& o) {
  return o.compared_with == "all ranks" ? "the median"
                                        : absl::StrFormat("the median of %s", o.compared_with);
}

std::string Sentence(const RankOutlier& o, const RankSummary& r) {
  switch (o.metric) {
    case OutlierMetric::kPeakReserved:
      return absl::StrFormat("rank %d reserves %s more than %s (%s against %s)%s", o.rank,
                             Size(o.value - o.median), Against(o), Size(o.value), Size(o.median),
                             PhaseClause(o));
    case OutlierMetric::kPeakAllocated:
      return absl::StrFormat("rank %d allocates %s more at its peak than %s (%s against %s)%s",
                             o.rank, Size(o.value - o.median), Against(o), Size(o.value),
                             Size(o.median), PhaseClause(o));
    case OutlierMetric::kOutsidePyTorch:
      return absl::StrFormat(
          "rank %d has %s of device memory outside PyTorch (%s), %s more than %s (%s): the CUDA "
          "context, NCCL buffers, other libraries or processes on its GPU",
          o.rank, Size(o.value),
          r.outside_source == "log open" ? "when its log opened" : "at its " + r.outside_source,
          Size(o.value - o.median), Against(o), Size(o.median));
    case OutlierMetric::kUtilization:
      return absl::StrFormat(
          "rank %d uses %.0f%% of the memory it reserves (peak active / peak reserved), against "
          "%s of %.0f%%: fragmentation, or blocks cached beyond its needs",
          o.rank, 100 * o.value, Against(o), 100 * o.median);
  }
  return "";
}

// One metric over one set.
void FindFor(const std::vector<RankSummary>& ranks, const ComparedRanks& set, OutlierMetric metric,
             std::vector<RankOutlier>* out, std::vector<std::string>* notes) {
  std::vector<size_t> members;
  std::vector<double> values;
  for (size_t i : set.members) {
    const RankSummary& r = ranks[i];
    switch (metric) {
      case OutlierMetric::kPeakReserved:
        values.push_back(static_cast<double>(r.peak_reserved_bytes));
        break;
      case OutlierMetric::kPeakAllocated:
        values.push_back(static_cast<double>(r.peak_allocated_bytes));
        break;
      case OutlierMetric::kOutsidePyTorch:
        if (!r.outside_pytorch_bytes.has_value()) continue;
        values.push_back(static_cast<double>(*r.outside_pytorch_bytes));
        break;
      case OutlierMetric::kUtilization:
        if (r.peak_reserved_bytes == 0) continue;
        values.push_back(r.utilization);
        break;
    }
    members.push_back(i);
  }
  if (members.size() < kMinComparedRanks) return;
  const double median = Median(values);
  std::vector<double> deviations;
  for (double v : values) deviations.push_back(std::fabs(v - median));
  const double spread = kMadScale * Median(std::move(deviations));
  const bool low = metric == OutlierMetric::kUtilization;
  const double floor =
      low ? kMinOutlierUtilization
          : std::max(kMinOutlierFraction * median, static_cast<double>(kMinOutlierBytes));
  std::vector<double> distances(members.size());
  std::vector<size_t> flagged;
  for (size_t k = 0; k < members.size(); ++k) {
    distances[k] = low ? median - values[k] : values[k] - median;
    if (distances[k] < floor) continue;
    if (spread > 0 && distances[k] / spread < kOutlierMads) continue;
    flagged.push_back(k);
  }
  // Too many to be outliers: a group of ranks (a second mode, with the others all alike: MAD 0).
  // Only ranks beyond the group, by the floor, stay outliers (Note [Outlier ranks]).
  const size_t most = std::max(kMaxGroupOutliers, members.size() / 20);
  if (flagged.size() > most) {
    std::vector<double> sorted = distances;
    std::sort(sorted.begin(), sorted.end());
    const double group = sorted[(sorted.size() - 1) * 95 / 100];
    notes->push_back(absl::StrFormat(
        "%s: %d of %d ranks (%s) pass the outlier rule, too many to be outliers: a group; only "
        "ranks beyond its 95th percentile by %s more are named",
        OutlierMetricName(metric), flagged.size(), members.size(), set.name,
        low ? absl::StrFormat("%.0f points", 100 * floor) : Size(floor)));
    std::erase_if(flagged, [&](size_t k) { return distances[k] < group + floor; });
  }
  std::optional<PhaseMedians> phase_medians;
  for (size_t k : flagged) {
    RankOutlier o;
    o.index = members[k];
    o.rank = ranks[o.index].rank;
    o.metric = metric;
    o.value = values[k];
    o.median = median;
    o.mads = spread > 0 ? distances[k] / spread : std::numeric_limits<double>::infinity();
    o.compared_with = set.name;
    if (metric == OutlierMetric::kPeakReserved || metric == OutlierMetric::kPeakAllocated) {
      if (!phase_medians.has_value()) phase_medians.emplace(ranks, set, metric);
      AttributeToPhase(ranks[o.index], *phase_medians, &o);
    }
    o.sentence = Sentence(o, ranks[o.index]);
    out->push_back(std::move(o));
  }
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

std::vector<RankOutlier> FindOutliers(const std::vector<RankSummary>& ranks,
                                      const std::vector<ComparedRanks>& sets,
                                      std::vector<std::string>* notes) {
  std::vector<RankOutlier> outliers;
  for (const ComparedRanks& set : sets) {
    for (OutlierMetric metric : {OutlierMetric::kPeakReserved, OutlierMetric::kPeakAllocated,
                                 OutlierMetric::kOutsidePyTorch, OutlierMetric::kUtilization}) {
      FindFor(ranks, set, metric, &outliers, notes);
    }
  }
  std::stable_sort(outliers.begin(), outliers.end(),
                   [](const RankOutlier& a, const RankOutlier& b) {
                     return a.index != b.index ? a.index < b.index : a.metric < b.metric;
                   });
  return outliers;
}

}  // namespace fragscope
