#include "analysis/report/comparison_render.h"

#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/report/html_report.h"
#include "analysis/report/json_report.h"
#include "analysis/report/text_report.h"
#include "analysis/sources/excerpt.h"

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

// A signed change in bytes: "+1.00 GiB", "-25.10 GiB".
std::string Signed(int64_t d) {
  return absl::StrCat(d < 0 ? "-" : "+",
                      FormatSize(d < 0 ? static_cast<uint64_t>(-d) : static_cast<uint64_t>(d)));
}

// "optimizer_temporaries -25.10 GiB, saved_activations +1.00 GiB; by module: lm_head -1.00 GiB";
// "" without roles or modules. Module paths from the log: escaped by each rendering.
std::string RoleChanges(const PhaseDifference& d) {
  std::string text;
  for (const RoleDifference& r : d.roles) {
    absl::StrAppend(&text, text.empty() ? "" : ", ", std::string(AllocationRoleName(r.role)), " ",
                    Signed(r.bytes));
  }
  for (size_t i = 0; i < d.modules.size(); ++i) {
    absl::StrAppend(&text,
                    i > 0          ? ", "
                    : text.empty() ? "by module: "
                                   : "; by module: ",
                    d.modules[i].module, " ", Signed(d.modules[i].bytes));
  }
  return text;
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
  OrderedJson terms = OrderedJson::array();
  for (const DemandTerm& t : f.demand_terms)
    terms.push_back({{"name", t.name}, {"bytes", t.bytes}});
  j["demand_terms"] = std::move(terms);
  j["terms_source"] = f.terms_source;
  j["demand_modules"] = ModuleBytesJson(f.demand_modules);
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
  j["roles_at_peak_demand"] = RoleBytesJson(p->roles_at_peak_demand);
  std::vector<DemandTerm> modules = p->modules_at_peak_demand;
  if (modules.size() > DemandCollector::kModulesShown)
    modules.resize(DemandCollector::kModulesShown);
  j["modules_at_peak_demand"] = ModuleBytesJson(modules);
  return j;
}

}  // namespace

void RenderComparisonText(const ReportComparison& c, std::ostream& out) {
  out << "\n";
  WriteWrapped(
      out,
      c.b_origin.empty()
          ? absl::StrCat(c.title, ":")
          : absl::StrCat(c.title, " (", c.b_origin,
                         c.b_seconds > 0 ? absl::StrFormat("; %.1f s", c.b_seconds) : "", "):"),
      "");
  out << absl::StrFormat("  %-16s %14s %14s   %s\n", "", c.a_name, c.b_name, "difference");
  Row(out, "peak allocated", c.a.peak_allocated_bytes, c.b.peak_allocated_bytes, true);
  Row(out, "peak reserved", c.a.peak_reserved_bytes, c.b.peak_reserved_bytes, true);
  Row(out, "peak demand", c.a.peak_demand_bytes, c.b.peak_demand_bytes, true);
  Row(out, "allocations", c.a.allocations, c.b.allocations, false);
  Row(out, "OOMs", c.a.ooms, c.b.ooms, false);
  for (const auto& [name, f] : {std::pair{&c.a_name, &c.a}, std::pair{&c.b_name, &c.b}}) {
    if (!f->demand_terms.empty()) {
      WriteWrapped(out,
                   absl::StrCat("at ", *name, "'s demand peak (", f->terms_source,
                                "): ", TermsText(f->demand_terms)),
                   "  ");
    }
    if (!f->demand_modules.empty()) {
      WriteWrapped(out,
                   absl::StrCat("at ", *name, "'s demand peak by module: ",
                                absl::CHexEscape(TermsText(f->demand_modules, 5))),
                   "  ");
    }
  }
  if (!c.differences.empty()) {
    out << "  where the difference is (each phase's peak demand, B - A; by role and module at "
           "those peaks):\n";
    for (const PhaseDifference& d : c.differences) {
      const std::string roles = RoleChanges(d);
      WriteWrapped(
          out,
          absl::StrCat(Excerpt(d.phase), ": ", Signed(d.peak_demand_bytes),
                       roles.empty() ? "" : absl::StrCat(" (", absl::CHexEscape(roles), ")")),
          "    ");
    }
  }
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
  OrderedJson differences = OrderedJson::array();
  for (const PhaseDifference& d : c.differences) {
    OrderedJson roles = OrderedJson::array();
    for (const RoleDifference& r : d.roles) {
      roles.push_back({{"role", AllocationRoleName(r.role)}, {"bytes", r.bytes}});
    }
    OrderedJson modules = OrderedJson::array();
    for (const ModuleDifference& m : d.modules) {
      modules.push_back({{"module", m.module}, {"bytes", m.bytes}});
    }
    differences.push_back({{"phase", d.phase},
                           {"peak_demand_bytes", d.peak_demand_bytes},
                           {"roles", std::move(roles)},
                           {"modules", std::move(modules)}});
  }
  j["differences"] = std::move(differences);
  return j;
}

