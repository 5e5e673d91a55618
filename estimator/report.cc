#include "estimator/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  if (value == std::round(value) && std::fabs(value) < 9e15) {
    return absl::StrFormat("%d", static_cast<int64_t>(value));
  }
  return absl::StrFormat("%.10g", value);
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

std::string QuantitiesJson(const std::vector<Term>& terms) {
  std::string out = "[";
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    absl::StrAppend(
        &out, i ? "," : "", "\n    {\"key\": ", JsonQuote(t.key),
        ", \"label\": ", JsonQuote(t.label), ", \"unit\": ", JsonQuote(UnitName(t.unit)),
        ", \"value\": ", JsonNumber(t.value), ", \"formula\": ", JsonQuote(t.formula),
        ", \"values\": ", JsonQuote(t.values), ", \"source\": ", JsonQuote(t.source), "}");
  }
  absl::StrAppend(&out, terms.empty() ? "]" : "\n  ]");
  return out;
}

std::string ActivationsJson(const std::optional<ActivationAssumptions>& a) {
  if (!a.has_value()) return "null";
  const auto flag = [](bool value) { return value ? "true" : "false"; };
  return absl::StrCat("{\"counted\": ", flag(a->counted), ", \"model\": ", JsonQuote(a->model),
                      ", \"recompute\": ", JsonQuote(a->recompute),
                      ", \"flash_attention\": ", flag(a->flash_attention),
                      ", \"dropout\": ", flag(a->dropout), "}");
}

}  // namespace

std::string FormatSeconds(double seconds) {
  if (seconds >= 1.0) return absl::StrFormat("%.3g s", seconds);
  if (seconds >= 1e-3) return absl::StrFormat("%.4g ms", seconds * 1e3);
  return absl::StrFormat("%.4g us", seconds * 1e6);
}

std::string JsonQuote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
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

std::string RenderJson(const Report& report) {
  const MemoryEstimate& e = report.estimate;
  const double device = e.DeviceBytes();
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"model\": ", JsonQuote(e.model_name), ",\n");
  absl::StrAppend(&out, "  \"workload\": ", JsonQuote(e.workload), ",\n");
  absl::StrAppend(&out, "  \"activations\": ", ActivationsJson(e.activations), ",\n");
  absl::StrAppend(&out, "  \"parameters\": ", JsonNumber(static_cast<double>(e.total_parameters)),
                  ",\n");
  absl::StrAppend(&out, "  \"parameters_on_gpu\": ", JsonNumber(e.parameters_on_gpu), ",\n");
  absl::StrAppend(&out, "  \"terms\": [");
  for (size_t i = 0; i < e.terms.size(); ++i) {
    const Term& t = e.terms[i];
    const double share =
        t.placement == Placement::kDevice && t.at_peak && device > 0 ? t.value / device : 0;
    absl::StrAppend(
        &out, i ? "," : "", "\n    {\"key\": ", JsonQuote(t.key),
        ", \"label\": ", JsonQuote(t.label),
        ", \"placement\": ", JsonQuote(t.placement == Placement::kDevice ? "device" : "host"),
        ", \"at_peak\": ", t.at_peak ? "true" : "false",
        ", \"bytes\": ", JsonNumber(std::round(t.value)), ", \"gib\": ", JsonNumber(t.value / kGiB),
        ", \"share\": ", JsonNumber(share), ", \"formula\": ", JsonQuote(t.formula),
        ", \"values\": ", JsonQuote(t.values), ", \"source\": ", JsonQuote(t.source), "}");
  }
  absl::StrAppend(&out, "\n  ],\n");
  absl::StrAppend(&out, "  \"device_total_bytes\": ", JsonNumber(std::round(device)), ",\n");
  absl::StrAppend(&out, "  \"host_total_bytes\": ", JsonNumber(std::round(e.HostBytes())), ",\n");
  absl::StrAppend(&out, "  \"quantities\": ", QuantitiesJson(e.quantities), ",\n");
  absl::StrAppend(&out, "  \"notes\": [");
  for (size_t i = 0; i < e.notes.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", JsonQuote(e.notes[i]));
  }
  absl::StrAppend(&out, "],\n");
  if (report.has_gpu) {
    const double capacity = report.gpu.memory_bytes;
    absl::StrAppend(&out, "  \"gpu\": {\"name\": ", JsonQuote(report.gpu.name),
                    ", \"description\": ", JsonQuote(report.gpu.description),
                    ", \"memory_bytes\": ", JsonNumber(capacity),
                    ", \"fits\": ", device <= capacity ? "true" : "false",
                    ", \"headroom_bytes\": ", JsonNumber(capacity - device),
                    ", \"used_fraction\": ", JsonNumber(capacity > 0 ? device / capacity : 0),
                    "},\n");
  } else {
    absl::StrAppend(&out, "  \"gpu\": null,\n");
  }
  absl::StrAppend(&out, "  \"timing\": ", QuantitiesJson(report.timing), "\n}\n");
  return out;
}

}  // namespace fragscope::estimator
