#include "estimator/term.h"

#include <cmath>
#include <string>

#include "absl/strings/str_format.h"

namespace fragscope::estimator {

absl::string_view StepMomentName(StepMoment moment) {
  switch (moment) {
    case StepMoment::kBackwardStart:
      return "backward start";
    case StepMoment::kBackwardEnd:
      return "backward end";
    case StepMoment::kOptimizerStep:
      return "optimizer step";
    case StepMoment::kAttentionBackward:
      return "last layer's attention backward";
  }
  return "?";
}

absl::string_view StepMomentKey(StepMoment moment) {
  switch (moment) {
    case StepMoment::kBackwardStart:
      return "backward_start";
    case StepMoment::kBackwardEnd:
      return "backward_end";
    case StepMoment::kOptimizerStep:
      return "optimizer_step";
    case StepMoment::kAttentionBackward:
      return "attention_backward";
  }
  return "?";
}

double MemoryEstimate::DeviceBytes() const {
  double sum = 0;
  for (const Term& term : terms) {
    if (term.placement == Placement::kDevice && term.at_peak) sum += term.value;
  }
  return sum;
}

double MemoryEstimate::HostBytes() const {
  double sum = 0;
  for (const Term& term : terms) {
    if (term.placement == Placement::kHost) sum += term.value;
  }
  return sum;
}

const Term* MemoryEstimate::Find(absl::string_view key) const {
  for (const Term& term : terms) {
    if (term.key == key) return &term;
  }
  for (const Term& term : quantities) {
    if (term.key == key) return &term;
  }
  return nullptr;
}

std::string FormatCount(double value) {
  const double rounded = std::round(value);
  if (!std::isfinite(rounded) || std::fabs(rounded) >= 9e18) return absl::StrFormat("%.6g", value);
  const bool negative = rounded < 0;
  std::string digits = absl::StrFormat("%d", static_cast<int64_t>(std::fabs(rounded)));
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[i]);
    const size_t remaining = n - i - 1;
    if (remaining > 0 && remaining % 3 == 0) out.push_back(',');
  }
  return negative ? "-" + out : out;
}

std::string FormatNumber(double value) {
  if (std::isfinite(value) && value == std::round(value) && std::fabs(value) < 9e18) {
    return FormatCount(value);
  }
  return absl::StrFormat("%.6g", value);
}

}  // namespace fragscope::estimator