namespace {

// One row of the HTML tables: a, b, and the difference, marked when there is one.
void HtmlRow(std::ostream& out, const std::string& what, uint64_t a, uint64_t b, bool bytes) {
  out << "<tr" << (a != b ? " class=\"d\"" : "") << "><td class=\"l\">" << HtmlEscape(what)
      << "</td><td>" << HtmlEscape(bytes ? FormatSize(a) : absl::StrCat(a)) << "</td><td>"
      << HtmlEscape(bytes ? FormatSize(b) : absl::StrCat(b)) << "</td><td>"
      << HtmlEscape(Difference(a, b, bytes)) << "</td></tr>";
}

std::string HtmlCell(const std::optional<PhaseFigures>& p, uint64_t PhaseFigures::*field,
                     bool bytes) {
  return HtmlEscape(Cell(p, field, bytes));
}

}  // namespace

void WriteComparisonHtml(const ReportComparison& c, std::ostream& out) {
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fragscope "
         "diff</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
         "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}.l{text-align:"
         "left}tr.d{background:#fff3cd}</style></head><body>\n";
  out << "<h1>" << HtmlEscape(c.title) << "</h1><table><tr><th class=\"l\"></th><th>"
      << HtmlEscape(c.a_name) << "</th><th>" << HtmlEscape(c.b_name)
      << "</th><th>difference</th></tr>";
  HtmlRow(out, "peak allocated", c.a.peak_allocated_bytes, c.b.peak_allocated_bytes, true);
  HtmlRow(out, "peak reserved", c.a.peak_reserved_bytes, c.b.peak_reserved_bytes, true);
  HtmlRow(out, "peak demand", c.a.peak_demand_bytes, c.b.peak_demand_bytes, true);
  HtmlRow(out, "allocations", c.a.allocations, c.b.allocations, false);
  HtmlRow(out, "OOMs", c.a.ooms, c.b.ooms, false);
  out << "</table>";
  for (const auto& [name, f] : {std::pair{&c.a_name, &c.a}, std::pair{&c.b_name, &c.b}}) {
    if (!f->demand_terms.empty()) {
      out << "<p>At " << HtmlEscape(*name) << "'s demand peak (" << HtmlEscape(f->terms_source)
          << "): " << HtmlEscape(TermsText(f->demand_terms)) << "</p>";
    }
    if (!f->demand_modules.empty()) {
      out << "<p>By module: " << HtmlEscape(TermsText(f->demand_modules, 5)) << "</p>";
    }
  }
  out << "<h2>Phases</h2><table><tr><th class=\"l\">phase</th><th>allocations A</th>"
         "<th>B</th><th>peak allocated A</th><th>B</th><th>peak reserved A</th><th>B</th></tr>";
  for (const ComparedPhase& p : c.phases) {
    const bool same = p.a.has_value() && p.b.has_value() && p.a->allocations == p.b->allocations &&
                      p.a->peak_allocated_bytes == p.b->peak_allocated_bytes &&
                      p.a->peak_reserved_bytes == p.b->peak_reserved_bytes;
    out << "<tr" << (same ? "" : " class=\"d\"") << "><td class=\"l\">" << HtmlEscape(p.phase)
        << "</td><td>" << HtmlCell(p.a, &PhaseFigures::allocations, false) << "</td><td>"
        << HtmlCell(p.b, &PhaseFigures::allocations, false) << "</td><td>"
        << HtmlCell(p.a, &PhaseFigures::peak_allocated_bytes, true) << "</td><td>"
        << HtmlCell(p.b, &PhaseFigures::peak_allocated_bytes, true) << "</td><td>"
        << HtmlCell(p.a, &PhaseFigures::peak_reserved_bytes, true) << "</td><td>"
        << HtmlCell(p.b, &PhaseFigures::peak_reserved_bytes, true) << "</td></tr>";
  }
  out << "</table>";
  if (!c.differences.empty()) {
    out << "<h2>Where the difference is</h2><p>Each phase's peak demand, B - A, and the roles that "
           "make it (their live requests at those peaks):</p><ul>";
    for (const PhaseDifference& d : c.differences) {
      const std::string roles = RoleChanges(d);
      out << "<li>" << HtmlEscape(d.phase) << ": " << HtmlEscape(Signed(d.peak_demand_bytes))
          << (roles.empty() ? "" : " (" + HtmlEscape(roles) + ")") << "</li>";
    }
    out << "</ul>";
  }
  out << "</body></html>\n";
}

}  // namespace fragscope
