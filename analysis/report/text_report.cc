#include "analysis/report/text_report.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "allocator/format_size.h"
#include "analysis/explain/block_holder.h"
#include "analysis/report/comparison_render.h"
#include "analysis/report/text_wrap.h"

namespace fragscope {
namespace {

std::string Size(uint64_t bytes) { return FormatSize(bytes); }

std::string Percent(double fraction) { return absl::StrFormat("%.1f %%", 100.0 * fraction); }

// Wraps `text` at 100 columns (WrapParagraph), the first line prefixed by `first_indent`, the
// others by as many spaces. A word longer than a line (a URL in PyTorch's OOM text) gets a line
// of its own, whole, so that it can be copied.
void Wrapped(std::ostream& out, const std::string& text, const std::string& first_indent) {
  out << WrapParagraph(text, first_indent, std::string(first_indent.size(), ' '));
}

std::string Where(uint64_t index, uint64_t time_ns) {
  return absl::StrFormat("event %d (%s)", index, FormatDuration(time_ns));
}

void RenderOom(const OomExplanation& x, size_t number, std::ostream& out) {
  Wrapped(out,
          absl::StrFormat("#%d  %s, in \"%s\": request %s (block %s; PyTorch: \"Tried to "
                          "allocate %s\")",
                          number, Where(x.event_index, x.time_ns), x.phase, Size(x.requested_bytes),
                          Size(x.rounded_bytes), Size(x.segment_bytes)),
          "  ");
  out << absl::StrFormat("      cause: %s%s%s\n", OomCauseName(x.cause),
                         x.rule == PolicyRule::kNone ? "" : " / ", PolicyRuleName(x.rule));
  if (const std::string holder = HolderText(x.request_context.role, x.request_context);
      !holder.empty()) {
    Wrapped(out, "requested by: " + absl::CHexEscape(holder), "      ");
  }
  Wrapped(out, x.headline, "      ");
  for (const std::string& e : x.evidence) Wrapped(out, e, "        - ");
  Wrapped(out,
          absl::StrFormat("reserved %s, allocated %s, reserved but unallocated %s, %s "
                          "(largest %s)",
                          Size(x.reserved_bytes), Size(x.allocated_bytes),
                          Size(x.reserved_but_unallocated_bytes), CountOf(x.holes, "hole"),
                          Size(x.largest_hole)),
          "      ");
  if (!x.pool_id.is_default() || x.private_pool_count > 0) {
    Wrapped(out,
            absl::StrFormat("request's pool %s; other private pools: %d (%d CUDA-graph), %s "
                            "reserved, %s of it free",
                            FormatPoolId(x.pool_id), x.private_pool_count, x.graph_pool_count,
                            Size(x.private_pool_reserved_bytes), Size(x.private_pool_free_bytes)),
            "      ");
  }
  if (!x.fragmented.empty()) {
    out << absl::StrFormat(
        "      fragmented segments (%d in all; most free first), pinned by live blocks:\n",
        x.fragmented_segment_count);
    for (const FragmentedSegment& s : x.fragmented) {
      out << absl::StrFormat("        0x%x %10s: %10s free, %s (largest %s), %s\n", s.address,
                             Size(s.size), Size(s.free_bytes), CountOf(s.holes, "hole"),
                             Size(s.largest_hole), CountOf(s.live_blocks, "live block"));
    }
  }
  if (!x.pinning.empty()) {
    out << (x.cause == OomCause::kCapacity || x.fragmented.empty()
                ? "      largest live blocks (what holds the memory):\n"
                : "      live blocks pinning those segments (largest first):\n");
    out << "        size        requested   allocated at               phase\n";
    for (const PinningBlock& p : x.pinning) {
      const std::string when =
          p.origin.before_trace ? "before the trace" : Where(p.origin.index, p.origin.time_ns);
      std::string phase = p.origin.before_trace ? "" : p.phase;
      if (phase.size() > 36) phase = phase.substr(0, 33) + "...";
      out << absl::StrFormat("        %-11s %-11s %-26s %s%s\n", Size(p.size),
                             Size(p.requested_bytes), when, phase,
                             p.pending_free ? " [pending free]" : "");
      // Who holds it (a prediction's roles and modules) and its call site (a snapshot's stack):
      // control characters a hostile file could carry, escaped.
      if (const std::string holder = HolderText(p.origin.role, p.context); !holder.empty()) {
        out << "          " << absl::CHexEscape(holder) << "\n";
      }
      if (!p.site.empty()) out << "          at " << absl::CHexEscape(p.site) << "\n";
    }
  }
  if (const std::string held = HeldByRoleText(x); !held.empty()) {
    Wrapped(out, "held by role (the job's live requests): " + held, "      ");
  }
  if (!x.held_by_module.empty()) {
    Wrapped(out, "held by module: " + absl::CHexEscape(TermsText(x.held_by_module)), "      ");
  }
  for (const std::string& line : x.model_gap) Wrapped(out, line, "      model: ");
  if (!x.avoided_by.empty()) Wrapped(out, "fix: " + x.avoided_by, "      ");
}

// A sweep row's label: the configuration's settings without expandable_segments (the "exp"
// column), "(default)" for none.
std::string SweepRowLabel(const SweepConfig& config) {
  std::string label = absl::StrReplaceAll(
      config.label, {{",expandable_segments:True", ""}, {"expandable_segments:True,", ""}});
  return label == "expandable_segments:True" ? "(default)" : label;
}

// `text` (a settings string, no spaces) after `indent`, broken after the commas between settings
// into lines of at most kTextColumns; continuation lines are indented as far as the text. A
// setting wider than a line is not broken.
std::string BreakAtCommas(std::string_view text, const std::string& indent) {
  std::string out = indent;
  size_t column = indent.size();
  size_t pos = 0;
  while (pos < text.size()) {
    // The next comma outside brackets (a roundup_power2_divisions list stays whole).
    size_t end = pos;
    for (int depth = 0; end < text.size();) {
      const char c = text[end++];
      depth += c == '[' ? 1 : c == ']' ? -1 : 0;
      if (c == ',' && depth <= 0) break;
    }
    if (column > indent.size() && column + (end - pos) > kTextColumns) {
      out.push_back('\n');
      out.append(indent.size(), ' ');
      column = indent.size();
    }
    out.append(text.substr(pos, end - pos));
    column += end - pos;
    pos = end;
  }
  return out + "\n";
}

}  // namespace

void WriteWrapped(std::ostream& out, const std::string& text, const std::string& indent) {
  Wrapped(out, text, indent);
}

std::string CountOf(uint64_t count, absl::string_view noun) {
  return absl::StrFormat("%d %s%s", count, noun, count == 1 ? "" : "s");
}

std::string FormatDuration(uint64_t ns) {
  if (ns >= 1'000'000'000) return absl::StrFormat("%.2f s", static_cast<double>(ns) / 1e9);
  if (ns >= 1'000'000) return absl::StrFormat("%.1f ms", static_cast<double>(ns) / 1e6);
  if (ns >= 1'000) return absl::StrFormat("%.0f us", static_cast<double>(ns) / 1e3);
  return absl::StrFormat("%d ns", ns);
}

void RenderSweepTable(const std::vector<SweepResult>& results,
                      const std::optional<size_t>& recommended, const std::string& reason,
                      std::ostream& out) {
  // expandable_segments has its own column ("exp"); the label shows the other settings. A label
  // wider than its column is cut, with a note number ("#1") that the notes below the table give
  // whole, so that every row stays one line and the columns stay aligned.
  constexpr size_t kLabelColumn = 36;
  // A column for the private pools (CUDA graphs, MemPools) only when the trace has them.
  const bool pools = std::any_of(results.begin(), results.end(), [](const SweepResult& r) {
    return r.peak_private_pool_reserved_bytes > 0;
  });
  out << absl::StrFormat("  %-36s %3s %13s %7s %-16s %8s %7s%s\n", "configuration", "exp",
                         "peak reserved", "util", "OOM", "mallocs", "frees",
                         pools ? absl::StrFormat(" %13s", "in pools") : "");
  bool fragscope_only = false;
  std::vector<std::string> long_labels;  // note #k is long_labels[k - 1]
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepResult& r = results[i];
    std::string label = SweepRowLabel(r.config);
    const std::string tag(r.Tag());
    fragscope_only |= !r.config.pytorch_applicable;
    const char mark = recommended.has_value() && *recommended == i ? '*' : ' ';
    if (label.size() + tag.size() > kLabelColumn) {
      // One note per label (the expandable and the other rows share theirs).
      size_t number = static_cast<size_t>(std::find(long_labels.begin(), long_labels.end(), label) -
                                          long_labels.begin() + 1);
      if (number > long_labels.size()) long_labels.push_back(label);
      const std::string note = absl::StrFormat(" #%d", number);
      // Cut before the tag and the note number, so that both stay in view.
      label.resize(kLabelColumn - tag.size() - note.size() - 3);
      label.append("...").append(tag).append(note);
    } else {
      label += tag;
    }
    const char* exp = r.config.options.expandable_segments ? "yes" : "no";
    if (!r.error.empty()) {
      out << absl::StrFormat("%c %-36s %3s error: %s\n", mark, label, exp, r.error);
      continue;
    }
    const std::string oom =
        r.first_oom_index.has_value() ? absl::StrFormat("yes, event %d", *r.first_oom_index) : "no";
    out << absl::StrFormat(
        "%c %-36s %3s %13s %7s %-16s %8d %7d%s\n", mark, label, exp, Size(r.peak_reserved_bytes),
        Percent(r.utilization), oom, r.device_mallocs, r.device_frees,
        pools ? absl::StrFormat(" %13s", Size(r.peak_private_pool_reserved_bytes)) : "");
  }
  if (pools) {
    Wrapped(out,
            "in pools: the most reserved at once in private pools (CUDA graphs, MemPools), part of "
            "peak reserved; each pool reuses only its own blocks, and the settings apply inside "
            "it too.",
            "  ");
  }
  for (size_t k = 0; k < long_labels.size(); ++k) {
    out << BreakAtCommas(long_labels[k], absl::StrFormat("  #%d ", k + 1));
  }
  if (fragscope_only) {
    Wrapped(out,
            "placement:first_fit rows are a fragscope policy PyTorch does not offer: compared, "
            "never recommended.",
            "  ");
  }
  if (recommended.has_value()) {
    Wrapped(out,
            absl::StrFormat("Recommended (*): PYTORCH_CUDA_ALLOC_CONF=%s  -- %s",
                            results[*recommended].config.label == "(default)"
                                ? "\"\""
                                : results[*recommended].config.label,
                            reason),
            "  ");
  } else {
    Wrapped(out, "Recommended: none -- " + reason, "  ");
  }
}

void RenderRankText(const RankReport& r, const TextReportOptions& options, std::ostream& out) {
  const TraceInfo& info = r.info;
  out << absl::StrFormat("fragscope analysis of %s (%s, device %d, rank %d)\n", info.path,
                         TraceFormatName(info.format), info.device, info.rank);
  Wrapped(out,
          absl::StrFormat("device: %s, capacity %s (%s)%s", info.device_name,
                          Size(r.capacity_bytes), r.capacity_source,
                          r.allowed_bytes.has_value()
                              ? absl::StrFormat("; memory fraction cap %s", Size(*r.allowed_bytes))
                              : ""),
          "  ");
  out << absl::StrFormat("  allocator settings: %s\n",
                         r.options.empty() ? "(PyTorch defaults)" : r.options);
  if (r.settings_check.has_value()) RenderSettingsCheckText(*r.settings_check, out);
  out << absl::StrFormat("  %s replayed in %.2f s; %s, %s\n\n", CountOf(r.metrics.events, "event"),
                         r.replay_seconds, CountOf(r.metrics.allocations, "allocation"),
                         CountOf(r.metrics.frees, "free"));
  const MemoryMetrics& m = r.metrics;
  // The job's figures leave out requests it was refused and the replay served; the replay's own
  // statistics (memory_summary) and the sweep's rows count them: each says which it is.
  const std::string refused =
      m.refused_requests_left_out == 0
          ? ""
          : absl::StrFormat("the %s (%s) the job was refused and the replay served",
                            CountOf(m.refused_requests_left_out, "request"),
                            Size(m.refused_bytes_left_out));
  if (refused.empty()) {
    out << "Memory (peaks over the trace)\n";
  } else {
    Wrapped(out, absl::StrCat("Memory (peaks over the trace, without ", refused, ")"), "");
  }
  out << absl::StrFormat("  allocated %s   active %s   requested %s   reserved %s\n",
                         Size(m.peak_allocated_bytes), Size(m.peak_active_bytes),
                         Size(m.peak_requested_bytes), Size(m.peak_reserved_bytes));
  out << absl::StrFormat("Fragmentation (at peak reserved, %s; definitions: analysis/METRICS.md)\n",
                         Where(m.at_peak.index, m.at_peak.time_ns));
  out << absl::StrFormat("  %-48s %s\n", "reserved but unallocated (PyTorch)",
                         Size(m.reserved_but_unallocated_at_peak));
  out << absl::StrFormat("  %-48s %.3f\n", "1 - largest free / total free (RMM)",
                         m.rmm_fragmentation_at_peak);
  out << absl::StrFormat("  %-48s %s\n", "GMLake utilization = peak active / peak reserved",
                         Percent(m.utilization));
  out << absl::StrFormat("  %-48s %s\n", "realized fragmentation at peak (tcmalloc)",
                         Percent(m.realized_fragmentation));
  out << absl::StrFormat(
      "  %-48s %s (%s of allocated; peak %s)\n", "internal waste = block size - request",
      Size(m.at_peak.internal_waste_bytes), Percent(m.internal_waste_fraction_at_peak),
      Size(m.peak_internal_waste_bytes));
  if (r.at_layout.has_value()) {
    const LayoutSummary& l = *r.at_layout;
    const LayoutTotals& t = l.totals;
    // The layout after the last event <= --at; a trace that ends before --at is said to.
    const bool past_end =
        r.at_index.has_value() && *r.at_index > l.index && l.index == r.final_layout.index;
    out << absl::StrFormat(
        "\nLayout after event %d (%s%s)\n", l.index, FormatDuration(l.time_ns),
        past_end ? absl::StrFormat("; the trace ends before --at %d", *r.at_index) : "");
    Wrapped(
        out,
        absl::StrFormat("%s (%d fragmented), reserved %s, allocated %s, %s free in "
                        "%s (largest %s; RMM fragmentation %.3f)",
                        CountOf(l.segments, "segment"), t.fragmented_segments,
                        Size(t.reserved_bytes), Size(t.allocated_bytes), Size(t.free_cached_bytes),
                        CountOf(t.holes, "hole"), Size(t.largest_hole), l.rmm_fragmentation),
        "  ");
  }
  out << "\n";
  if (r.ooms.empty()) {
    out << "Out of memory: none in the trace or the replay.\n";
  } else {
    out << "Out of memory: " << CountOf(r.oom_count, "OOM") << "\n";
    for (size_t i = 0; i < r.ooms.size(); ++i) {
      if (i < options.max_ooms) {
        RenderOom(r.ooms[i], i + 1, out);
        out << "\n";
      } else {
        const OomExplanation& x = r.ooms[i];
        out << absl::StrFormat("  #%d  %s: %s, request %s\n", i + 1,
                               Where(x.event_index, x.time_ns), OomCauseName(x.cause),
                               Size(x.requested_bytes));
        if (i + 1 == r.ooms.size() || i >= options.max_ooms + 20) {
          if (i + 1 < r.ooms.size()) out << "  ... (the JSON report lists every OOM)\n";
          break;
        }
      }
    }
  }
  RenderVerdictText(r, out);
  if (r.model_gap.has_value()) {
    out << "\nModel (" << r.model_gap_where << ")\n";
    for (const std::string& line : r.model_gap->lines) Wrapped(out, line, "  ");
    RenderModelGapTerms(*r.model_gap, out);
  } else if (!r.model_gap_where.empty()) {
    out << "\nModel: " << r.model_gap_where << "\n";
  }
  if (r.prediction.has_value()) RenderComparisonText(*r.prediction, out);
  if (!r.sweep.empty()) {
    out << absl::StrFormat(
        "\nSweep: %s replayed on the simulated device in "
        "%.2f s (0 = unlimited max_split_size)\n",
        CountOf(r.sweep.size(), "configuration"), r.sweep_seconds);
    RenderSweepTable(r.sweep, r.verdict.recommended, r.verdict.recommendation, out);
    if (!refused.empty()) {
      Wrapped(out,
              absl::StrCat("Each row is a replay under its settings and counts ", refused,
                           ", which the peaks and utilization above leave out (so the first "
                           "row's figures can exceed them)."),
              "  ");
    }
  }
  if (options.memory_summary) {
    out << "\n";
    Wrapped(out,
            refused.empty()
                ? std::string("PyTorch memory_summary() of the replay at the end of the trace:")
                : absl::StrCat("PyTorch memory_summary() of the replay at the end of the trace "
                               "(the replay's statistics: they count ",
                               refused, ", which the peaks above leave out):"),
            "");
    out << r.memory_summary;
  }
  if (!r.warnings.empty()) {
    out << "\nWarnings:\n";
    for (const std::string& w : r.warnings) Wrapped(out, w, "  - ");
  }
}

void RenderTextReport(const AnalysisReport& report, const TextReportOptions& options,
                      std::ostream& out) {
  if (report.ranks.size() == 1) {
    RenderRankText(report.ranks[0], options, out);
    return;
  }
  const char* unit = report.per_device ? "device" : "rank";
  if (report.per_device) {
    out << absl::StrFormat("fragscope analysis of %s: a snapshot with %d devices' traces\n\n",
                           report.ranks[0].info.path, report.ranks.size());
  } else {
    out << absl::StrFormat("fragscope analysis of %d ranks\n\n", report.ranks.size());
  }
  // At most 100 columns: the OOMs column ("12 (allocator_policy)") is last and unpadded.
  out << absl::StrFormat("  %-6s %-23s %9s %13s %13s %7s %s\n", unit, "log", "events", "peak alloc",
                         "peak reserved", "util", "OOMs");
  for (size_t i = 0; i < report.ranks.size(); ++i) {
    const RankReport& r = report.ranks[i];
    std::string path = r.info.path;
    if (path.size() > 23) path = "..." + path.substr(path.size() - 20);
    const std::string ooms =
        !r.verdict.cause.has_value()
            ? absl::StrCat(r.oom_count)
            : absl::StrFormat("%d (%s)", r.oom_count, OomCauseName(*r.verdict.cause));
    out << absl::StrFormat("%c %-6d %-23s %9d %13s %13s %7s %s\n", report.worst == i ? '>' : ' ',
                           report.per_device ? r.info.device : r.info.rank, path, r.metrics.events,
                           Size(r.metrics.peak_allocated_bytes),
                           Size(r.metrics.peak_reserved_bytes), Percent(r.metrics.utilization),
                           ooms);
  }
  if (report.worst.has_value()) out << absl::StrFormat("\nWorst %s (>): ", unit);
  if (report.worst.has_value()) out << report.worst_reason << "\n";
  if (report.per_device) {
    // A snapshot's devices are few: each one's report in full, in device order.
    for (const RankReport& r : report.ranks) {
      out << absl::StrFormat("\n=== device %d ===\n", r.info.device);
      RenderRankText(r, options, out);
    }
  } else if (report.worst.has_value()) {
    out << "\n";
    RenderRankText(report.ranks[*report.worst], options, out);
  }
}

}  // namespace fragscope
