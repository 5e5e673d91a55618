#include "estimator/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/json_document.h"
#include "estimator/units.h"

namespace fragscope::estimator {
namespace {

constexpr int kLabelWidth = 58;

std::string Gib(double bytes) { return absl::StrFormat("%.2f", bytes / kGiB); }
// A fit's margin: in GiB, or in MiB where GiB would print 0.00 ("short by 0.00 GiB").
std::string Margin(double bytes) {
  return bytes >= 0.005 * kGiB ? absl::StrCat(Gib(bytes), " GiB")
                               : absl::StrFormat("%.2f MiB", bytes / kMiB);
}

std::string Share(const Term& term, double device_total) {
  if (term.placement == Placement::kHost) return "host";
  if (!term.at_peak) return "no peak";
  if (device_total <= 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * term.value / device_total);
}

std::string Truncate(const std::string& text, size_t width) {
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

std::string FormatQuantity(const Term& term) {
  switch (term.unit) {
    case Unit::kBytes:
      return absl::StrCat(FormatCount(term.value), " B (", Gib(term.value), " GiB)");
    case Unit::kSeconds:
      return FormatSeconds(term.value);
    case Unit::kFlops:
      return absl::StrFormat("%.4g FLOP", term.value);
    case Unit::kCount:
      return FormatCount(term.value);
  }
  return "";
}

std::string UnitName(Unit unit) {
  switch (unit) {
    case Unit::kBytes:
      return "bytes";
    case Unit::kSeconds:
      return "seconds";
    case Unit::kFlops:
      return "flops";
    case Unit::kCount:
      return "count";
  }
  return "?";
}

void AppendExplainEntry(const Term& term, std::string& out) {
  absl::StrAppend(&out, term.label, " = ", FormatQuantity(term), "\n");
  absl::StrAppend(&out, "    formula: ", term.formula, "\n");
  absl::StrAppend(&out, "    values:  ", term.values, "\n");
  absl::StrAppend(&out, "    source:  ", term.source, "\n");
}

// Numbers keep ten significant digits; whole numbers print as integers.
OrderedJson Number(double value) { return JsonNumber(value, 10); }

OrderedJson QuantitiesJson(const std::vector<Term>& terms) {
  OrderedJson out = OrderedJson::array();
  for (const Term& t : terms) {
    out.push_back({{"key", t.key},
                   {"label", t.label},
                   {"unit", UnitName(t.unit)},
                   {"value", Number(t.value)},
                   {"formula", t.formula},
                   {"values", t.values},
                   {"source", t.source}});
  }
  return out;
}

OrderedJson ActivationsJson(const std::optional<ActivationAssumptions>& a) {
  if (!a.has_value()) return nullptr;
  return {{"counted", a->counted},
          {"model", a->model},
          {"recompute", a->recompute},
          {"flash_attention", a->flash_attention},
          {"dropout", a->dropout}};
}

}  // namespace

std::string FormatSeconds(double seconds) {
  if (seconds >= 1.0) return absl::StrFormat("%.3g s", seconds);
  if (seconds >= 1e-3) return absl::StrFormat("%.4g ms", seconds * 1e3);
  return absl::StrFormat("%.4g us", seconds * 1e6);
}

std::string RenderText(const Report& report) {
  const MemoryEstimate& e = report.estimate;
  const double device = e.DeviceBytes();
  const double host = e.HostBytes();
  std::string out = absl::StrCat(
      e.model_name, ": ", FormatCount(static_cast<double>(e.total_parameters)), " parameters; ",
      FormatCount(e.parameters_on_gpu), " in this GPU's tensor/pipeline shard\n", e.workload, "\n");
  absl::StrAppend(&out, "Per-GPU memory of the most-loaded rank; GiB = 2^30 bytes.\n\n");
  absl::StrAppend(&out, absl::StrFormat("  %-*s %18s %10s %7s\n", kLabelWidth, "term", "bytes",
                                        "GiB", "share"));
  for (const Term& term : e.terms) {
    absl::StrAppend(
        &out,
        absl::StrFormat("  %-*s %18s %10s %7s\n", kLabelWidth, Truncate(term.label, kLabelWidth),
                        FormatCount(term.value), Gib(term.value), Share(term, device)));
  }
  absl::StrAppend(&out, "  ", std::string(kLabelWidth + 38, '-'), "\n");
  absl::StrAppend(&out, absl::StrFormat("  %-*s %18s %10s %7s\n", kLabelWidth, "total on GPU",
                                        FormatCount(device), Gib(device), "100.0%"));
  if (const std::optional<StepPeaks>& p = e.step_peaks) {
    absl::StrAppend(&out, "  peak at the ", StepMomentName(p->peak), " (backward start ",
                    Gib(p->backward_start), " GiB, backward end ", Gib(p->backward_end),
                    " GiB, optimizer step ", Gib(p->optimizer_step), " GiB)\n");
  }
  if (host > 0) {
    absl::StrAppend(&out, absl::StrFormat("  %-*s %18s %10s %7s\n", kLabelWidth,
                                          "total on host (CPU offload, this rank)",
                                          FormatCount(host), Gib(host), "host"));
  }
  if (report.has_gpu) {
    const double capacity = report.gpu.memory_bytes;
    const double used = capacity > 0 ? device / capacity : 0;
    absl::StrAppend(
        &out, "\nGPU ", report.gpu.name, " (", report.gpu.description, "): ", Gib(capacity),
        " GiB visible to CUDA; the total is ", absl::StrFormat("%.1f%%", 100.0 * used), " of it: ",
        device <= capacity ? absl::StrCat("fits, ", Margin(capacity - device), " free")
                           : absl::StrCat("DOES NOT FIT, short by ", Margin(device - capacity)),
        "\n");
  }
  if (!report.timing.empty()) {
    absl::StrAppend(&out, "\nRoofline time (", report.gpu.name, "):\n");
    for (const Term& term : report.timing) {
      if (term.unit != Unit::kSeconds) continue;
      absl::StrAppend(&out, "  ", term.label, ": ", FormatSeconds(term.value), "\n");
    }
  }
  for (const std::string& note : e.notes) absl::StrAppend(&out, "note: ", note, "\n");
  return out;
}

std::string RenderExplain(const Report& report) {
  std::string out = RenderText(report);
  absl::StrAppend(&out, "\nHow each number was computed:\n\n");
  for (const Term& term : report.estimate.quantities) AppendExplainEntry(term, out);
  for (const Term& term : report.estimate.terms) AppendExplainEntry(term, out);
  for (const Term& term : report.timing) AppendExplainEntry(term, out);
  if (report.has_gpu) {
    absl::StrAppend(&out, "GPU ", report.gpu.name, ": ", FormatCount(report.gpu.memory_bytes),
                    " B, ", absl::StrFormat("%.4g", report.gpu.peak_flops), " FLOP/s, ",
                    absl::StrFormat("%.4g", report.gpu.bandwidth),
                    " B/s\n    source:  ", report.gpu.source, "\n");
  }
  return out;
}

OrderedJson ReportJson(const Report& report) {
  const MemoryEstimate& e = report.estimate;
  const double device = e.DeviceBytes();
  OrderedJson j;
  j["model"] = e.model_name;
  j["workload"] = e.workload;
  j["activations"] = ActivationsJson(e.activations);
  j["parameters"] = Number(static_cast<double>(e.total_parameters));
  j["parameters_on_gpu"] = Number(e.parameters_on_gpu);
  OrderedJson terms = OrderedJson::array();
  for (const Term& t : e.terms) {
    const double share =
        t.placement == Placement::kDevice && t.at_peak && device > 0 ? t.value / device : 0;
    terms.push_back({{"key", t.key},
                     {"label", t.label},
                     {"placement", t.placement == Placement::kDevice ? "device" : "host"},
                     {"at_peak", t.at_peak},
                     {"bytes", Number(std::round(t.value))},
                     {"gib", Number(t.value / kGiB)},
                     {"share", Number(share)},
                     {"formula", t.formula},
                     {"values", t.values},
                     {"source", t.source}});
  }
  j["terms"] = std::move(terms);
  j["device_total_bytes"] = Number(std::round(device));
  if (const std::optional<StepPeaks>& p = e.step_peaks) {
    j["step_peaks"] = {{"peak", StepMomentKey(p->peak)},
                       {"backward_start_bytes", Number(std::round(p->backward_start))},
                       {"backward_end_bytes", Number(std::round(p->backward_end))},
                       {"attention_backward_bytes", Number(std::round(p->attention_backward))},
                       {"optimizer_step_bytes", Number(std::round(p->optimizer_step))}};
  } else {
    j["step_peaks"] = nullptr;
  }
  j["host_total_bytes"] = Number(std::round(e.HostBytes()));
  j["quantities"] = QuantitiesJson(e.quantities);
  j["notes"] = e.notes;
  if (report.has_gpu) {
    const double capacity = report.gpu.memory_bytes;
    j["gpu"] = {{"name", report.gpu.name},
                {"description", report.gpu.description},
                {"memory_bytes", Number(capacity)},
                {"fits", device <= capacity},
                {"headroom_bytes", Number(capacity - device)},
                {"used_fraction", Number(capacity > 0 ? device / capacity : 0)}};
  } else {
    j["gpu"] = nullptr;
  }
  j["timing"] = QuantitiesJson(report.timing);
  return j;
}

std::string RenderJson(const Report& report) { return DumpJson(ReportJson(report)); }

}  // namespace fragscope::estimator
