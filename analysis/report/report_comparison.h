// ReportComparison: two analyses of the same job set side by side — a log and the prediction of
// its job (`analyze --predict`), two runs, two ranks: the peaks, the OOMs, and each marker phase,
// aligned by the markers' text in order. Rendered by the text, JSON and HTML reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/explain/job_verdict.h"
#include "analysis/metrics/phase_figures.h"

namespace fragscope {

struct RankReport;

struct ComparedFigures {
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_demand_bytes = 0;
  uint64_t allocations = 0;
  uint64_t ooms = 0;
  // The parts of the demand's peak (JobVerdict's DemandCheck: the log's roles, else the
  // estimator's terms) and where they come from; empty when neither is known.
  std::vector<DemandTerm> demand_terms;
  std::string terms_source;
  std::vector<DemandTerm> demand_modules;  // the demand's peak by module (DemandPeak::modules)
};

// One phase present in either trace; a phase only one has is nullopt on the other side.
struct ComparedPhase {
  std::string phase;
  std::optional<PhaseFigures> a;
  std::optional<PhaseFigures> b;
};

// Where two traces differ: a phase both have whose demand peaks differ, and the roles and modules
// that make the difference (their live requests at one phase's peak against the other's).
struct RoleDifference {
  AllocationRole role = AllocationRole::kUnknown;
  int64_t bytes = 0;  // b - a
};
struct ModuleDifference {
  std::string module;
  int64_t bytes = 0;  // b - a
};
struct PhaseDifference {
  std::string phase;
  int64_t peak_demand_bytes = 0;          // b - a
  std::vector<RoleDifference> roles;      // largest change first; empty without roles in both
  std::vector<ModuleDifference> modules;  // the same by module, the first kModuleChangesShown
};
inline constexpr size_t kModuleChangesShown = 5;
// The phases listed (those whose peak demand differs most) and the smallest change listed: of a
// phase, max(1 MiB, 1 % of the larger peak); of a role or module, max(1 MiB, 1 % of its phase's
// change). A module's change is known where both sides list it, or one lists it and the other
// lists every module it has (DemandCollector::kPhaseModulesKept).
inline constexpr size_t kPhaseDifferencesShown = 5;

struct ReportComparison {
  std::string title;   // "The prediction of the log's recorded job", "A against B"
  std::string a_name;  // column names: "the log", "predicted", a file name
  std::string b_name;
  std::string b_origin;  // how b was made (the command that predicted it), or its path
  double b_seconds = 0;  // the time b took to make (0: not made here)
  ComparedFigures a;
  ComparedFigures b;
  std::vector<ComparedPhase> phases;
  std::vector<PhaseDifference> differences;  // largest change first, at most kPhaseDifferencesShown
};

// a against b. Phases are matched by text, each phase of a with the first unmatched phase of b of
// the same text after the last match (both traces' order kept); the others stay alone.
ReportComparison CompareReports(const RankReport& a, std::string a_name, const RankReport& b,
                                std::string b_name);

}  // namespace fragscope
