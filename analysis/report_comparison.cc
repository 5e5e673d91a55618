#include "analysis/report_comparison.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "analysis/report.h"

namespace fragscope {
namespace {

ComparedFigures Figures(const RankReport& r) {
  ComparedFigures f;
  f.peak_allocated_bytes = r.metrics.peak_allocated_bytes;
  f.peak_reserved_bytes = r.metrics.peak_reserved_bytes;
  f.peak_demand_bytes = r.verdict.demand.has_value() ? r.verdict.demand->peak.bytes : 0;
  f.allocations = r.metrics.allocations;
  f.ooms = r.oom_count;
  if (r.verdict.demand.has_value()) {
    f.demand_terms = r.verdict.demand->terms;
    f.terms_source = r.verdict.demand->terms_source;
  }
  return f;
}

}  // namespace

ReportComparison CompareReports(const RankReport& a, std::string a_name, const RankReport& b,
                                std::string b_name) {
  ReportComparison c;
  c.a_name = std::move(a_name);
  c.b_name = std::move(b_name);
  c.a = Figures(a);
  c.b = Figures(b);
  // The positions of each text in b, in order: a linear merge that keeps both orders.
  absl::flat_hash_map<std::string, std::vector<size_t>> in_b;
  for (size_t j = 0; j < b.phases.size(); ++j) in_b[b.phases[j].phase].push_back(j);
  absl::flat_hash_map<std::string, size_t> used;  // per text: how many of its positions are taken
  size_t next_b = 0;                              // b's phases before this one are placed
  for (const PhaseFigures& pa : a.phases) {
    std::optional<size_t> match;
    if (auto it = in_b.find(pa.phase); it != in_b.end()) {
      size_t& k = used[pa.phase];
      while (k < it->second.size() && it->second[k] < next_b) ++k;
      if (k < it->second.size()) match = it->second[k++];
    }
    if (match.has_value()) {
      for (; next_b < *match; ++next_b) {
        c.phases.push_back({.phase = b.phases[next_b].phase, .b = b.phases[next_b]});
      }
      c.phases.push_back({.phase = pa.phase, .a = pa, .b = b.phases[*match]});
      next_b = *match + 1;
    } else {
      c.phases.push_back({.phase = pa.phase, .a = pa});
    }
  }
  for (; next_b < b.phases.size(); ++next_b) {
    c.phases.push_back({.phase = b.phases[next_b].phase, .b = b.phases[next_b]});
  }
  return c;
}

}  // namespace fragscope
