#include "analysis/comparison_render.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/excerpt.h"
#include "analysis/text_report.h"

namespace fragscope {
namespace {

using estimator::JsonNumber;
using estimator::OrderedJson;

// b - a, signed, with its share of a.
std::string Difference(uint64_t a, uint64_t b, bool bytes) {
  const bool less = b < a;
  const uint64_t d = less ? a - b : b - a;
  std::string s = absl::StrCat(less ? "-" : "+", bytes ? FormatSize(d) : absl::StrCat(d));
  if (a > 0) {
    absl::StrAppendFormat(&s, " (%s%.2f %%)", less ? "-" : "+",
                          100.0 * static_cast<double>(d) / static_cast<double>(a));
  }
  return s;
}

void Row(std::ostream& out, const char* what, uint64_t a, uint64_t b, bool bytes) {
  out << absl::StrFormat("  %-16s %14s %14s   %s\n", what, bytes ? FormatSize(a) : absl::StrCat(a),
                         bytes ? FormatSize(b) : absl::StrCat(b), Difference(a, b, bytes));
}

std::string Cell(const std::optional<PhaseFigures>& p, uint64_t PhaseFigures::*field, bool bytes) {
  if (!p.has_value()) return "-";
  return bytes ? FormatSize((*p).*field) : absl::StrCat((*p).*field);
}

OrderedJson FiguresJson(const ComparedFigures& f) {
  OrderedJson j;
  j["peak_allocated_bytes"] = f.peak_allocated_bytes;
  j["peak_reserved_bytes"] = f.peak_reserved_bytes;
  j["peak_demand_bytes"] = f.peak_demand_bytes;
  j["allocations"] = f.allocations;
  j["ooms"] = f.ooms;
  return j;
}

OrderedJson PhaseJson(const std::optional<PhaseFigures>& p) {
  if (!p.has_value()) return nullptr;
  OrderedJson j;
  j["first_event"] = p->first_event;
  j["allocations"] = p->allocations;
  j["peak_allocated_bytes"] = p->peak_allocated_bytes;
  j["peak_reserved_bytes"] = p->peak_reserved_bytes;
  j["peak_demand_bytes"] = p->peak_demand_bytes;
  return j;
}

}  // namespace

void RenderComparisonText(const ReportComparison& c, std::ostream& out) {
  out << "\n";
  WriteWrapped(out,
               absl::StrCat(c.title, " (", c.b_origin,
                            c.b_seconds > 0 ? absl::StrFormat("; %.1f s", c.b_seconds) : "", "):"),
               "");
  out << absl::StrFormat("  %-16s %14s %14s   %s\n", "", c.a_name, c.b_name, "difference");
  Row(out, "peak allocated", c.a.peak_allocated_bytes, c.b.peak_allocated_bytes, true);
  Row(out, "peak reserved", c.a.peak_reserved_bytes, c.b.peak_reserved_bytes, true);
  Row(out, "peak demand", c.a.peak_demand_bytes, c.b.peak_demand_bytes, true);
  Row(out, "allocations", c.a.allocations, c.b.allocations, false);
  Row(out, "OOMs", c.a.ooms, c.b.ooms, false);
  if (c.phases.empty()) return;
  out << absl::StrFormat("  %-28s %15s %23s %23s\n", "phase (a / b)", "allocations",
                         "peak allocated", "peak reserved");
  size_t shown = 0;
  for (const ComparedPhase& p : c.phases) {
    if (shown++ == kComparedPhasesShown) {
      out << absl::StrFormat("  ... %d more phases: see the JSON report\n",
                             c.phases.size() - kComparedPhasesShown);
      break;
    }
    out << absl::StrFormat("  %-28s %7s/%-7s %11s/%-11s %11s/%-11s\n", Excerpt(p.phase),
                           Cell(p.a, &PhaseFigures::allocations, false),
                           Cell(p.b, &PhaseFigures::allocations, false),
                           Cell(p.a, &PhaseFigures::peak_allocated_bytes, true),
                           Cell(p.b, &PhaseFigures::peak_allocated_bytes, true),
                           Cell(p.a, &PhaseFigures::peak_reserved_bytes, true),
                           Cell(p.b, &PhaseFigures::peak_reserved_bytes, true));
  }
}

OrderedJson ComparisonJson(const ReportComparison& c) {
  OrderedJson j;
  j["title"] = c.title;
  j["a"] = c.a_name;
  j["b"] = c.b_name;
  j["b_origin"] = c.b_origin;
  j["b_seconds"] = JsonNumber(c.b_seconds, 4);
  j["a_figures"] = FiguresJson(c.a);
  j["b_figures"] = FiguresJson(c.b);
  OrderedJson phases = OrderedJson::array();
  for (const ComparedPhase& p : c.phases) {
    phases.push_back({{"phase", p.phase}, {"a", PhaseJson(p.a)}, {"b", PhaseJson(p.b)}});
  }
  j["phases"] = std::move(phases);
  return j;
}

}  // namespace fragscope
