#include "analysis/report/report_comparison.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "allocator/types.h"
#include "analysis/report/report.h"

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
    f.demand_modules = r.verdict.demand->peak.modules;
  }
  return f;
}

int64_t Delta(uint64_t a, uint64_t b) { return static_cast<int64_t>(b) - static_cast<int64_t>(a); }

uint64_t Magnitude(int64_t d) {
  return d < 0 ? static_cast<uint64_t>(-d) : static_cast<uint64_t>(d);
}

bool HasRoles(const RoleBytes& roles) {
  for (size_t r = 1; r < roles.size(); ++r) {
    if (roles[r] > 0) return true;
  }
  return false;
}

// The named modules of a phase's list, and whether it names every module it has.
struct ModuleList {
  absl::flat_hash_map<std::string, uint64_t> bytes;
  bool complete = true;
};
ModuleList Modules(const std::vector<DemandTerm>& terms) {
  ModuleList list;
  for (const DemandTerm& t : terms) {
    // "(no module)" is exact (the peak less every module's); "(N other modules)" hides names.
    if (t.name.empty() || t.name.front() != '(' || t.name == "(no module)") {
      list.bytes[t.name] = t.bytes;
    } else {
      list.complete = false;
    }
  }
  return list;
}

std::vector<ModuleDifference> ModuleChanges(const PhaseFigures& a, const PhaseFigures& b,
                                            uint64_t floor) {
  const ModuleList la = Modules(a.modules_at_peak_demand), lb = Modules(b.modules_at_peak_demand);
  absl::flat_hash_map<std::string, bool> names;
  for (const auto& [name, bytes] : la.bytes) names[name] = true;
  for (const auto& [name, bytes] : lb.bytes) names[name] = true;
  std::vector<ModuleDifference> out;
  for (const auto& [name, unused] : names) {
    const auto ia = la.bytes.find(name), ib = lb.bytes.find(name);
    if ((ia == la.bytes.end() && !la.complete) || (ib == lb.bytes.end() && !lb.complete)) continue;
    const int64_t d =
        Delta(ia == la.bytes.end() ? 0 : ia->second, ib == lb.bytes.end() ? 0 : ib->second);
    if (Magnitude(d) >= floor) out.push_back({.module = name, .bytes = d});
  }
  std::sort(out.begin(), out.end(), [](const ModuleDifference& x, const ModuleDifference& y) {
    return Magnitude(x.bytes) != Magnitude(y.bytes) ? Magnitude(x.bytes) > Magnitude(y.bytes)
                                                    : x.module < y.module;
  });
  if (out.size() > kModuleChangesShown) out.resize(kModuleChangesShown);
  return out;
}

// The phases of both whose peak demand differs, largest change first, with the roles and
// modules behind it.
std::vector<PhaseDifference> Differences(const std::vector<ComparedPhase>& phases) {
  std::vector<PhaseDifference> out;
  for (const ComparedPhase& p : phases) {
    if (!p.a.has_value() || !p.b.has_value()) continue;
    const int64_t change = Delta(p.a->peak_demand_bytes, p.b->peak_demand_bytes);
    const uint64_t floor =
        std::max<uint64_t>(kMiB, std::max(p.a->peak_demand_bytes, p.b->peak_demand_bytes) / 100);
    if (Magnitude(change) < floor) continue;
    PhaseDifference d{.phase = p.phase, .peak_demand_bytes = change};
    const uint64_t role_floor = std::max<uint64_t>(kMiB, Magnitude(change) / 100);
    d.modules = ModuleChanges(*p.a, *p.b, role_floor);
    if (HasRoles(p.a->roles_at_peak_demand) && HasRoles(p.b->roles_at_peak_demand)) {
      for (size_t r = 0; r < kAllocationRoleCount; ++r) {
        const int64_t by = Delta(p.a->roles_at_peak_demand[r], p.b->roles_at_peak_demand[r]);
        if (Magnitude(by) >= role_floor) {
          d.roles.push_back({.role = static_cast<AllocationRole>(r), .bytes = by});
        }
      }
      std::stable_sort(d.roles.begin(), d.roles.end(),
                       [](const RoleDifference& x, const RoleDifference& y) {
                         return Magnitude(x.bytes) > Magnitude(y.bytes);
                       });
    }
    out.push_back(std::move(d));
  }
  std::stable_sort(out.begin(), out.end(), [](const PhaseDifference& x, const PhaseDifference& y) {
    return Magnitude(x.peak_demand_bytes) > Magnitude(y.peak_demand_bytes);
  });
  if (out.size() > kPhaseDifferencesShown) out.resize(kPhaseDifferencesShown);
  return out;
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
  c.differences = Differences(c.phases);
  return c;
}

}  // namespace fragscope
