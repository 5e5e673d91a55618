// The verdict section of the text report (JobVerdict).

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/format_size.h"
#include "analysis/report/text_report.h"
#include "analysis/sources/excerpt.h"

namespace fragscope {
namespace {

std::string Size(double bytes) { return FormatSize(static_cast<uint64_t>(std::max(0.0, bytes))); }

std::string Headline(const JobVerdict& v) {
  if (v.basis == VerdictBasis::kDemand) {
    return absl::StrFormat("capacity-bound (the requests need %.2fx what the job may use)",
                           v.demand->factor);
  }
  if (v.basis == VerdictBasis::kFootprint) return "capacity-bound (the model's footprint)";
  if (v.basis == VerdictBasis::kHeadroom) return "capacity-bound (the job is at its cap)";
  if (!v.cause.has_value()) return "no OOM to judge";
  if (*v.cause == OomCause::kNotReproduced) return "the job's OOM is not reproduced (see above)";
  if (v.at_cap) {
    // The trace goes on after the OOM: its replays under the sweep's settings are the test.
    return absl::StrCat(std::string(OomCauseName(*v.cause)),
                        ", at the cap: only a setting whose replay completes the trace saves it");
  }
  return absl::StrCat(std::string(OomCauseName(*v.cause)),
                      ", not at the cap: the sweep's settings are tested against it");
}

void RenderFootprint(const FootprintCheck& f, std::ostream& out) {
  WriteWrapped(out,
               absl::StrFormat("Model footprint (%s; from %s): theoretical peak %s %s the %s the "
                               "job may use.",
                               f.model, f.origin, Size(f.theoretical_peak_bytes),
                               f.exceeds ? "exceeds" : "fits within", Size(f.limit_bytes)),
               "  ");
  std::vector<std::string> assumed;
  for (const Assumption& a : f.assumptions) {
    assumed.push_back(absl::StrFormat("%s %s (%s)", a.name, a.value, AssumptionBasisName(a.basis)));
  }
  WriteWrapped(out, absl::StrCat("assumed: ", absl::StrJoin(assumed, ", ")), "    ");
  if (f.largest_micro_batch.has_value()) {
    WriteWrapped(out,
                 *f.largest_micro_batch > 0
                     ? absl::StrFormat("largest micro-batch that fits: %d", *f.largest_micro_batch)
                     : std::string("not even micro-batch 1 fits"),
                 "    ");
  }
  for (const FitAlternative& a : f.alternatives) {
    WriteWrapped(out,
                 a.note.empty() ? absl::StrFormat("%s: peak %s, %s", a.what, Size(a.peak_bytes),
                                                  a.fits ? "fits" : "still does not fit")
                                : absl::StrFormat("%s: not estimated (%s)", a.what, a.note),
                 "    instead: ");
  }
}

void RenderDemand(const DemandCheck& d, std::ostream& out) {
  WriteWrapped(
      out,
      absl::StrFormat(
          "Demand (the trace's requests as if all were granted, %s): peak %s %s, event %d%s; "
          "%.2fx the %s the job may use%s.",
          d.whole_job ? "the whole job" : "up to the job's OOM", Size(d.peak.bytes),
          d.peak.phase.empty() ? std::string("before any phase marker")
                               : absl::StrCat("in \"", Excerpt(d.peak.phase), "\""),
          d.peak.event_index, d.peak.refused_request ? " (with the refused request)" : "", d.factor,
          Size(d.limit_bytes),
          d.outside_bytes > 0
              ? absl::StrFormat(" (%s held outside PyTorch left out)", Size(d.outside_bytes))
              : ""),
      "  ");
  if (!d.terms.empty()) {
    WriteWrapped(out, absl::StrCat("largest parts (", d.terms_source, "): ", TermsText(d.terms, 4)),
                 "    ");
  }
  if (!d.peak.modules.empty()) {
    WriteWrapped(out, "largest modules: " + absl::CHexEscape(TermsText(d.peak.modules, 4)), "    ");
  }
}

}  // namespace

void RenderModelGapTerms(const ModelGap& gap, std::ostream& out) {
  if (gap.terms.empty()) return;
  out << absl::StrFormat("  %-12s %14s %14s %14s\n", "term", "estimated", "live here",
                         "difference");
  for (const TermGap& t : gap.terms) {
    const double d = t.measured_bytes - t.estimated_bytes;
    out << absl::StrFormat("  %-12s %14s %14s %14s\n", t.category, Size(t.estimated_bytes),
                           Size(t.measured_bytes),
                           absl::StrCat(d < 0 ? "-" : "+", Size(std::abs(d))));
  }
  if (gap.unattributed_bytes > 0) {
    out << absl::StrFormat("  %-12s %14s %14s\n", "(no phase)", "", Size(gap.unattributed_bytes));
  }
}

void RenderVerdictText(const RankReport& r, std::ostream& out) {
  const JobVerdict& v = r.verdict;
  if (!v.cause.has_value() && !v.footprint.has_value() &&
      !(v.demand.has_value() && v.demand->factor >= 1 - kAtCapShare)) {
    return;
  }
  out << "\nVerdict: " << Headline(v) << "\n";
  if (v.headroom_bytes.has_value() && v.basis != VerdictBasis::kHeadroom &&
      v.cause != OomCause::kNotReproduced) {
    WriteWrapped(
        out,
        absl::StrFormat("headroom at the job's OOM (perfect packing, after the request): "
                        "%s%s (%.2f%% of what the job may use)",
                        *v.headroom_bytes < 0 ? "-" : "",
                        Size(static_cast<double>(*v.headroom_bytes < 0 ? -*v.headroom_bytes
                                                                       : *v.headroom_bytes)),
                        100.0 * v.headroom_share),
        "  ");
  }
  if (v.capacity_bound) WriteWrapped(out, absl::StrCat("No setting is recommended: ", v.why), "  ");
  if (v.demand.has_value()) RenderDemand(*v.demand, out);
  if (v.footprint.has_value()) RenderFootprint(*v.footprint, out);
}

}  // namespace fragscope
