#include "analysis/report/html_report.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/explain/block_holder.h"
#include "analysis/report/comparison_render.h"
#include "analysis/report/text_report.h"

namespace fragscope {
namespace {

constexpr char kStyle[] = R"(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; max-width: 1000px; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin-top: 22px; }
.meta { color: #555; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .v { font-size: 18px; font-weight: 600; } .card .k { font-size: 12px; color: #666; }
.oom { border-left: 4px solid #d62728; padding: 4px 12px; margin: 12px 0; background: #fff8f8; }
.cause { font-weight: 600; color: #d62728; }
.bound { border-color: #d62728; background: #fff8f8; }
pre.verdict { white-space: pre-wrap; font-size: 13px; }
.fix { background: #eef8ee; border-left: 4px solid #59a14f; padding: 4px 10px; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
tr.rec td { background: #eef8ee; font-weight: 600; }
pre { font-size: 11px; background: #f8f8f8; padding: 8px; overflow-x: auto; }
.warn { color: #8a6d3b; font-size: 12px; }
)";

std::string Size(uint64_t bytes) { return HtmlEscape(FormatSize(bytes)); }

// A pinning block's holder, on a line of its own in the phase cell ("" when not known).
std::string HolderCell(const PinningBlock& p) {
  const std::string holder = HolderText(p.origin.role, p.context);
  return holder.empty() ? "" : absl::StrCat("<br>", HtmlEscape(holder));
}

void Card(std::ostream& out, const std::string& value, const std::string& key) {
  out << "<div class=\"card\"><div class=\"v\">" << value << "</div><div class=\"k\">" << key
      << "</div></div>";
}

void RenderOom(std::ostream& out, const OomExplanation& x, size_t number) {
  out << "<div class=\"oom\"><h3>Out of memory #" << number << " at event " << x.event_index << " ("
      << FormatDuration(x.time_ns) << "), in &ldquo;" << HtmlEscape(x.phase) << "&rdquo;</h3>";
  out << "<p>Request " << Size(x.requested_bytes) << " (block " << Size(x.rounded_bytes)
      << "; PyTorch would say &ldquo;Tried to allocate " << Size(x.segment_bytes)
      << "&rdquo;). <span class=\"cause\">Cause: " << OomCauseName(x.cause)
      << (x.rule == PolicyRule::kNone ? "" : " / ") << PolicyRuleName(x.rule) << "</span></p>";
  out << "<p>" << HtmlEscape(x.headline) << "</p><ul>";
  for (const std::string& e : x.evidence) out << "<li>" << HtmlEscape(e) << "</li>";
  out << absl::StrFormat(
      "<li>reserved %s, allocated %s, reserved but unallocated %s, %s, largest %s</li>",
      Size(x.reserved_bytes), Size(x.allocated_bytes), Size(x.reserved_but_unallocated_bytes),
      CountOf(x.holes, "hole"), Size(x.largest_hole));
  if (!x.pool_id.is_default() || x.private_pool_count > 0) {
    out << absl::StrFormat(
        "<li>request's pool %s; other private pools: %d (%d CUDA-graph), %s reserved, %s of it "
        "free</li>",
        FormatPoolId(x.pool_id), x.private_pool_count, x.graph_pool_count,
        Size(x.private_pool_reserved_bytes), Size(x.private_pool_free_bytes));
  }
  out << "</ul>";
  if (const std::string holder = HolderText(x.request_context.role, x.request_context);
      !holder.empty()) {
    out << "<p>Requested by: " << HtmlEscape(holder) << "</p>";
  }
  if (const std::string held = HeldByRoleText(x); !held.empty()) {
    out << "<p>Held by role (the job's live requests): " << HtmlEscape(held) << "</p>";
  }
  if (!x.held_by_module.empty()) {
    out << "<p>Held by module: " << HtmlEscape(TermsText(x.held_by_module)) << "</p>";
  }
  for (const std::string& line : x.model_gap) out << "<p>" << HtmlEscape(line) << "</p>";
  if (!x.avoided_by.empty()) out << "<p class=\"fix\">Fix: " << HtmlEscape(x.avoided_by) << "</p>";
  if (x.layout.has_value()) {
    out << "<h3>Segment map at the OOM</h3>" << SegmentMapSvg(x);
  }
  if (!x.pinning.empty()) {
    out << "<h3>"
        << (x.cause == OomCause::kCapacity || x.fragmented.empty()
                ? "Largest live blocks"
                : "Live blocks pinning the fragmented segments")
        << "</h3><table><tr><th>size</th><th>requested</th><th>address</th><th>segment</th>"
           "<th>allocated at</th><th class=\"l\">phase</th></tr>";
    for (const PinningBlock& p : x.pinning) {
      out << absl::StrFormat(
          "<tr><td>%s</td><td>%s</td><td>0x%x</td><td>0x%x</td><td>%s</td><td class=\"l\">%s%s%s"
          "</td></tr>",
          Size(p.size), Size(p.requested_bytes), p.address, p.segment,
          p.origin.before_trace
              ? "before the trace"
              : absl::StrFormat("event %d (%s)", p.origin.index, FormatDuration(p.origin.time_ns)),
          HtmlEscape(p.phase), p.pending_free ? " [pending free]" : "",
          absl::StrCat(
              HolderCell(p),
              p.site.empty() ? "" : absl::StrCat("<br>at <code>", HtmlEscape(p.site), "</code>")));
    }
    out << "</table>";
  }
  out << "</div>";
}

void RenderSweep(std::ostream& out, const RankReport& r) {
  out << "<h3>Sweep: the same requests under other settings</h3><table><tr>"
         "<th class=\"l\">PYTORCH_CUDA_ALLOC_CONF</th><th>peak reserved</th><th>utilization</th>"
         "<th>OOM</th><th>device mallocs</th><th>device frees</th></tr>";
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    const SweepResult& s = r.sweep[i];
    const bool rec = r.verdict.recommended.has_value() && *r.verdict.recommended == i;
    out << "<tr" << (rec ? " class=\"rec\"" : "") << "><td class=\"l\">"
        << HtmlEscape(s.config.label) << s.Tag() << (rec ? " &#9733; recommended" : "") << "</td>";
    if (!s.error.empty()) {
      out << "<td colspan=\"5\">error: " << HtmlEscape(s.error) << "</td></tr>";
      continue;
    }
    out << absl::StrFormat(
        "<td>%s</td><td>%.1f %%</td><td>%s</td><td>%d</td><td>%d</td></tr>",
        Size(s.peak_reserved_bytes), 100 * s.utilization,
        s.first_oom_index.has_value() ? absl::StrFormat("yes, event %d", *s.first_oom_index) : "no",
        s.device_mallocs, s.device_frees);
  }
  out << "</table><p>" << HtmlEscape(r.verdict.recommendation) << "</p>";
}

// The verdict (JobVerdict): the text report's section, as HTML.
void RenderVerdict(std::ostream& out, const RankReport& r) {
  std::ostringstream text;
  RenderVerdictText(r, text);
  if (text.str().empty()) return;
  out << "<h3>Verdict</h3><pre class=\"verdict\">" << HtmlEscape(text.str().substr(1)) << "</pre>";
}

void RenderRank(std::ostream& out, const RankReport& r, bool per_device) {
  const MemoryMetrics& m = r.metrics;
  out << absl::StrFormat("<h2>%s %d &mdash; %s</h2>", per_device ? "Device" : "Rank",
                         per_device ? r.info.device : r.info.rank, HtmlEscape(r.info.path));
  out << "<p class=\"meta\">" << HtmlEscape(r.info.device_name) << ", capacity "
      << Size(r.capacity_bytes) << " (" << HtmlEscape(r.capacity_source) << ")"
      << (r.allowed_bytes.has_value() ? "; memory fraction cap " + Size(*r.allowed_bytes) : "")
      << "; settings: " << HtmlEscape(r.options.empty() ? "PyTorch defaults" : r.options) << "; "
      << CountOf(m.events, "event") << " replayed.</p>";
  out << "<div class=\"cards\">";
  Card(out, Size(m.peak_reserved_bytes), "peak reserved");
  Card(out, Size(m.peak_allocated_bytes), "peak allocated");
  Card(out, absl::StrFormat("%.1f %%", 100 * m.utilization), "utilization (GMLake)");
  Card(out, Size(m.reserved_but_unallocated_at_peak), "reserved but unallocated at peak");
  Card(out, absl::StrFormat("%d", r.oom_count), r.oom_count == 1 ? "OOM" : "OOMs");
  if (r.verdict.recommended.has_value()) {
    Card(out, HtmlEscape(r.sweep[*r.verdict.recommended].config.label),
         HtmlEscape(r.verdict.recommendation_headline));
  } else if (r.verdict.capacity_bound) {
    out << "<div class=\"card bound\"><div class=\"v\">capacity-bound</div><div class=\"k\">"
        << HtmlEscape(r.verdict.recommendation_headline) << "</div></div>";
  }
  out << "</div><h3>Memory timeline</h3>" << TimelineSvg(r);
  for (size_t i = 0; i < r.ooms.size() && i < 8; ++i) RenderOom(out, r.ooms[i], i + 1);
  if (r.ooms.size() > 8) {
    out << "<p>" << CountOf(r.ooms.size() - 8, "more OOM") << ": see the JSON report.</p>";
  }
  RenderVerdict(out, r);
  out << "<h3>Fragmentation at peak reserved (event " << m.at_peak.index
      << ")</h3><table><tr><th class=\"l\">metric</th><th>value</th></tr>";
  out << "<tr><td class=\"l\">reserved but unallocated (PyTorch)</td><td>"
      << Size(m.reserved_but_unallocated_at_peak) << "</td></tr>";
  out << absl::StrFormat(
      "<tr><td class=\"l\">1 &minus; largest free / total free (RMM)</td><td>%.3f</td></tr>"
      "<tr><td class=\"l\">utilization = peak active / peak reserved (GMLake)</td><td>%.1f %%</td>"
      "</tr><tr><td class=\"l\">realized fragmentation at peak (tcmalloc)</td><td>%.1f %%</td>"
      "</tr><tr><td class=\"l\">internal waste (block size &minus; request)</td><td>%s</td></tr>"
      "</table>",
      m.rmm_fragmentation_at_peak, 100 * m.utilization, 100 * m.realized_fragmentation,
      Size(m.at_peak.internal_waste_bytes));
  if (r.model_gap.has_value()) {
    out << "<h3>Model (" << HtmlEscape(r.model_gap_where) << ")</h3>";
    for (const std::string& line : r.model_gap->lines) out << "<p>" << HtmlEscape(line) << "</p>";
    std::ostringstream terms;
    RenderModelGapTerms(*r.model_gap, terms);
    out << "<pre class=\"verdict\">" << HtmlEscape(terms.str()) << "</pre>";
  }
  if (r.prediction.has_value()) {
    std::ostringstream beside;
    RenderComparisonText(*r.prediction, beside);
    out << "<h3>Beside the prediction</h3><pre class=\"verdict\">"
        << HtmlEscape(beside.str().substr(1)) << "</pre>";
  }
  if (!r.sweep.empty()) RenderSweep(out, r);
  out << "<details><summary>PyTorch memory_summary() of the replay</summary><pre>"
      << HtmlEscape(r.memory_summary) << "</pre></details>";
  for (const std::string& w : r.warnings) out << "<p class=\"warn\">" << HtmlEscape(w) << "</p>";
}

}  // namespace

void WriteHtmlReport(const AnalysisReport& report, std::ostream& out) {
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<title>fragscope report</title><style>"
      << kStyle << "</style></head><body>\n";
  out << "<h1>fragscope: why did this job run out of memory?</h1>";
  if (report.ranks.size() > 1) {
    const char* unit = report.per_device ? "device" : "rank";
    out << "<table><tr><th>" << unit
        << "</th><th class=\"l\">log</th><th>peak reserved</th>"
           "<th>utilization</th><th>OOMs</th></tr>";
    for (size_t i = 0; i < report.ranks.size(); ++i) {
      const RankReport& r = report.ranks[i];
      out << absl::StrFormat(
          "<tr%s><td>%d</td><td class=\"l\">%s</td><td>%s</td><td>%.1f %%</td><td>%d</td></tr>",
          report.worst == i ? " class=\"rec\"" : "",
          report.per_device ? r.info.device : r.info.rank, HtmlEscape(r.info.path),
          Size(r.metrics.peak_reserved_bytes), 100 * r.metrics.utilization, r.oom_count);
    }
    out << "</table><p>Worst " << unit << ": " << HtmlEscape(report.worst_reason) << "</p>";
  }
  for (const RankReport& r : report.ranks) RenderRank(out, r, report.per_device);
  out << "<p class=\"meta\">Generated by fragscope. Metric definitions: analysis/METRICS.md."
         "</p></body></html>\n";
}

}  // namespace fragscope
