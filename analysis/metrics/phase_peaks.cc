#include "analysis/metrics/phase_peaks.h"

#include <cctype>
#include <utility>

#include "fslog/fslog_format.h"

namespace fragscope {

std::string PhaseKindOf(std::string_view marker_text) {
  std::string lower(marker_text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("optim") != std::string::npos || lower.find(".step") != std::string::npos) {
    return "optimizer";
  }
  if (lower.find("backward") != std::string::npos) return "backward";
  if (lower.find("forward") != std::string::npos) return "forward";
  std::string kind;
  for (size_t i = 0; i < marker_text.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(marker_text[i]))) {
      kind.push_back('N');
      while (i + 1 < marker_text.size() &&
             std::isdigit(static_cast<unsigned char>(marker_text[i + 1]))) {
        ++i;
      }
    } else {
      kind.push_back(marker_text[i]);
    }
  }
  return std::string(TruncateUtf8(kind, 48));
}

PhasePeakCollector::PhasePeakCollector(const Replayer& replayer, const MetricsCollector& metrics)
    : replayer_(replayer),
      metrics_(metrics),
      high_reserved_(metrics.reserved_now()),
      high_allocated_(metrics.allocated_now()) {}

PhaseRise& PhasePeakCollector::Current() {
  const std::string& text = replayer_.current_phase();
  if (last_index_ != SIZE_MAX && text == last_text_) return phases_[last_index_];
  std::string kind = PhaseKindOf(text);
  size_t index = 0;
  while (index < phases_.size() && phases_[index].phase != kind) ++index;
  if (index == phases_.size()) {
    if (phases_.size() + 1 >= kMaxPhases) {  // the last entry gathers every further kind
      if (phases_.back().phase != kOtherPhases) phases_.push_back(PhaseRise{kOtherPhases, 0, 0});
      index = phases_.size() - 1;
    } else {
      phases_.push_back(PhaseRise{std::move(kind), 0, 0});
    }
  }
  last_text_ = text;
  last_index_ = index;
  return phases_[index];
}

void PhasePeakCollector::OnOpDone(const TraceEvent&) {
  const uint64_t reserved = metrics_.reserved_now();
  const uint64_t allocated = metrics_.allocated_now();
  if (reserved <= high_reserved_ && allocated <= high_allocated_) [[likely]] {
    return;
  }
  PhaseRise& phase = Current();
  if (reserved > high_reserved_) {
    phase.reserved_rise_bytes += reserved - high_reserved_;
    high_reserved_ = reserved;
  }
  if (allocated > high_allocated_) {
    phase.allocated_rise_bytes += allocated - high_allocated_;
    high_allocated_ = allocated;
  }
}

}  // namespace fragscope
